# The README's demo on a host without core scheduling: the whole stack in
# the lab guest (2 cores x 2 SMT siblings, a kernel with core scheduling).
# Two CPU-bound fake VMs of two tenants; shows each thread's cookie and each
# VM's foreign sibling time before and after `csctl tag`.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT
lab_check_topology

show_cookies() {
  printf '    %-6s %-7s %-18s %s\n' VM TID COOKIE THREAD
  for vm in vm-1 vm-2; do
    pid=$(cat /run/$vm.pid)
    lab_cookies "$pid" | while read -r p tid cookie comm; do
      printf '    %-6s %-7s %-18s %s\n' "$vm" "$tid" "$cookie" "$comm"
    done
  done
}

show_share() {
  lab_sibling_share --trace "$1" --group vm-1=$vm1 --group vm-2=$vm2 --text >/tmp/share.txt ||
    lab_fail "lab_sibling_share"
  printf '    %-6s %9s %8s %8s %10s %19s\n' VM "RUN ms" "SAME %" "IDLE %" "FOREIGN %" "LONGEST FOREIGN us"
  for vm in vm-1 vm-2; do
    printf '    %-6s %9s %8s %8s %10s %19s\n' "$vm" "$(lab_share_field /tmp/share.txt $vm 2)" \
      "$(lab_share_field /tmp/share.txt $vm 3)" "$(lab_share_field /tmp/share.txt $vm 4)" \
      "$(lab_share_field /tmp/share.txt $vm 5)" "$(lab_share_field /tmp/share.txt $vm 8)"
  done
}

lab_start_vm vm-1 -smp 2 --cpus 0-3 --vcpu-cpus 0,2
vm1=$LAB_PID
lab_start_vm vm-2 -smp 2 --cpus 0-3 --vcpu-cpus 1,3
vm2=$LAB_PID
lab_trace_setup
sleep 0.5
echo
echo "== Before: two tenants' VMs, nothing tagged. Cookies (PR_SCHED_CORE_GET):"
show_cookies
lab_trace_record 2 /tmp/before.txt
echo "== Before: what each VM's SMT sibling ran while the VM ran (sched_switch trace):"
show_share /tmp/before.txt

lab_start_csd
lab_start_agent
lab_wait_host
echo
echo "== csd and cs-agent running; tagging:"
echo "    \$ csctl tag vm-1 --tenant acme"
csctl tag vm-1 --tenant acme >/dev/null || lab_fail "csctl tag vm-1"
echo "    \$ csctl tag vm-2 --tenant globex"
csctl tag vm-2 --tenant globex >/dev/null || lab_fail "csctl tag vm-2"
lab_wait_enforced vm-1
lab_wait_enforced vm-2
echo "    \$ csctl ls"
csctl ls | sed 's/^/    /'
taskset -a -p -c 0-3 "$vm1" >/dev/null && taskset -a -p -c 0-3 "$vm2" >/dev/null
sleep 1
echo
echo "== After: cookies"
show_cookies
lab_trace_record 2 /tmp/after.txt
echo "== After: what each VM's SMT sibling ran"
show_share /tmp/after.txt
echo
echo "(Foreign time left after tagging comes from the emulator's slow"
echo " interrupts while a core switches cookies: see docs/architecture.md,"
echo " \"What the lab can and cannot show\".)"
lab_stop_vm "$vm1"
lab_stop_vm "$vm2"
