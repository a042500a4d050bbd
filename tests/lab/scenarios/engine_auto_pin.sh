# Issue #15's pinning proof: csd's policy engine pins VMs, the agent
# confines their vCPU threads there on the real kernel, and an operator's
# level takes the pin away again.
#
# acme (mode auto, vm only) has one 2-vCPU VM busy 90% of every 10 ms,
# which nobody pins; globex (fixed, vm) one 1-vCPU VM busy half of it,
# which its "libvirt" (the fake QEMU's --cpus) pins to core 1, CPUs 2-3.
# The agent reports that affinity and csd predicts globex's VM there. At a
# cookie per VM, an acme vCPU beside globex's on core 1 forces a sibling
# idle whenever only the other VM is queued there. The engine's move
# 'busy-whole-cores-x1.00' (docs/operating.md, "Pinning") puts acme's VM on
# core 0, whose two siblings then run its own vCPUs only (csctl simulate of
# this host: +11% throughput, forced idle 13% to 0).
#   unpinned  acme is a dry run: the VMs run 8 s as tagged; the kernel's
#             core_forceidle_sum of their threads
#   pinned    acme applies and csd's engine pins its VM: its vCPU threads'
#             affinity, read in /proc, is core 0's CPUs, its other threads
#             keep every CPU, globex's keep their own; the VMs run 8 s
#             again, and forced idle must be lower
#   operator  `csctl tag big --isolation vm`: the VM is the operator's, its
#             pin goes and its vCPU threads get every CPU back
# Throughout, a sampler reads every thread's cookie every 100 ms: pinning
# changes no cookie. The engine's layout changes (EngineDecision revisions)
# stay within engine.max_changes_per_hour.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT
lab_check_topology

echo 1 >/proc/sys/kernel/sched_schedstats || lab_fail "cannot turn kernel.sched_schedstats on"

lab_start_vm big -smp 2 --duty 90
pid_big=$LAB_PID
lab_start_vm g-1 -smp 1 --cpus 2-3 --duty 50
pid_g1=$LAB_PID
all="$pid_big $pid_g1"

max_changes=3
LAB_CSD_CONFIG="engine:
  replan_interval_s: 10
  min_gain: 0.03
  min_dwell_s: 0
  max_changes_per_hour: $max_changes"
lab_start_csd
lab_start_reporting_agent

csctl policy set acme --default vm --allow vm --mode auto --no-apply >/dev/null ||
  lab_fail "policy set acme (dry run)"
csctl policy set globex --default vm --allow vm >/dev/null || lab_fail "policy set globex"
csctl tag big --tenant acme >/dev/null || lab_fail "tag big"
csctl tag g-1 --tenant globex >/dev/null || lab_fail "tag g-1"
for vm in big g-1; do lab_wait_enforced $vm; done
lab_wait_for 20 sh -c 'csctl stats big --window 60 >/dev/null 2>&1' ||
  { tail -20 /tmp/agent.log; lab_fail "no stats for big reached csd"; }

lab_cookies --watch 100 600 $all >/tmp/watch.txt 2>&1 &
WATCH_PID=$!

# vcpu_cpus PID: the affinity lists of PID's vCPU threads ("CPU n/KVM"),
# distinct; other_cpus PID: those of its other threads.
vcpu_cpus() {
  local t
  for t in /proc/"$1"/task/*; do
    case "$(cat "$t/comm")" in CPU*/KVM) awk '/^Cpus_allowed_list/ {print $2}' "$t/status" ;; esac
  done | sort -u
}
other_cpus() {
  local t
  for t in /proc/"$1"/task/*; do
    case "$(cat "$t/comm")" in CPU*/KVM) ;; *) awk '/^Cpus_allowed_list/ {print $2}' "$t/status" ;; esac
  done | sort -u
}
# forced_pct SECONDS: the VMs' forced idle over SECONDS of running, from the
# kernel's core_forceidle_sum, in percent of the host's CPU time (4 CPUs).
forced_pct() {
  local before after
  before=$(for pid in $all; do cat /proc/"$pid"/task/*/sched; done |
    awk '$1 == "core_forceidle_sum" { s += $3 } END { printf "%.3f", s }')
  sleep "$1"
  after=$(for pid in $all; do cat /proc/"$pid"/task/*/sched; done |
    awk '$1 == "core_forceidle_sum" { s += $3 } END { printf "%.3f", s }')
  awk -v a="$before" -v b="$after" -v s="$1" 'BEGIN { printf "%.2f", 100 * (b - a) / (4 * s * 1000) }'
}
pinned() {
  [ "$(vcpu_cpus "$pid_big")" = 0-1 ] && [ "$(vcpu_cpus "$pid_g1")" = 2-3 ]
}

