# Lifecycle through libvirt (run_lab.sh --root9p), libvirt sched_core =
# "none", the agent's periodic rescan set to 10 minutes so that only events
# (libvirt lifecycle, proc connector) can tag in time:
#  - a domain started after it was tagged is tagged; the delay from
#    `virsh start` to all of its threads tagged is measured;
#  - a destroyed domain leaves no stale state in the agent's report;
#  - the domain restarted under the same name gets the same trust group (and
#    so the cookie of the other running domain of that group).
. "$LAB_GUEST/lib.sh"
. "$LAB_GUEST/libvirt.sh"
set -u
trap 'lab_keep_logs; lab_libvirtd_keep_logs' EXIT
lab_check_topology

cat >/tmp/agent.yaml <<EOF
server: "$CSCTL_SERVER"
host_id: lab
state_dir: /tmp/agent
discovery: libvirt
rescan_interval_ms: 600000
EOF
lab_start_csd
cs-agent --config /tmp/agent.yaml >>/tmp/agent.log 2>&1 &
AGENT_PID=$!
lab_wait_host_secs 120

# lv-peer runs from the start; lv-new, of the same tenant and level tenant,
# is tagged while it exists only as a definition.
lab_domain_define lv-peer 00000000-0000-4000-8000-00000000c001 2
lab_domain_define lv-new 00000000-0000-4000-8000-00000000c002 2
csctl tag lv-peer --tenant acme --isolation tenant || lab_fail "csctl tag lv-peer"
csctl tag lv-new --tenant acme --isolation tenant || lab_fail "csctl tag lv-new"
lab_domain_start lv-peer --paused
lab_wait_enforced_secs lv-peer 120
peer=$(lab_domain_one_cookie lv-peer) || exit 1
[ "$peer" != 0 ] || lab_fail "lv-peer is not tagged"
group=$(csctl get lv-new -o json | sed -n 's/.*"trust_group": "\([^"]*\)".*/\1/p' | head -1)
[ -n "$group" ] || lab_fail "no trust group for lv-new: $(csctl get lv-new -o json)"
vms_before=$(csctl hosts get lab -o json | grep -o '"vm_count": *[0-9]*' | grep -o '[0-9]*$')
lab_result "before start" "lv-peer cookie $peer, lv-new trust group $group, agent reports ${vms_before:-0} VM(s)"
passes_before=$(grep -c 'reconcile pass:' /tmp/agent.log)

# start_and_time NAME: `virsh start NAME --paused` under lab_tag_gap, which
# watches /proc every ~2 ms for NAME's QEMU process and then for every
# thread of it holding lv-peer's cookie. Sets SEEN_MS (virsh start to its
# QEMU process first seen), START_MS (virsh start to all its threads
# tagged), AFTER_SEEN_MS (first seen to all tagged), FIRST_SIGHT (yes: all
# tagged when first seen) and RETURN_MS (virsh start's own time). Threads
# QEMU creates later inherit the cookie; all are checked at the end.
start_and_time() {
  local name=$1 line
  line=$(lab_tag_gap --new-process "guest=$name," "$peer" 180000 -- virsh -q start "$name" --paused 2>/tmp/start-$name.txt) ||
    lab_fail "$name not tagged with $peer after virsh start: $(tr '\n' ' ' </tmp/start-$name.txt) $(lab_domain_thread_summary "$name")"
  set -- $line
  SEEN_MS=$4
  START_MS=$6
  FIRST_SIGHT=$8
  RETURN_MS=${12}
  AFTER_SEEN_MS=$((START_MS - SEEN_MS))
  [ "$(lab_domain_cookie_set "$name")" = "$peer" ] ||
    lab_fail "not every thread of $name holds $peer after virsh start: $(lab_domain_thread_summary "$name")"
  return 0
}

start_and_time lv-new
lab_wait_enforced_secs lv-new 60
lab_result "start to tagged" "${START_MS} ms from virsh start to every thread of lv-new's QEMU tagged; its QEMU process was first seen ${SEEN_MS} ms after virsh start, tagged ${AFTER_SEEN_MS} ms after that (all tagged at first sight: $FIRST_SIGHT); virsh start itself took ${RETURN_MS} ms, then all $(lab_domain_cookies lv-new | wc -l) threads held the cookie (periodic rescan: every 600 s)"
lab_result "lv-new cookies" "$(lab_domain_thread_summary lv-new)"
lab_result "passes" "$(( $(grep -c 'reconcile pass:' /tmp/agent.log) - passes_before )) reconcile passes that wrote, since lv-new's start: $(lab_last_reconcile)"
grep -q 'rescan every 600000' /tmp/agent.log && lab_log "agent: rescan every 600 s"

# Destroy: the agent's report must drop the domain.
vms_running=$(csctl hosts get lab -o json | grep -o '"vm_count": *[0-9]*' | grep -o '[0-9]*$')
[ "$vms_running" = 2 ] || lab_fail "agent reports $vms_running VMs with lv-peer and lv-new running"
t0=$(lab_ms_now)
virsh -q destroy lv-new >/dev/null || lab_fail "virsh destroy lv-new"
gone() {
  [ "$(csctl hosts get lab -o json | grep -o '"vm_count": *[0-9]*' | grep -o '[0-9]*$')" = 1 ] &&
    ! csctl get lv-new -o json | grep -q '"host_id": "lab"' &&
    csctl get lv-new -o json | grep -q '"enforcement": null'
}
lab_wait_secs 60 gone || lab_fail "stale state after virsh destroy lv-new: host: $(csctl hosts get lab -o json | tr -d '\n '); vm: $(csctl get lv-new -o json | tr -d '\n ')"
lab_result "destroy to report" "$(( $(lab_ms_now) - t0 )) ms from virsh destroy to csd showing lv-new on no host, no enforcement, vm_count 1"
[ "$(lab_domain_one_cookie lv-peer)" = "$peer" ] || lab_fail "lv-peer's cookie changed when lv-new was destroyed"

# Restart under the same name: same trust group, so lv-peer's cookie again.
start_and_time lv-new
lab_wait_enforced_secs lv-new 60
group2=$(csctl get lv-new -o json | sed -n 's/.*"trust_group": "\([^"]*\)".*/\1/p' | head -1)
applied=$(csctl get lv-new -o json | sed -n 's/.*"applied_trust_group": "\([^"]*\)".*/\1/p' | head -1)
[ "$group2" = "$group" ] && [ "$applied" = "$group" ] ||
  lab_fail "restarted lv-new: trust group '$group2', applied '$applied', before '$group'"
lab_result "restart" "same trust group $group, same cookie $peer as lv-peer; ${START_MS} ms from virsh start to all tagged (${AFTER_SEEN_MS} ms after its QEMU process was first seen, at first sight: $FIRST_SIGHT)"

lab_domain_destroy lv-new
lab_domain_destroy lv-peer
lab_stop_agent
