#!/usr/bin/env bash
# A real live migration, on the build machine (issue 13, item 3): two QEMU
# processes of one VM, the destination started with -incoming and the
# source sent QMP `migrate` over loopback, then `quit` (as libvirt does once
# the destination runs). Each copy runs in a PID namespace of its own
# (unshare --pid --mount-proc) with a cs-agent of its own, hv-a and hv-b,
# each finding VMs in its namespace's /proc only: two "hosts" on one
# machine. csd, csctl and the agents talk over loopback.
#
# Sampled every ~150 ms from before the migration until the destination is
# the only host left (tests/integration/live_migration.py watch), it
# checks (live_migration.py check):
#  - csd's owner of the VM is never empty and changes exactly once, hv-a to
#    hv-b, with one ChangeOwner audit record;
#  - no conflict, and csd never shows the VM fail-closed;
#  - neither copy is fail-closed: each agent's state file holds the VM's
#    assignment (its trust group) in every sample while its copy runs. This
#    machine has no core scheduling (prctl fails with EINVAL), so the
#    agents report every VM "failed" and no cookie can be read back; what
#    an agent would enforce is the assignment it holds. The lab scenario
#    live_migration reads the cookies back on a core-scheduling kernel;
#  - the store revision grows by at most 2 over the whole migration
#    (docs/mobility.md: the destination joins, the source leaves), and
#    store writes stay within what Reports at their minimum gap of 1 s
#    could cause (a flapping owner gave ~300 writes a second).
#
#   live_migration_test.sh CSD CS_AGENT CSCTL
#
# Needs root (PID namespaces), /usr/bin/qemu-system-x86_64, /usr/bin/python3,
# protoc (the agent's state file is decoded with the project's protos),
# unshare and nsenter. Takes ~30 s; keeps its work folder on failure.
set -euo pipefail

[ $# = 3 ] || { echo "usage: $0 CSD CS_AGENT CSCTL" >&2; exit 2; }
csd_bin=$1 agent_bin=$2 csctl_bin=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
py=/usr/bin/python3
tool=$here/live_migration.py
qemu=/usr/bin/qemu-system-x86_64

fail() { echo "FAIL: $*" >&2; exit 1; }
# Missing tools are a failure, not a skip: CI runs this as root with them.
[ "$(id -u)" = 0 ] || fail "needs root (PID namespaces)"
for tool_path in "$qemu" "$py" "$csd_bin" "$agent_bin" "$csctl_bin"; do
  [ -x "$tool_path" ] || fail "$tool_path is missing"
done
for cmd in protoc unshare nsenter pgrep; do
  command -v $cmd >/dev/null || fail "$cmd not found"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/live-migration.XXXXXX")
ns_pids=()
csd_pid=""
ok=0
cleanup() {
  local pid
  # SIGKILL to unshare: --kill-child then kills each namespace's init, and
  # with it every process of the namespace. unshare ignores SIGTERM.
  for pid in "${ns_pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  [ -z "$csd_pid" ] || kill -TERM "$csd_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ $ok = 1 ]; then
    rm -rf "$work"
  else
    echo "logs kept in $work" >&2
    for log in "$work"/*.log; do
      [ -f "$log" ] && { echo "--- $(basename "$log") (last 15 lines)"; tail -n 15 "$log"; } >&2
    done
  fi
}
trap cleanup EXIT

free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ms_now() { date +%s%3N; }
# wait_until SECONDS COMMAND...: polls every 100 ms.
wait_until() {
  local deadline=$(($(date +%s) + $1)); shift
  until "$@" 2>/dev/null; do
    [ "$(date +%s)" -lt $deadline ] || return 1
    sleep 0.1
  done
}
metric() { curl -s --max-time 2 "$1" | awk -v k="$2" '$1 == k {print $2}'; }
metrics_url() { sed -n 's|.*metrics on \(http://[^ ]*/metrics\).*|\1|p' "$1" | tail -1; }

export CSCTL_SERVER=127.0.0.1:$(free_port)
csctl() { "$csctl_bin" --timeout 5 "$@"; }