[ "$(vcpu_cpus "$pid_big")" = 0-3 ] || lab_fail "big starts pinned: $(vcpu_cpus "$pid_big")"
# The agent reports where "libvirt" pins globex's VMs.
lab_wait_for 20 sh -c 'csctl get g-1 -o json | tr -d " \n" | grep -q "\"vcpu_affinity\":\[2,3\]"' ||
  lab_fail "csd does not have g-1's vCPU affinity: $(csctl get g-1 -o json)"
lab_log "unpinned: a cookie per VM, acme a dry run"
unpinned=$(forced_pct 8)
lab_result "unpinned, forced idle" "$unpinned% of host CPU time"

lab_log "pinned: acme applies; csd's engine decides"
csctl policy set acme --default vm --allow vm --mode auto >/dev/null || lab_fail "policy set acme"
lab_wait_for 90 pinned ||
  { csctl plan --dry-run; tail -20 /tmp/csd.log
    lab_fail "csd's engine did not pin big to CPUs 0-1 (g-1 on 2-3): big $(vcpu_cpus "$pid_big"), g-1 $(vcpu_cpus "$pid_g1")"; }
[ "$(other_cpus "$pid_big")" = 0-3 ] ||
  lab_fail "big's emulator threads were pinned too: $(other_cpus "$pid_big")"
csctl explain big -o json >"$LAB_OUT/explain-big.json" || lab_fail "csctl explain big"
grep -q '"decided_by": "engine"' "$LAB_OUT/explain-big.json" ||
  lab_fail "big's pin was not the engine's: $(cat "$LAB_OUT/explain-big.json")"
grep -q 'pinned to core 0' "$LAB_OUT/explain-big.json" ||
  lab_fail "explain does not say why big is pinned: $(cat "$LAB_OUT/explain-big.json")"
csctl get big -o json >"$LAB_OUT/get-big.json" || lab_fail "csctl get big"
lab_result "pinned" "big's vCPUs on CPUs $(vcpu_cpus "$pid_big"), its other threads on $(other_cpus "$pid_big"); g-1's on $(vcpu_cpus "$pid_g1")"
pinned_pct=$(forced_pct 8)
lab_result "pinned, forced idle" "$pinned_pct% of host CPU time (unpinned: $unpinned%)"
lab_float_cmp "$pinned_pct" "<" "$unpinned" ||
  lab_fail "pinned: forced idle $pinned_pct% is not below the unpinned $unpinned%"

lab_log "operator: big tagged with --isolation vm"
csctl tag big --tenant acme --isolation vm >/dev/null || lab_fail "tag big --isolation vm"
unpinned_big() { [ "$(vcpu_cpus "$pid_big")" = 0-3 ]; }
lab_wait_for 30 unpinned_big ||
  lab_fail "big's vCPUs did not get every CPU back: $(vcpu_cpus "$pid_big")"
lab_result "operator" "big's vCPUs back on CPUs $(vcpu_cpus "$pid_big"); g-1's still on $(vcpu_cpus "$pid_g1")"

kill -TERM $WATCH_PID
wait $WATCH_PID
cp /tmp/watch.txt "$LAB_OUT/"
summary=$(tail -1 /tmp/watch.txt)
case "$summary" in samples*) ;; *) lab_fail "the cookie sampler: $summary" ;; esac
grep -q '^change' /tmp/watch.txt && lab_fail "a cookie changed while the engine pinned: $(grep '^change' /tmp/watch.txt | head -3)"
lab_result "cookies read every 100 ms" "$summary; none changed"

lab_engine_changes_within "$max_changes"
for pid in $all; do lab_stop_vm "$pid"; done
