# Agent restart: after kill -9 and a restart, every VM thread holds the same
# cookie as before, and the restarted agent adopts them (no prctl writes).
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT
lab_start_vm vm-1 -smp 2 --duty 30
vm1=$LAB_PID
lab_start_vm vm-2 -smp 2 --duty 30
vm2=$LAB_PID
lab_start_vm vm-3 -smp 1 --duty 30
vm3=$LAB_PID
lab_start_csd
lab_start_agent
lab_wait_host
csctl tag vm-1 --tenant acme --isolation tenant || lab_fail "tag vm-1"
csctl tag vm-2 --tenant acme --isolation tenant || lab_fail "tag vm-2"
csctl tag vm-3 --tenant globex || lab_fail "tag vm-3"
for vm in vm-1 vm-2 vm-3; do lab_wait_enforced $vm; done
lab_cookies "$vm1" "$vm2" "$vm3" | sort >/tmp/before.txt

kill -9 "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
lab_cookies "$vm1" "$vm2" "$vm3" | sort >/tmp/while-down.txt
cmp -s /tmp/before.txt /tmp/while-down.txt || lab_fail "cookies changed while the agent was down"
echo "--- restart ---" >>/tmp/agent.log
# The restarted agent runs the collector, checked against the lab's own
# trace at the end (the first one did not: the windows it had not yet sent
# would be lost with it, and csd's stats would have a hole).
lab_crosscheck_begin
lab_start_agent
lab_wait_for 30 sh -c "sed -n '/--- restart ---/,\$p' /tmp/agent.log | grep -q 'reconcile pass:'" ||
  lab_fail "the restarted agent made no reconcile pass"
pass=$(sed -n '/--- restart ---/,$p' /tmp/agent.log | grep 'reconcile pass:' | head -1 | sed 's/.*reconcile pass: //')
lab_result "restarted agent's first pass" "$pass"
echo "$pass" | grep -q ' 0 prctl writes' || lab_fail "the restarted agent rewrote cookies: $pass"
sleep 1
lab_cookies "$vm1" "$vm2" "$vm3" | sort >/tmp/after.txt
cmp -s /tmp/before.txt /tmp/after.txt || { diff /tmp/before.txt /tmp/after.txt; lab_fail "cookies changed across the agent restart"; }
lab_result "agent restart" "$(wc -l </tmp/after.txt) threads, every cookie the same before, during and after"
for vm in vm-1 vm-2 vm-3; do lab_wait_enforced $vm; done
# vm-1 and vm-2 share acme's trust group, which the offline thread map does
# not know: "same" live is "foreign" offline, so same + foreign is compared.
lab_crosscheck_end --busy-only vm-1="$vm1" vm-2="$vm2" vm-3="$vm3"
for pid in "$vm1" "$vm2" "$vm3"; do lab_stop_vm "$pid"; done
