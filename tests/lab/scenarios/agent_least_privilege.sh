# Least privilege: cs-agent runs as root with only the capabilities
# deploy/systemd/cs-agent.service leaves it (CAP_SYS_PTRACE, CAP_SYS_NICE,
# CAP_NET_ADMIN; setpriv sets the same bounding set and no_new_privs), and
# tags VMs whose QEMU runs as another user, as under libvirt. A thread created
# later is tagged through the proc connector (CAP_NET_ADMIN). Without
# CAP_SYS_PTRACE it can neither check the process's binary nor tag it, and
# csd shows why on the host.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT

QEMU_UID=107
# util-linux's setpriv (busybox's applet of that name has no --reuid or
# --bounding-set, and busybox sh runs its applets before searching PATH).
SETPRIV=/usr/bin/setpriv
# The capabilities of the unit, as setpriv spells them.
UNIT_CAPS=+sys_ptrace,+sys_nice,+net_admin

# vm_as_qemu NAME ARGS...: a fake QEMU running as uid 107 (setpriv execs it,
# so $! is QEMU's pid).
vm_as_qemu() {
  local name=$1; shift
  rm -f "/tmp/$name.pid"
  $SETPRIV --reuid=$QEMU_UID --regid=$QEMU_UID --clear-groups \
    qemu-system-x86_64 -name "guest=$name,debug-threads=on" -pidfile "/tmp/$name.pid" "$@" \
    2>"/tmp/$name.err" &
  LAB_PID=$!
  lab_wait_for 10 test -s "/tmp/$name.pid" ||
    lab_fail "VM $name did not start as uid $QEMU_UID: $(cat "/tmp/$name.err"; ls -ld /tmp)"
  [ "$(awk '/^Uid:/ {print $2}' /proc/$LAB_PID/status)" = $QEMU_UID ] ||
    lab_fail "VM $name does not run as uid $QEMU_UID"
}

# agent_with_caps CAPS: cs-agent with bounding set CAPS (setpriv syntax),
# no inheritable or ambient capabilities and no_new_privs. Events only: the
# periodic rescan is 10 minutes, so a new thread is tagged on its fork event.
agent_with_caps() {
  cat >/tmp/agent.yaml <<EOF
server: "$CSCTL_SERVER"
host_id: lab
state_dir: /tmp/agent
discovery: procfs
rescan_interval_ms: 600000
vmm_users: [root, "$QEMU_UID"]
EOF
  $SETPRIV --bounding-set=-all,$1 --inh-caps=-all --no-new-privs \
    cs-agent --config /tmp/agent.yaml >>/tmp/agent.log 2>&1 &
  AGENT_PID=$!
  lab_wait_host
}

chmod 1777 /tmp
vm_as_qemu vm-lp -smp 2 --duty 30
vm=$LAB_PID
lab_start_csd
agent_with_caps $UNIT_CAPS
# CAP_SYS_PTRACE (19) | CAP_SYS_NICE (23) | CAP_NET_ADMIN (12) = 0x881000
want=$(printf '%016x' $(((1 << 19) | (1 << 23) | (1 << 12))))
eff=$(awk '/^CapEff:/ {print $2}' /proc/$AGENT_PID/status)
bnd=$(awk '/^CapBnd:/ {print $2}' /proc/$AGENT_PID/status)
nnp=$(awk '/^NoNewPrivs:/ {print $2}' /proc/$AGENT_PID/status)
lab_result "agent capabilities" "effective $eff, bounding $bnd, no_new_privs $nnp (want $want)"
[ "$eff" = "$want" ] && [ "$bnd" = "$want" ] && [ "$nnp" = 1 ] ||
  lab_fail "the agent does not run with exactly the unit's capabilities"
grep -q "needs CAP_NET_ADMIN" /tmp/agent.log && lab_fail "no proc connector: $(grep CAP_NET_ADMIN /tmp/agent.log)"

csctl tag vm-lp --tenant acme --scope vcpus || lab_fail "tag vm-lp"
lab_wait_enforced vm-lp
vcpus=$(lab_cookies "$vm" | awk '$4 == "CPU" {print $3}' | sort -u)
[ "$(echo "$vcpus" | wc -l)" = 1 ] && [ "$vcpus" != 0 ] || lab_fail "vm-lp's vCPUs do not share a cookie: $vcpus"
lab_result "tagged with the unit's capabilities" "vm-lp (uid $QEMU_UID) vCPUs $vcpus"
gap=$(lab_tag_gap "$vm" "$vcpus") || lab_fail "vm-lp's new vCPU was never tagged"
echo "$gap" | grep -q tagged_after_us || lab_fail "the new vCPU was not tagged by the agent: $gap"
lab_result "new vCPU, tagged on its fork event" "$gap"

kill -TERM "$AGENT_PID"
wait "$AGENT_PID"

# Without CAP_SYS_PTRACE: the agent can neither check that uid 107's QEMU
# runs a VMM binary (/proc/PID/exe) nor tag it (prctl fails with EPERM, the
# same ptrace access check). It does not take the process for vm-lp2 on its
# word; csd shows the host's unverifiable process and why, and the VM is
# never said to be enforced.
vm_as_qemu vm-lp2 -smp 2 --duty 30
vm2=$LAB_PID
csctl tag vm-lp2 --tenant globex || lab_fail "tag vm-lp2"
agent_with_caps +sys_nice,+net_admin
lab_wait_for 30 sh -c 'csctl hosts get lab -o json | grep -q "needs CAP_SYS_PTRACE"' ||
  { csctl hosts get lab; tail -20 /tmp/agent.log; lab_fail "csd does not show why vm-lp2's process cannot be checked"; }
reason=$(csctl hosts get lab -o json | awk -F'"' '/"reason"/ && /CAP_SYS_PTRACE/ {print $4; exit}')
lab_result "without CAP_SYS_PTRACE" "vm-lp2's QEMU is not believed: $reason"
csctl get vm-lp2 -o json | grep -q '"state": "enforced"' && lab_fail "vm-lp2 reported enforced without CAP_SYS_PTRACE"
[ "$(lab_cookies_of "$vm2")" = 0 ] || lab_fail "vm-lp2 got cookies without CAP_SYS_PTRACE"
kill -TERM "$AGENT_PID"
wait "$AGENT_PID"
lab_stop_vm "$vm"
lab_stop_vm "$vm2"
