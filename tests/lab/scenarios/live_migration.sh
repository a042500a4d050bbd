# A real live migration on a core-scheduling kernel (run_lab.sh --root9p;
# issue 13, item 3): one guest, two PID namespaces (unshare --pid
# --mount-proc), each a "host" with a cs-agent of its own (hv-a, hv-b)
# finding VMs in its namespace's /proc only. The real QEMU of vm-mig runs in
# hv-a's namespace; a second QEMU of it, started with -incoming, waits in
# hv-b's; QMP `migrate` over loopback moves it, then the source gets `quit`
# (as libvirt does once the destination runs).
#
# Each namespace also runs a paused QEMU of a peer VM of vm-mig's trust
# group (tenant acme, isolation tenant): the cookie that peer holds is that
# host's group cookie, so a copy of vm-mig that held a fail-closed cookie
# of its own would differ from it.
#
# From before the migration until the destination is the only host left,
# the lab's own reader (lab_cookies) reads every thread of both copies and
# both peers every ~100 ms (~170 ms measured: one lab_cookies run per
# sample), and csctl, csd's and the agents' /metrics as often as csctl can
# (~1.5 s apart in this guest): tests/integration/live_migration.py watch.
# Fails (live_migration.py check) when
#  - any thread of either copy leaves its copy's cookie (to 0 or to any
#    other) while its QEMU runs, or a copy does not share its peer's cookie;
#  - csd's owner is ever empty or changes other than once, hv-a to hv-b, or
#    there is not exactly one ChangeOwner audit record;
#  - either agent counts a VM fail-closed, or csd shows it fail-closed;
#  - the store revision grows by more than 2 (docs/mobility.md: the
#    destination joins, the source leaves).
. "$LAB_GUEST/lib.sh"
set -u
trap lab_keep_logs EXIT
lab_check_topology

py=/usr/bin/python3
# $LAB_GUEST is <source tree>/tests/lab/guest (LAB_SRC is not exported).
tool=$(cd "$LAB_GUEST/../../integration" && pwd)/live_migration.py
qemu=/usr/bin/qemu-system-x86_64
work=/tmp/mig
mkdir -p $work
uuid=5a1e0000-0000-4000-8000-00000000beef
peer_uuid_a=5a1e0000-0000-4000-8000-0000000000a1
peer_uuid_b=5a1e0000-0000-4000-8000-0000000000b1

# lab_wait_secs (libvirt.sh) bounds waits in real time: every poll that
# starts a program is slow in this guest.
. "$LAB_GUEST/libvirt.sh"
ms_now() { date +%s%3N; }
metric() { wget -q -O - "$1" 2>/dev/null | awk -v k="$2" '$1 == k {print $2}'; }
metrics_url() { sed -n 's|.*metrics on \(http://[^ ]*/metrics\).*|\1|p' "$1" | tail -1; }

lab_start_csd
csd_metrics=$(metrics_url /tmp/csd.log)
[ -n "$csd_metrics" ] || lab_fail "csd logged no metrics address"
for vm in vm-mig vm-peer-a vm-peer-b; do
  csctl tag $vm --tenant acme --isolation tenant >/dev/null || lab_fail "csctl tag $vm"
done

# start_host HOST: a PID namespace with HOST's agent in it, started first so
# that it is PID 2 there: procfs discovery takes PID 2 for kthreadd and never
# reads its command line (discovery/procfs_discovery.cc, kKthreadd). The
# kernel sends proc connector events to listeners in the initial PID
# namespace only, so these agents find new processes by their rescan: every
# second here. Sets NS_INIT (the namespace's init, in the guest's numbering).
start_host() {
  local host=$1 unshare_pid
  mkdir -p $work/state-$host
  cat >$work/agent-$host.yaml <<EOF
server: "$CSCTL_SERVER"
host_id: $host
state_dir: $work/state-$host
discovery: procfs
rescan_interval_ms: 1000
metrics_listen: "127.0.0.1:0"
# Both agents share the guest's tracefs: no collector.
telemetry:
  enabled: false
EOF
  unshare --pid --fork --mount-proc --kill-child \
    sh -c "cs-agent --config $work/agent-$host.yaml >>/tmp/agent-$host.log 2>&1 & wait" &
  unshare_pid=$!
  lab_wait_secs 20 pgrep -P $unshare_pid >/dev/null || lab_fail "no namespace init for $host"
  NS_INIT=$(pgrep -P $unshare_pid)
  lab_wait_secs 60 sh -c "csctl hosts get $host -o json | grep -q '\"connected\": true'" ||
    { tail -20 /tmp/agent-$host.log; lab_fail "$host's agent did not connect to csd"; }
}

