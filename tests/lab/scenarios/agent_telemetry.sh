# Sibling-sharing telemetry, live against an independent count. Two
# CPU-bound VMs of two tenants, each core running one vCPU of each (as in
# agent_two_tenants). cs-agent runs its collector (1 s windows) with
# fail_open, so the VMs run untagged until `csctl tag`. The lab records its
# own text trace of the same run in tracefs' top-level instance, with the
# `tai` clock, which is the wall clock here (nothing set a TAI offset), so
# its timestamps compare with the windows' Unix times.
# - Live foreign share (the agent's /metrics counters over a few windows):
#   over 50% untagged, at most 2% tagged.
# - Live against offline: csd's GetStats over the whole run gives the exact
#   span of the windows it summed; `csctl analyze --from --to` over that span
#   of the lab's trace must agree within 1 percentage point per VM.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT
lab_check_topology

lab_start_vm vm-1 -uuid 00000000-0000-4000-8000-000000000001 -smp 2 --cpus 0-3 --vcpu-cpus 0,2
vm1=$LAB_PID
lab_start_vm vm-2 -uuid 00000000-0000-4000-8000-000000000002 -smp 2 --cpus 0-3 --vcpu-cpus 1,3
vm2=$LAB_PID

# Fewer cookie switches per second (see lab_stretch_slices), as in the
# other foreign-time scenarios.
lab_stretch_slices
t=$LAB_TRACEFS
lab_trace_setup
echo tai >"$t/trace_clock" || lab_fail "no tai trace clock"
echo >"$t/trace"
echo 1 >"$t/tracing_on"
lab_log "tracing; starting csd"

lab_start_csd
cat >/tmp/agent.yaml <<EOF
server: "$CSCTL_SERVER"
host_id: lab
state_dir: /tmp/agent
discovery: procfs
fail_open: true
report_interval_s: 1
metrics_listen: "127.0.0.1:9464"
telemetry:
  enabled: true
  buffer_size_kb: 2048
  # The collector is a host task too: what it runs on a VM's sibling is
  # foreign time. Read less often than the default 100 ms in the slow guest.
  poll_interval_ms: 500
EOF
cs-agent --config /tmp/agent.yaml >>/tmp/agent.log 2>&1 &
AGENT_PID=$!
lab_log "agent started"
lab_wait_host
lab_log "agent registered"
csctl hosts get lab -o json >/tmp/host.json
grep -q '"telemetry_active": true' /tmp/host.json ||
  { cat /tmp/host.json; tail -20 /tmp/agent.log; lab_fail "the agent's collector is not active"; }
lab_wait_for 20 sh -c 'csctl stats vm-1 --window 60 >/dev/null 2>&1' ||
  { tail -20 /tmp/agent.log; lab_fail "no stats for vm-1 reached csd"; }
lab_log "stats reach csd"

# counter VM SHARING: the agent's cosched_vm_sibling_seconds_total of VM for
# SHARING (run: cosched_vm_run_seconds_total).
scrape() {
  local try
  for try in 1 2 3; do
    timeout 20 wget -q -O /tmp/metrics.txt http://127.0.0.1:9464/metrics && return
    lab_log "scrape $try of the agent's /metrics failed"
  done
  lab_fail "cannot scrape the agent's /metrics"
}
counter() {
  if [ "$2" = run ]; then
    awk -v vm="vm=\"$1\"" '$1 ~ /^cosched_vm_run_seconds_total\{/ && index($1, vm) {s += $2} END {printf "%.6f", s}' /tmp/metrics.txt
  else
    awk -v vm="vm=\"$1\"" -v sh="sharing=\"$2\"" \
      '$1 ~ /^cosched_vm_sibling_seconds_total\{/ && index($1, vm) && index($1, sh) {s += $2} END {printf "%.6f", s}' /tmp/metrics.txt
  fi
}
# live_foreign SECONDS: each VM's live foreign % over the next SECONDS
# (counter differences), as "vm-1 PCT vm-2 PCT".
live_foreign() {
  local r1 f1 r2 f2
  scrape
  r1=$(counter vm-1 run) f1=$(counter vm-1 foreign) r2=$(counter vm-2 run) f2=$(counter vm-2 foreign)
  sleep "$1"
  scrape
  awk -v r1="$r1" -v f1="$f1" -v r2="$r2" -v f2="$f2" \
    -v R1="$(counter vm-1 run)" -v F1="$(counter vm-1 foreign)" \
    -v R2="$(counter vm-2 run)" -v F2="$(counter vm-2 foreign)" 'BEGIN {
      if (R1 <= r1 || R2 <= r2) { print "no-run"; exit }
      printf "vm-1 %.2f vm-2 %.2f", 100 * (F1 - f1) / (R1 - r1), 100 * (F2 - f2) / (R2 - r2) }'
}

sleep 1
untagged=$(live_foreign 4)
lab_result "live foreign %, untagged" "$untagged"
set -- $untagged
[ "$1" = vm-1 ] || lab_fail "no live figures untagged: $untagged"
lab_float_cmp "$2" ">" 50 && lab_float_cmp "$4" ">" 50 ||
  lab_fail "untagged live foreign share not over 50%: $untagged"