# Plaintext on loopback: csctl here is admin and the agents act for their
# hosts only because this csd.yaml says so (csd's defaults: viewer, no host).
printf 'plaintext_role: admin\nplaintext_agents: true\nlocal_socket: {path: "off"}\n' >"$work/csd.yaml"
"$csd_bin" --config "$work/csd.yaml" --listen "$CSCTL_SERVER" --data-dir "$work/csd" \
  --metrics-listen 127.0.0.1:0 >"$work/csd.log" 2>&1 &
csd_pid=$!
wait_until 30 csctl hosts ls >/dev/null || fail "csd did not start"
csd_metrics=$(metrics_url "$work/csd.log")
[ -n "$csd_metrics" ] || fail "csd logged no metrics address"
uuid=5a1e0000-0000-4000-8000-00000000beef
csctl tag vm-mig --tenant acme >/dev/null || fail "csctl tag vm-mig"
group=$(csctl get vm-mig -o json | sed -n 's/.*"trust_group": "\([^"]*\)".*/\1/p')

# start_host HOST: a PID namespace with HOST's agent in it. The agent starts
# first, as PID 2: procfs discovery takes PID 2 for kthreadd and never
# looks at its command line (discovery/procfs_discovery.cc, kKthreadd), so
# a QEMU that got PID 2 of a namespace would not be found. Sets NS_INIT
# (the namespace's init, in this namespace's numbering).
start_host() {
  local host=$1 unshare_pid
  mkdir -p "$work/state-$host"
  cat >"$work/agent-$host.yaml" <<EOF
server: "$CSCTL_SERVER"
host_id: $host
state_dir: $work/state-$host
discovery: procfs
metrics_listen: "127.0.0.1:0"
# Both agents share this machine's tracefs: no collector.
telemetry:
  enabled: false
EOF
  unshare --pid --fork --mount-proc --kill-child \
    sh -c "'$agent_bin' --config '$work/agent-$host.yaml' >>'$work/agent-$host.log' 2>&1 & wait" &
  unshare_pid=$!
  ns_pids+=("$unshare_pid")
  wait_until 10 pgrep -P "$unshare_pid" >/dev/null || fail "no namespace init for $host"
  NS_INIT=$(pgrep -P "$unshare_pid")
  # grep without -q reads to the end: with pipefail, a grep that quits at
  # the first match can fail the pipeline with csctl's SIGPIPE.
  host_connected() { csctl hosts get "$1" -o json | grep '"connected": true' >/dev/null; }
  wait_until 30 host_connected "$host" || fail "$host's agent did not connect to csd"
}

# start_qemu NS_INIT NAME [ARGS...]: a QEMU of vm-mig in that namespace,
# its monitor on $work/NAME.sock. Sets QEMU_PID (this namespace's numbering).
start_qemu() {
  local init=$1 name=$2 nsenter_pid; shift 2
  nsenter -t "$init" -p -m -- "$qemu" -name vm-mig -uuid $uuid -machine pc -m 32 \
    -nodefaults -display none -accel tcg -qmp "unix:$work/$name.sock,server=on,wait=off" \
    "$@" >"$work/qemu-$name.log" 2>&1 &
  nsenter_pid=$!
  wait_until 10 pgrep -P "$nsenter_pid" >/dev/null || fail "QEMU $name did not start"
  QEMU_PID=$(pgrep -P "$nsenter_pid")
  wait_until 10 test -S "$work/$name.sock" || fail "QEMU $name has no monitor socket"
}

vm_json() { csctl get vm-mig -o json | tr -d ' \n'; }
on_hosts() { [ "$(vm_json | grep -o '"host_id":"hv-[ab]","run_state"' | sort | tr -d '\n')" = "$1" ]; }
state_holds() {  # HOST: its agent's state file holds vm-mig's assignment
  "$py" -c "import sys; sys.path.insert(0, '$here'); import live_migration as m
sys.exit(m.state_assignment('$work/state-$1', 'vm-mig', 'protoc', '$repo/proto') != '$group')"
}

start_host hv-a
init_a=$NS_INIT
start_qemu "$init_a" source
src=$QEMU_PID
wait_until 30 on_hosts '"host_id":"hv-a","run_state"' || fail "csd does not show vm-mig on hv-a: $(vm_json)"
wait_until 30 state_holds hv-a || fail "hv-a's agent holds no assignment for vm-mig"