# start_qemu NS_INIT NAME VM UUID [ARGS...]: a QEMU in that namespace, its
# monitor on $work/NAME.sock. Sets QEMU_PID (the guest's numbering).
start_qemu() {
  local init=$1 name=$2 vm=$3 id=$4 nsenter_pid
  shift 4
  nsenter -t $init -p -m -- $qemu -name $vm -uuid $id -machine pc -m 32 -nodefaults \
    -display none -accel tcg -qmp unix:$work/$name.sock,server=on,wait=off "$@" \
    >$work/qemu-$name.log 2>&1 &
  nsenter_pid=$!
  lab_wait_secs 30 pgrep -P $nsenter_pid >/dev/null || lab_fail "QEMU $name did not start"
  QEMU_PID=$(pgrep -P $nsenter_pid)
  lab_wait_secs 30 test -S $work/$name.sock ||
    { cat $work/qemu-$name.log; lab_fail "QEMU $name has no monitor socket"; }
}

# same_cookie A B: every thread of both processes holds one non-zero cookie.
same_cookie() {
  local a b
  lab_has_one_cookie "$1" && lab_has_one_cookie "$2" || return 1
  a=$(lab_cookies_of "$1")
  b=$(lab_cookies_of "$2")
  [ "$a" = "$b" ]
}
no_fail_closed() { [ "$(metric "$1" 'cosched_agent_vms{state="fail-closed"}')" = 0 ]; }
on_hosts() {
  [ "$(csctl get vm-mig -o json | tr -d ' \n' | grep -o '"host_id":"hv-[ab]","run_state"' | tr -d '\n')" = "$1" ]
}

start_host hv-a
init_a=$NS_INIT
agent_a_metrics=$(metrics_url /tmp/agent-hv-a.log)
start_qemu $init_a source vm-mig $uuid
src=$QEMU_PID
start_qemu $init_a peer-a vm-peer-a $peer_uuid_a -S
peer_a=$QEMU_PID
lab_wait_secs 90 same_cookie $src $peer_a ||
  lab_fail "the source does not share its peer's cookie on hv-a: $(lab_cookies $src $peer_a | tr '\n' ';')"
lab_wait_secs 60 on_hosts '"host_id":"hv-a","run_state"' ||
  lab_fail "csd does not show vm-mig on hv-a: $(csctl get vm-mig -o json | tr -d '\n')"

start_host hv-b
init_b=$NS_INIT
agent_b_metrics=$(metrics_url /tmp/agent-hv-b.log)
start_qemu $init_b peer-b vm-peer-b $peer_uuid_b -S
peer_b=$QEMU_PID
lab_wait_secs 60 lab_has_one_cookie $peer_b || lab_fail "vm-peer-b is not tagged on hv-b"
lab_wait_enforced_secs vm-peer-b 60
lab_wait_secs 30 no_fail_closed "$agent_b_metrics" || lab_fail "hv-b's agent counts a VM fail-closed before the migration"
# One minimum Report gap (1 s) more: the baseline holds everything before
# the destination's QEMU exists.
sleep 2
rev_base=$(metric "$csd_metrics" cosched_store_revision)
writes_base=$(metric "$csd_metrics" 'cosched_store_writes_total{code="OK"}')
[ -n "$rev_base" ] && [ -n "$writes_base" ] || lab_fail "no revision or writes in csd's /metrics"
t_base=$(ms_now)

mport=4444
start_qemu $init_b dest vm-mig $uuid -incoming tcp:127.0.0.1:$mport
dst=$QEMU_PID
# The agent first gives the new copy a cookie of its own (it holds no
# assignment for it yet), reports it, and csd sends hv-b the VM's
# assignment: then the copy moves to the group's cookie, its peer's.
lab_wait_secs 90 same_cookie $dst $peer_b ||
  lab_fail "the destination does not share its peer's cookie on hv-b: $(lab_cookies $dst $peer_b | tr '\n' ';')"
