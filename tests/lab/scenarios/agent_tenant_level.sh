# Tenant level: two VMs of tenant acme at level `tenant` share one cookie;
# a VM of tenant globex does not. Changing one acme VM to level `vm` splits
# it off again.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT
lab_start_vm vm-a1 -smp 2 --duty 50
a1=$LAB_PID
lab_start_vm vm-a2 -smp 2 --duty 50
a2=$LAB_PID
# vm-b1 also has a vhost worker of the old model: a separate task named
# vhost-<pid>, outside QEMU's thread group.
lab_start_vm vm-b1 -smp 2 --duty 50 --vhost-process
b1=$LAB_PID
lab_wait_for 5 sh -c "lab_cookies -n vhost-$b1 >/dev/null" || lab_fail "no vhost-$b1 process"
vhost=$(lab_cookies -n "vhost-$b1" | awk '{print $1}' | sort -u)
lab_crosscheck_begin
lab_start_csd
lab_start_agent
lab_wait_host
csctl tag vm-a1 --tenant acme --isolation tenant || lab_fail "tag vm-a1"
csctl tag vm-a2 --tenant acme --isolation tenant || lab_fail "tag vm-a2"
csctl tag vm-b1 --tenant globex --isolation tenant || lab_fail "tag vm-b1"
for vm in vm-a1 vm-a2 vm-b1; do lab_wait_enforced $vm; done
ca1=$(lab_one_cookie "$a1") || exit 1
ca2=$(lab_one_cookie "$a2") || exit 1
cb1=$(lab_one_cookie "$b1") || exit 1
[ "$ca1" = "$ca2" ] || lab_fail "acme's VMs at level tenant have different cookies $ca1 $ca2"
[ "$ca1" != "$cb1" ] || lab_fail "globex's VM shares acme's cookie $ca1"
lab_result "tenant level" "vm-a1 $ca1, vm-a2 $ca2 (one cookie), vm-b1 $cb1"
[ "$(lab_one_cookie "$vhost")" = "$cb1" ] || lab_fail "vm-b1's vhost process $vhost does not hold vm-b1's cookie"
lab_result "old-model vhost worker" "process $vhost (outside vm-b1's thread group) holds vm-b1's cookie $cb1"

csctl tag vm-a2 --tenant acme --isolation vm || lab_fail "retag vm-a2"
lab_wait_for 10 lab_has_one_cookie "$a2" "$ca1" ||
  lab_fail "vm-a2 at level vm does not hold one cookie other than acme's $ca1: $(lab_cookies "$a2" | tr '\n' ';')"
lab_wait_enforced vm-a2
ca2=$(lab_one_cookie "$a2") || exit 1
[ "$ca2" != "$ca1" ] && [ "$ca2" != "$cb1" ] || lab_fail "vm-a2 at level vm shares a cookie: $ca2"
[ "$(lab_one_cookie "$a1")" = "$ca1" ] || lab_fail "vm-a1's cookie changed when vm-a2 left the group"
lab_result "split" "vm-a2 at level vm: $ca2; vm-a1 kept $ca1"
# The collector's figures agree with the lab's own trace; busy, idle and
# unknown only, since the VMs' trust groups changed during the run.
lab_crosscheck_end --busy-only vm-a1="$a1" vm-a2="$a2" vm-b1="$b1,$vhost"
for pid in "$a1" "$a2" "$b1"; do lab_stop_vm "$pid"; done
