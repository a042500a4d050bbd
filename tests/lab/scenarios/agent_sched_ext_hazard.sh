# A sched_ext scheduler appears while VMs run (a stand-in of its sysfs
# state: the agent's sched_ext_dir, which exists for tests): within a second
# the agent creates and moves no cookie, keeps the ones set, and csd shows
# the host unsafe; once the scheduler is gone tagging resumes. Cookies are
# read back every 100 ms through the change. Then, with on_hazard: clear,
# the next flip takes every cookie off the VMs' threads, once.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT
mkdir -p /tmp/scx/root
echo disabled >/tmp/scx/state
LAB_AGENT_CONFIG="sched_ext_dir: /tmp/scx"
lab_start_vm vm-1 -smp 2 --duty 30
vm1=$LAB_PID
lab_start_csd
lab_start_agent
lab_wait_host
csctl tag vm-1 --tenant acme --isolation tenant || lab_fail "tag vm-1"
lab_wait_enforced vm-1
c1=$(lab_one_cookie "$vm1") || exit 1
csctl hosts ls | grep -q ' safe ' || { csctl hosts ls; lab_fail "the host is not shown safe"; }

echo scx_stand_in >/tmp/scx/root/ops
echo enabled >/tmp/scx/state
lab_uptime_cs
flipped=$LAB_NOW_CS
sleep 1
# From here on nothing may be written: a new VM (normally fail-closed on a
# cookie of its own at once) and a regroup of vm-1 (a cookie of its own).
lab_start_vm vm-2 -smp 2 --duty 30
vm2=$LAB_PID
csctl tag vm-1 --tenant acme --isolation vm || lab_fail "retag vm-1"
lab_wait_for 10 sh -c 'csctl hosts ls | grep -q "unsafe: sched_ext"' ||
  { csctl hosts ls; lab_fail "csd does not show the host unsafe"; }
lab_uptime_cs
shown=$LAB_NOW_CS
# A cookie written since the mark would still be there: read back for 3 s.
for _ in $(seq 30); do
  [ "$(lab_cookies_of "$vm1")" = "$c1" ] || lab_fail "vm-1's cookie changed under sched_ext: $(lab_cookies_of "$vm1" | tr '\n' ' ')"
  [ "$(lab_cookies_of "$vm2")" = 0 ] || lab_fail "vm-2 got a cookie under sched_ext: $(lab_cookies_of "$vm2" | tr '\n' ' ')"
  sleep 0.1
done
lab_wait_for 10 sh -c "csctl get vm-1 -o json | grep -q '\"state\": \"held\"'" ||
  { csctl get vm-1; lab_fail "vm-1 is not held"; }
grep -q 'hazard sched_ext appeared' /tmp/agent.log || lab_fail "the agent logged no hazard"
lab_result "sched_ext on: unsafe in csctl" "$(( (shown - flipped) * 10 )) ms after the flip (vm-2 started and vm-1 retagged 1 s after it)"
lab_result "sched_ext on: no cookie written" "from 1 s after the flip; 30 read-backs 100 ms apart"

echo disabled >/tmp/scx/state
lab_wait_for 10 lab_has_one_cookie "$vm2" || lab_fail "vm-2 was not tagged once sched_ext was gone"
lab_wait_enforced vm-1
c1b=$(lab_one_cookie "$vm1") || exit 1
[ "$(lab_cookies_of "$vm2")" != "$c1b" ] || lab_fail "vm-1 and vm-2 share a cookie"
lab_wait_for 10 sh -c 'csctl hosts ls | grep -q " safe "' || lab_fail "the host is not safe again"
lab_result "sched_ext off: tagging resumed" "vm-2 fail-closed, vm-1 regrouped"

# on_hazard: clear. The restarted agent adopts the cookies; the next flip
# takes them off every thread of both VMs.
kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null
LAB_AGENT_CONFIG="sched_ext_dir: /tmp/scx
on_hazard: clear"
lab_start_agent
lab_wait_host
lab_wait_enforced vm-1
[ "$(lab_one_cookie "$vm1")" = "$c1b" ] || lab_fail "the restarted agent did not adopt vm-1's cookie"
echo enabled >/tmp/scx/state
lab_uptime_cs
flipped=$LAB_NOW_CS
both_cleared() { [ "$(lab_cookies_of "$vm1")" = 0 ] && [ "$(lab_cookies_of "$vm2")" = 0 ]; }
lab_wait_for 10 both_cleared ||
  lab_fail "on_hazard: clear left cookies: vm-1 $(lab_cookies_of "$vm1" | tr '\n' ' ') vm-2 $(lab_cookies_of "$vm2" | tr '\n' ' ')"
lab_uptime_cs
cleared=$LAB_NOW_CS
lab_wait_for 10 sh -c "csctl get vm-1 -o json | grep -q 'on_hazard: clear took every cookie off'" ||
  { csctl get vm-1; lab_fail "vm-1 does not say its cookies were cleared"; }
for _ in $(seq 10); do
  [ "$(lab_cookies_of "$vm1")" = 0 ] || lab_fail "vm-1 got a cookie back under sched_ext"
  sleep 0.1
done
lab_result "on_hazard: clear" "every thread of vm-1 and vm-2 read back 0, $(( (cleared - flipped) * 10 )) ms after the flip"
echo disabled >/tmp/scx/state
lab_wait_enforced vm-1
lab_stop_vm "$vm1"
lab_stop_vm "$vm2"