start_host hv-b
init_b=$NS_INIT
# hv-b's first (empty) Report, then at least one minimum Report gap (1 s):
# the baseline holds everything before the destination's QEMU exists.
reported() { csctl hosts get hv-b -o json | grep '"last_seen_time"' >/dev/null; }
wait_until 30 reported || fail "hv-b's agent never reported"
sleep 1.5
rev_base=$(metric "$csd_metrics" cosched_store_revision)
writes_base=$(metric "$csd_metrics" 'cosched_store_writes_total{code="OK"}')
[ -n "$rev_base" ] && [ -n "$writes_base" ] || fail "no revision or writes in csd's /metrics"
t_base=$(ms_now)

mport=$(free_port)
start_qemu "$init_b" dest -incoming "tcp:127.0.0.1:$mport"
dst=$QEMU_PID
wait_until 30 on_hosts '"host_id":"hv-a","run_state""host_id":"hv-b","run_state"' ||
  fail "csd does not show vm-mig on both hosts: $(vm_json)"
wait_until 30 state_holds hv-b || fail "hv-b's agent holds no assignment for vm-mig"
t_both=$(ms_now)
echo "vm-mig on hv-a and hv-b, both agents hold its assignment ($group): $((t_both - t_base)) ms after the destination QEMU started"

"$py" "$tool" watch --out "$work/samples.jsonl" --stop "$work/stop" --interval-ms 150 \
  --csctl "$csctl_bin" --vm vm-mig --csd-metrics "$csd_metrics" \
  --agent-metrics "hv-a=$(metrics_url "$work/agent-hv-a.log")" \
  --agent-metrics "hv-b=$(metrics_url "$work/agent-hv-b.log")" \
  --state "hv-a=$work/state-hv-a" --state "hv-b=$work/state-hv-b" \
  --protoc protoc --proto-dir "$repo/proto" --pid "source=$src" --pid "dest=$dst" \
  >"$work/watch.log" 2>&1 &
watcher=$!
# The migration starts once the watch has sampled the overlap.
first_samples() { grep -q '"kind": "ctl"' "$work/samples.jsonl"; }
wait_until 60 first_samples || fail "the watcher took no sample: $(tail -5 "$work"/watch.log)"
sleep 1

# 128 KiB/s: this VM (no guest OS) sends ~0.5 MB, so the migration takes a
# few seconds, long enough to sample its middle.
t_migrate=$(ms_now)
figures=$("$py" "$tool" migrate "$work/source.sock" "127.0.0.1:$mport" 131072) ||
  fail "migration failed: $figures"
t_migrated=$(ms_now)
echo "migration: $figures"
dest_status=$("$py" "$tool" qmp "$work/dest.sock" query-status)
echo "$dest_status" | grep -q '"status": "running"' || fail "the destination does not run after the migration: $dest_status"
sleep 1  # both copies exist, the destination running, the source paused
t_quit=$(ms_now)
"$py" "$tool" qmp "$work/source.sock" quit >/dev/null || fail "QMP quit to the source"
wait_until 10 sh -c "! kill -0 $src" || fail "the source QEMU did not exit"
wait_until 30 on_hosts '"host_id":"hv-b","run_state"' || fail "csd still shows vm-mig on hv-a: $(vm_json)"
t_moved=$(ms_now)
echo "source quit to csd showing only hv-b: $((t_moved - t_quit)) ms"
# Anything still to be written (a late Report) lands within 3 s.
sleep 3
touch "$work/stop"
wait $watcher || fail "the watcher failed: $(tail -5 "$work/watch.log")"
kill -0 "$dst" || fail "the destination QEMU is gone"

csctl audit --vm vm-mig -o json >"$work/audit.json" || fail "csctl audit"
# Writes: every Report of the two agents over the window at their minimum
# gap (1 s) would be $((2 * window)); unchanged Reports write nothing.
window=$(( ($(ms_now) - t_base) / 1000 + 1 ))
"$py" "$tool" check --samples "$work/samples.jsonl" --from hv-a --to hv-b \
  --revision-base "$rev_base" --writes-base "$writes_base" \
  --max-revisions 2 --max-writes $((2 * window)) \
  --state-while hv-a=source --state-while hv-b=dest --audit "$work/audit.json" \
  --event "migrate=$t_migrate" --event "migrated=$t_migrated" --event "quit=$t_quit" ||
  fail "live migration check failed (samples in $work/samples.jsonl)"
ok=1
echo "PASS"
