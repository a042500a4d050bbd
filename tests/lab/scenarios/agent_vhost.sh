# Real vhost-net workers, on either vhost model (registered for both lab
# kernels): fake QEMUs open /dev/vhost-net and issue VHOST_SET_OWNER, so the
# kernel makes the workers. On 6.12 they are threads of QEMU, named
# vhost-<pid>, born with the cookie of the QEMU thread that asked; on 6.1
# they are kernel threads (children of kthreadd) born at cookie 0, which the
# agent must tag one by one. Every worker must hold its VM's cookie, also one
# added after tagging (a NIC added later), within 1 s: the bound the lab
# holds a new VM to (agent_server_away). The periodic rescan is 10 minutes,
# so only the process events can tag the late worker in time.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT
case $(uname -r) in
  6.1.*) model=kthread ;;
  *) model=thread ;;
esac

workers() { lab_vhost_workers "$@"; }
worker_cookies() { lab_vhost_worker_cookies "$@"; }

lab_start_vm vm-1 -smp 2 --duty 30 --vhost-net 1
vm1=$LAB_PID
lab_start_vm vm-2 -smp 1 --duty 30 --vhost-net 2
vm2=$LAB_PID
[ "$(workers "$vm1" | wc -l)" = 1 ] || lab_fail "vm-1 has not 1 vhost worker: $(workers "$vm1" | tr '\n' ' ')"
[ "$(workers "$vm2" | wc -l)" = 2 ] || lab_fail "vm-2 has not 2 vhost workers: $(workers "$vm2" | tr '\n' ' ')"
for t in $(workers "$vm1") $(workers "$vm2"); do
  ppid=$(awk '{print $4}' "/proc/$t/stat")
  if [ $model = kthread ]; then
    [ "$ppid" = 2 ] || lab_fail "6.1: vhost worker $t is not a kernel thread (ppid $ppid)"
  else
    [ -d "/proc/$vm1/task/$t" ] || [ -d "/proc/$vm2/task/$t" ] || lab_fail "6.12: vhost worker $t is not a thread of its QEMU"
  fi
done
lab_result "vhost model" "$(uname -r): workers are ${model}s ($(workers "$vm1" | tr '\n' ' ')for vm-1, $(workers "$vm2" | tr '\n' ' ')for vm-2)"

lab_start_csd
cat >/tmp/agent-vhost.yaml <<YAML
telemetry:
  enabled: false
rescan_interval_ms: 600000
YAML
cs-agent --config /tmp/agent-vhost.yaml --server "$CSCTL_SERVER" --host-id lab \
  --state-dir /tmp/agent --discovery procfs >>/tmp/agent.log 2>&1 &
AGENT_PID=$!
lab_wait_host
csctl tag vm-1 || lab_fail "tag vm-1"
csctl tag vm-2 --tenant globex || lab_fail "tag vm-2"
lab_wait_enforced vm-1
lab_wait_enforced vm-2
c1=$(lab_one_cookie "$vm1") || exit 1
c2=$(lab_one_cookie "$vm2") || exit 1
[ "$c1" != "$c2" ] || lab_fail "vm-1 and vm-2 share cookie $c1"
[ "$(worker_cookies "$vm1")" = "$c1" ] || lab_fail "vm-1's vhost worker holds $(worker_cookies "$vm1"), not $c1"
[ "$(worker_cookies "$vm2")" = "$c2" ] || lab_fail "vm-2's vhost workers hold $(worker_cookies "$vm2" | tr '\n' ' '), not $c2"
lab_result "workers at tagging" "vm-1's 1 and vm-2's 2 vhost workers hold their VM's cookie ($c1, $c2)"

# A NIC added later: a new worker of vm-1, timed from its appearance under
# its name until it holds vm-1's cookie.
gap=$(lab_tag_gap --vhost "$vm1" "$c1" 5000) || lab_fail "vm-1's late vhost worker never got cookie $c1 (5 s)"
late=$(echo "$gap" | awk '{print $2}')
case $gap in
  *inherited*)
    [ $model = thread ] || lab_fail "6.1: a kernel-thread worker cannot inherit QEMU's cookie: $gap"
    lab_result "late worker" "thread $late inherited vm-1's cookie (gap 0)" ;;
  *tagged_after_us*)
    us=$(echo "$gap" | awk '{print $4}')
    [ "$us" -le 1000000 ] || lab_fail "vm-1's late vhost worker $late ran untagged for ${us} us (over 1 s)"
    lab_result "late worker" "$model $late tagged by the agent ${us} us after it got its name (bound 1 s; rescan 10 min)" ;;
esac
[ "$(worker_cookies "$vm1")" = "$c1" ] || lab_fail "vm-1's vhost workers hold $(worker_cookies "$vm1" | tr '\n' ' ') after the late one"
[ "$(worker_cookies "$vm2")" = "$c2" ] || lab_fail "vm-2's workers changed cookie: $(worker_cookies "$vm2" | tr '\n' ' ')"
lab_wait_for 10 sh -c "csctl get vm-1 -o json | grep -q '\"threads_found\": $((3 + 1 + 2))'" ||
  lab_fail "csd does not show vm-1's 6 threads (main, 2 vCPUs, IO, 2 workers): $(csctl get vm-1 -o json | grep threads_)"
lab_wait_enforced vm-1
lab_result "reconcile" "$(lab_last_reconcile)"
lab_stop_vm "$vm1"
lab_stop_vm "$vm2"
