# New thread: a thread created after tagging (a vCPU hot-add stand-in) gets
# its VM's cookie. With thread scope `emulator` QEMU's main thread holds the
# cookie and the new thread inherits it (gap 0); with scope `vcpus` it does
# not, and the agent tags it on the proc connector's fork event.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT
lab_start_vm vm-1 -smp 2 --duty 30
vm1=$LAB_PID
lab_start_vm vm-2 -smp 2 --duty 30
vm2=$LAB_PID
lab_crosscheck_begin
lab_start_csd
lab_start_agent
lab_wait_host
csctl tag vm-1 || lab_fail "tag vm-1"
csctl tag vm-2 --scope vcpus || lab_fail "tag vm-2"
lab_wait_enforced vm-1
lab_wait_enforced vm-2
# Until csd's assignment came, vm-2 was fail-closed at the default scope
# (every thread of it); the crosscheck's map is the vcpus one.
lab_crosscheck_mark
c1=$(lab_one_cookie "$vm1") || exit 1
c2=$(lab_cookies "$vm2" | awk '$4 == "CPU" {print $3}' | sort -u)
[ "$(echo "$c2" | wc -l)" = 1 ] && [ "$c2" != 0 ] || lab_fail "vm-2's vCPUs do not share a cookie: $c2"
main2=$(lab_cookies "$vm2" | awk -v p="$vm2" '$2 == p {print $3}')
[ "$main2" = 0 ] || lab_fail "vm-2 at scope vcpus: QEMU's main thread has cookie $main2"

gap1=$(lab_tag_gap "$vm1" "$c1") || lab_fail "vm-1's new thread never got the VM's cookie"
lab_result "new thread, scope emulator" "$gap1"
echo "$gap1" | grep -q inherited || lab_fail "vm-1's new thread did not inherit: $gap1"

gap2=$(lab_tag_gap "$vm2" "$c2") || lab_fail "vm-2's new vCPU was never tagged"
lab_result "new thread, scope vcpus" "$gap2 (tagged by the agent)"
lab_result "reconcile" "$(lab_last_reconcile)"
# The collector's figures since the mark agree with the lab's own trace,
# the new threads included (the collector takes each reconcile pass's VM
# list at its next poll).
lab_crosscheck_end vm-1="$vm1" vm-2="vcpus:$vm2"
lab_stop_vm "$vm1"
lab_stop_vm "$vm2"
