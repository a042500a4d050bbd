# vCPU hotplug on real QEMU (run_lab.sh --root9p), libvirt sched_core =
# "none": two running TCG domains defined with <vcpu current='1'>2</vcpu>
# get a vCPU with `virsh setvcpus DOM 2 --live` (QMP device_add; it works
# under software emulation: QEMU creates the thread `CPU 1/TCG`). lab_tag_gap
# watches QEMU's threads while virsh runs and reports when the new vCPU
# thread holds its VM's cookie:
#  - hp-emu, thread scope emulator: QEMU's main thread holds the cookie, the
#    new vCPU thread inherits it (gap 0);
#  - hp-vcpus, thread scope vcpus: the main thread has no cookie, so the new
#    vCPU is born untagged and the agent must tag it; the gap is reported.
# Also a new IO thread (QMP object-add iothread) in hp-emu inherits. A
# setvcpus that fails fails the scenario: hotplug works under software
# emulation, so a failure is a regression, not a limit of the lab.
. "$LAB_GUEST/lib.sh"
. "$LAB_GUEST/libvirt.sh"
set -u
trap 'lab_keep_logs; lab_libvirtd_keep_logs' EXIT
lab_check_topology

for d in hp-emu hp-vcpus; do
  n=1; [ $d = hp-vcpus ] && n=2
  lab_domain_define "$d" "00000000-0000-4000-8000-00000000e00$n" 2 1 48
  # Running, not paused: SeaBIOS finds nothing to boot and waits; it must
  # not end the domain when it retries (reset).
  sed -i "s|<on_reboot>destroy</on_reboot>|<on_reboot>restart</on_reboot>|" "/tmp/$d.xml"
  virsh -q define "/tmp/$d.xml" >/dev/null || lab_fail "virsh define $d"
  lab_domain_start "$d"
done
virsh list
lab_start_csd
lab_start_agent_libvirt
lab_wait_host_secs 120
csctl tag hp-emu --tenant acme || lab_fail "csctl tag hp-emu"
csctl tag hp-vcpus --tenant globex --scope vcpus || lab_fail "csctl tag hp-vcpus"
lab_wait_enforced_secs hp-emu 120
lab_wait_enforced_secs hp-vcpus 120

cemu=$(lab_domain_one_cookie hp-emu) || exit 1
[ "$cemu" != 0 ] || lab_fail "hp-emu is not tagged"
vcpu_cookie() {  # NAME: the one cookie of its vCPU threads
  lab_domain_cookies "$1" | awk '$4 == "CPU" {print $3}' | sort -u
}
cvcpus=$(vcpu_cookie hp-vcpus)
[ "$(echo "$cvcpus" | wc -l)" = 1 ] && [ "$cvcpus" != 0 ] || lab_fail "hp-vcpus's vCPU: $cvcpus"
pemu=$(lab_domain_pid hp-emu)
pvcpus=$(lab_domain_pid hp-vcpus)
main_vcpus=$(lab_cookies "$pvcpus" | awk -v p="$pvcpus" '$2 == p {print $3}')
[ "$main_vcpus" = 0 ] || lab_fail "hp-vcpus at scope vcpus: QEMU's main thread has cookie $main_vcpus"
threads_found() {  # VM: threads_found in the agent's report
  csctl get "$1" -o json | grep -o '"threads_found": *[0-9]*' | grep -o '[0-9]*$'
}
found_before=$(threads_found hp-vcpus)
lab_result "before" "hp-emu (scope emulator) $(lab_domain_thread_summary hp-emu); hp-vcpus (scope vcpus) $(lab_domain_thread_summary hp-vcpus)"

# hotplug NAME COOKIE: virsh setvcpus NAME 2 --live under lab_tag_gap. Sets
# GAP (lab_tag_gap's line).
hotplug() {
  GAP=$(lab_tag_gap --comm 'CPU *' "$(lab_domain_pid "$1")" "$2" 120000 -- \
    virsh setvcpus "$1" 2 --live 2>/tmp/hotplug-$1.err) ||
    lab_fail "$1: virsh setvcpus $1 2 --live (exit $?): $(tr '\n' ' ' </tmp/hotplug-$1.err)"
}
gap_text() {  # lab_tag_gap's line as a sentence
  case $1 in
    *inherited*) echo "gap 0: ${1% inherited} was born with the VM's cookie (inherited from QEMU's main thread)" ;;
    *tagged_after_us*) echo "${1%% tagged_after_us*} ran untagged for $(echo "$1" | awk '{printf "%.1f", $4 / 1000}') ms, then the agent tagged it" ;;
    *) echo "$1" ;;
  esac
}

lab_log "virsh setvcpus hp-emu 2 --live"
hotplug hp-emu "$cemu"
lab_result "hotplug, scope emulator" "$(gap_text "$GAP")"
echo "$GAP" | grep -q inherited || lab_fail "hp-emu's new vCPU did not inherit: $GAP"
two_vcpus() { [ "$(lab_domain_vcpu_tids hp-emu | wc -l)" = 2 ]; }
lab_wait_secs 30 two_vcpus ||
  lab_fail "libvirt's status XML does not list hp-emu's new vCPU"
[ "$(lab_domain_cookie_set hp-emu)" = "$cemu" ] || lab_fail "hp-emu after hotplug: $(lab_domain_thread_summary hp-emu)"

lab_log "virsh setvcpus hp-vcpus 2 --live"
hotplug hp-vcpus "$cvcpus"
lab_result "hotplug, scope vcpus" "$(gap_text "$GAP")"
vcpus_tagged() { [ "$(vcpu_cookie hp-vcpus)" = "$cvcpus" ]; }
lab_wait_secs 60 vcpus_tagged ||
  lab_fail "hp-vcpus's vCPUs after hotplug: $(lab_domain_thread_summary hp-vcpus)"
main_vcpus=$(lab_cookies "$pvcpus" | awk -v p="$pvcpus" '$2 == p {print $3}')
[ "$main_vcpus" = 0 ] || lab_fail "hp-vcpus after hotplug: QEMU's main thread has cookie $main_vcpus"
found_after=$((found_before + 1))
found_all() { [ "$(threads_found hp-vcpus)" = "$found_after" ]; }
lab_wait_secs 60 found_all ||
  lab_fail "the agent reports $(threads_found hp-vcpus) threads of hp-vcpus after hotplug, not $found_after"
lab_result "agent report, hp-vcpus" "threads found $found_before before, $found_after after the hotplug"
lab_result "after" "hp-emu $(lab_domain_thread_summary hp-emu); hp-vcpus $(lab_domain_thread_summary hp-vcpus)"

# A new QEMU thread of another kind, created on demand: an IO thread.
lab_log "QMP object-add iothread in hp-emu"
gap=$(lab_tag_gap --comm 'IO lab-io*' "$pemu" "$cemu" 120000 -- \
  virsh qemu-monitor-command hp-emu '{"execute":"object-add","arguments":{"qom-type":"iothread","id":"lab-io1"}}' 2>/tmp/iothread.err) ||
  lab_fail "new IO thread in hp-emu: $(tr '\n' ' ' </tmp/iothread.err)"
lab_result "new IO thread, scope emulator" "$(gap_text "$gap")"
echo "$gap" | grep -q inherited || lab_fail "hp-emu's new IO thread did not inherit: $gap"
lab_result "reconcile" "$(lab_last_reconcile)"

lab_domain_destroy hp-emu
lab_domain_destroy hp-vcpus
lab_stop_agent