lab_wait_secs 60 on_hosts '"host_id":"hv-a","run_state""host_id":"hv-b","run_state"' ||
  lab_fail "csd does not show vm-mig on both hosts: $(csctl get vm-mig -o json | tr -d '\n')"
lab_wait_secs 30 no_fail_closed "$agent_b_metrics" || lab_fail "hv-b's agent still counts a VM fail-closed"
lab_result "destination on the group's cookie" "$(($(ms_now) - t_base)) ms after its QEMU started ($(lab_cookies $dst | wc -l) threads on $(lab_cookies_of $dst), as vm-peer-b; the source and vm-peer-a on $(lab_cookies_of $src))"

"$py" "$tool" watch --out $work/samples.jsonl --stop $work/stop --interval-ms 250 \
  --csctl "$(command -v csctl)" --vm vm-mig --csd-metrics "$csd_metrics" \
  --agent-metrics "hv-a=$agent_a_metrics" --agent-metrics "hv-b=$agent_b_metrics" \
  --pid source=$src --pid dest=$dst \
  --lab-cookies "$(command -v lab_cookies)" --cookie-interval-ms 100 \
  --cookie-pid source=$src --cookie-pid dest=$dst --cookie-pid peer-a=$peer_a --cookie-pid peer-b=$peer_b \
  >$work/watch.log 2>&1 &
watcher=$!
# The migration starts once the watch has sampled the overlap.
first_samples() { grep -q '"kind": "ctl"' $work/samples.jsonl && [ "$(grep -c '"kind": "cookies"' $work/samples.jsonl)" -ge 3 ]; }
lab_wait_secs 120 first_samples || lab_fail "the watcher took no sample: $(tail -5 $work/watch.log)"
sleep 1

# 128 KiB/s: this VM (no guest OS) sends ~0.5 MB, a few seconds.
t_migrate=$(ms_now)
figures=$("$py" "$tool" migrate $work/source.sock 127.0.0.1:$mport 131072) ||
  lab_fail "migration failed: $figures"
t_migrated=$(ms_now)
lab_result "migration" "$figures"
status=$("$py" "$tool" qmp $work/dest.sock query-status)
echo "$status" | grep -q '"status": "running"' || lab_fail "the destination does not run after the migration: $status"
sleep 1
t_quit=$(ms_now)
"$py" "$tool" qmp $work/source.sock quit >/dev/null || lab_fail "QMP quit to the source"
lab_wait_secs 20 sh -c "! kill -0 $src" || lab_fail "the source QEMU did not exit"
lab_wait_secs 60 on_hosts '"host_id":"hv-b","run_state"' ||
  lab_fail "csd still shows vm-mig on hv-a: $(csctl get vm-mig -o json | tr -d '\n')"
lab_result "source quit to csd showing only hv-b" "$(($(ms_now) - t_quit)) ms"
# Anything still to be written (a late Report) lands within 3 s.
sleep 3
touch $work/stop
wait $watcher || lab_fail "the watcher failed: $(tail -5 $work/watch.log)"
kill -0 $dst || lab_fail "the destination QEMU is gone"

csctl audit --vm vm-mig -o json >$work/audit.json || lab_fail "csctl audit"
window=$(( ($(ms_now) - t_base) / 1000 + 1 ))
"$py" "$tool" check --samples $work/samples.jsonl --from hv-a --to hv-b \
  --revision-base "$rev_base" --writes-base "$writes_base" \
  --max-revisions 2 --max-writes $((2 * window)) --audit $work/audit.json \
  --min-ctl-samples 5 \
  --same-cookie source=peer-a --same-cookie dest=peer-b \
  --event migrate=$t_migrate --event migrated=$t_migrated --event quit=$t_quit \
  >$work/check.txt 2>&1
check=$?
cp $work/samples.jsonl $work/check.txt /tmp/agent-hv-a.log /tmp/agent-hv-b.log "$LAB_OUT/" 2>/dev/null
grep -v '^FAIL' $work/check.txt | while read -r line; do lab_result "check" "$line"; done
[ $check = 0 ] || lab_fail "$(grep '^FAIL' $work/check.txt | head -5 | tr '\n' ' ')"