csctl tag vm-1 --tenant acme >/dev/null || lab_fail "tag vm-1"
csctl tag vm-2 --tenant globex >/dev/null || lab_fail "tag vm-2"
# one_cookie PID: every thread of PID holds one cookie, not 0.
one_cookie() { [ "$(lab_cookies_of "$1" | wc -l)" = 1 ] && [ "$(lab_cookies_of "$1")" != 0 ]; }
both_tagged() { one_cookie "$vm1" && one_cookie "$vm2"; }
lab_wait_for 20 both_tagged || lab_fail "the VMs were not tagged: $(lab_cookies "$vm1" | tr '\n' ';')"
# Free placement, as on a host without vcpupin (see agent_two_tenants.sh).
taskset -a -p -c 0-3 "$vm1" >/dev/null && taskset -a -p -c 0-3 "$vm2" >/dev/null || lab_fail "taskset"
sleep 2
for again in 1 2 3 4; do
  tagged=$(live_foreign 8)
  set -- $tagged
  [ "$1" = vm-1 ] && lab_float_cmp "$2" "<=" 2 && lab_float_cmp "$4" "<=" 2 && break
  # Under emulation a loaded host can stall an emulated CPU while a core
  # switches cookies, and the lab's own shell, csctl and the agent are host
  # tasks on some sibling (ARCHITECTURE.md): tagged figures sit at 1-2.5%
  # there. Measure again, at most three times, and report every figure.
  [ $again = 4 ] && lab_fail "tagged live foreign share over 2%: $tagged"
  lab_result "live foreign %, tagged, measurement $again" "$tagged: measuring again"
done
lab_result "live foreign %, tagged" "$tagged"

# The whole run, live (csd's sums of every window) and offline (the lab's
# trace over exactly the windows' span).
sleep 1.5
csctl stats --host lab --window 1h -o json >/tmp/live.json || lab_fail "csctl stats --host lab"
echo 0 >"$t/tracing_on"
cat "$t/trace" >/tmp/trace.txt
cp /tmp/live.json "$LAB_OUT/"
written=$(awk '/entries-in-buffer\/entries-written/ {print $3}' /tmp/trace.txt)
lab_result "trace" "$(wc -l </tmp/trace.txt) lines, entries in buffer/written $written"
[ "${written%/*}" = "${written#*/}" ] || lab_fail "the lab's trace lost events ($written)"

# json_field FILE KEY: the first number after "KEY": in FILE.
json_field() { awk -v k="\"$2\":" '{ for (i = 1; i <= NF; i++) if ($i == k) { v = $(i + 1); sub(/,$/, "", v); print v; exit } }' "$1"; }
start_ns=$(json_field /tmp/live.json start_unix_ns)
end_ns=$(json_field /tmp/live.json end_unix_ns)
seconds() { awk -v n="$1" 'BEGIN { printf "%s.%s", substr(n, 1, length(n) - 9), substr(n, length(n) - 8) }'; }
from=$(seconds "$start_ns") to=$(seconds "$end_ns")
first=$(awk '$1 !~ /^#/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) { print substr($i, 1, length($i) - 1); exit } }' /tmp/trace.txt)
lab_result "span" "live windows $from - $to ($(json_field /tmp/live.json windows) windows summed), trace from $first"
lab_float_cmp "$first" "<" "$from" || lab_fail "the trace starts after the first window"

printf '0-1\n0-1\n2-3\n2-3\n' >/tmp/topology
: >/tmp/threads
for pid in "$vm1" "$vm2"; do
  name=vm-1
  [ "$pid" = "$vm2" ] && name=vm-2
  for tid in $(ls /proc/$pid/task); do echo "$tid $name" >>/tmp/threads; done
done
csctl analyze /tmp/trace.txt --topology /tmp/topology --threads /tmp/threads \
  --from "$from" --to "$to" -o json >/tmp/offline.json || lab_fail "csctl analyze"
cp /tmp/offline.json "$LAB_OUT/"

# figure FILE VM KEY: a figure of VM in a JSON list of objects with a "vm"
# key (csctl analyze's list, or the vms of csctl stats), keys in any order,
# one per line.
figure() {
  awk -v vm="$2" -v k="\"$3\":" '
    { for (i = 1; i <= NF; i++) {
        if ($i == k) { v = $(i + 1); sub(/,$/, "", v); val = v }
        if ($i == "\"vm\":") { n = $(i + 1); gsub(/[",]/, "", n); name = n } } }
    /}/ { if (name == vm && val != "") { print val; exit } name = ""; val = "" }' "$1"
}
for vm in vm-1 vm-2; do
  line="$vm"
  for key in same_pct idle_pct foreign_pct unknown_pct; do
    live=$(figure /tmp/live.json $vm $key)
    off=$(figure /tmp/offline.json $vm $key)
    [ -n "$live" ] && [ -n "$off" ] || lab_fail "$vm: no $key (live '$live', offline '$off')"
    line="$line $key live $live offline $off;"
    awk -v a="$live" -v b="$off" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1) }' ||
      lab_fail "$vm $key: live $live% and offline $off% differ by more than 1 point"
  done
  lab_result "$vm live vs offline" "$line runtime live $(figure /tmp/live.json $vm runtime_ns) ns, offline $(figure /tmp/offline.json $vm runtime_ns) ns"
done
lab_stop_vm "$vm1"
lab_stop_vm "$vm2"
