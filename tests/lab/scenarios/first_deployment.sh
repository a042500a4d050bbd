# docs/operating.md "First deployment", step by step, on the packages under
# real systemd (run_lab.sh --systemd), on a hypervisor whose VM runs before
# cosched is there. Shows that no cookie changes until the rollout enables
# the host: not at the agent's first start, not while it observes
# (enforce: observe) and csd tags its VM, not at the reload that turns
# observing off; and that what observing predicted is what enforcing does.
#
# The lab boots with csd.service and cs-agent.service started (lab.target);
# the scenario first makes this host a fresh one: cs-agent stopped, the
# host forgotten by csd (`csctl hosts rm`), the agent's state dir emptied.
# The lab has one host: it is the canary, and step 6 (the fleet) is the
# canary's rollout running its last stage.
. "$LAB_GUEST/lib.sh"
set -u
unset CSCTL_SERVER  # csctl as root: csd's Unix socket, admin

QEMU_UID=107
main_pid() { systemctl show -p MainPID --value "$1"; }
agent_yaml=/etc/cosched/cs-agent.yaml

lab_wait_for 60 systemctl is-active -q csd.service ||
  lab_fail "csd.service is not active: $(systemctl status csd.service --no-pager 2>&1 | tail -5)"
lab_wait_for 60 systemctl is-active -q cs-agent.service ||
  lab_fail "cs-agent.service is not active"
lab_wait_host
systemctl stop cs-agent.service || lab_fail "systemctl stop cs-agent.service"
lab_wait_for 30 sh -c 'csctl hosts get lab -o json | grep -q "\"connected\": false"' ||
  lab_fail "csd still shows the stopped agent connected"
csctl hosts rm lab || lab_fail "csctl hosts rm lab (a fresh host for the scenario)"
rm -rf /var/lib/cs-agent/* /var/lib/cs-agent/.[!.]* 2>/dev/null
lab_result "a fresh host" "cs-agent stopped, host lab forgotten by csd, /var/lib/cs-agent empty"

# A VM runs before cosched: its threads hold no cookie.
chmod 1777 /tmp
rm -f /tmp/vm-fd.pid
setpriv --reuid=$QEMU_UID --regid=$QEMU_UID --clear-groups \
  qemu-system-x86_64 -name guest=vm-fd,debug-threads=on -pidfile /tmp/vm-fd.pid -smp 2 --duty 30 \
  2>/tmp/vm-fd.err &
vm=$!
lab_wait_for 10 test -s /tmp/vm-fd.pid || lab_fail "the fake QEMU did not start: $(cat /tmp/vm-fd.err)"
# no_cookie WHEN: every thread of the VM still has cookie 0.
no_cookie() {
  cookies=$(lab_cookies_of "$vm" | tr '\n' ' ')
  [ "$cookies" = "0 " ] || lab_fail "$1: the VM's threads hold cookies ($cookies); nothing may be set before the rollout"
}
no_cookie "before cosched"

# Step 1: csd (its unit runs). Step 2: new hosts wait for a rollout.
csctl rollout new-hosts wait-for-rollout --reason "first deployment (lab)" ||
  lab_fail "csctl rollout new-hosts wait-for-rollout"
lab_result "steps 1-2" "csd.service serves (pid $(main_pid csd.service)); new hosts wait for a rollout"

# Step 3: the canary's agent, observing.
cp "$agent_yaml" /tmp/cs-agent.yaml.orig
printf 'enforce: observe\nlabels: {stage: canary}\n' >>"$agent_yaml"
systemctl start cs-agent.service || lab_fail "systemctl start cs-agent.service"
lab_wait_host
lab_wait_for 30 sh -c 'csctl hosts ls | grep -q "^lab .*not-enabled+observe"' ||
  { csctl hosts ls; lab_fail "csctl hosts ls does not show lab not-enabled+observe"; }
# vm_field KEY: a string field of vm-fd as csctl shows it in JSON.
vm_field() { csctl get vm-fd -o json | sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p" | head -1; }
# csd keeps no record of a VM nobody tagged: the agent's metrics say it.
lab_wait_for 30 sh -c 'curl -sf http://127.0.0.1:9464/metrics | grep -q "^cosched_agent_vms{state=\"observed\"} 1"' ||
  { curl -sf http://127.0.0.1:9464/metrics | grep '^cosched_agent_vms'; lab_fail "the agent does not count the VM observed"; }
no_cookie "the observing agent's first passes"
lab_result "step 3: observing" "$(csctl hosts ls | awk '$1 == "lab"' | tr -s ' ' | cut -d' ' -f1-7); cosched_agent_vms{state=\"observed\"} 1"

# Step 4: tag. The canary shows what tagging would do; still no cookie.
csctl tag vm-fd --tenant acme || lab_fail "csctl tag vm-fd"
lab_wait_for 30 sh -c "csctl get vm-fd -o json | grep -q '\"observed_state\": \"enforced\"'" ||
  { csctl get vm-fd; lab_fail "the tagged VM is not observed as enforced"; }
group=$(vm_field applied_trust_group)
[ -n "$group" ] && [ "${group#\~}" = "$group" ] ||
  lab_fail "the observed group of the tagged VM is '$group', not its trust group"
journalctl -u cs-agent.service --no-pager | grep -q 'reconcile pass (observing, nothing written)' ||
  lab_fail "the observing agent logged no pass"
no_cookie "observing after the tag"
lab_result "step 4: tagged" "vm-fd observed: enforcing would make it enforced in group $group; no cookie set"

# Step 5: the canary enforces: observe off by a reload (still not enabled:
# nothing changes), then a rollout over the canaries.
cp /tmp/cs-agent.yaml.orig "$agent_yaml"
printf 'labels: {stage: canary}\n' >>"$agent_yaml"
pid=$(main_pid cs-agent.service)
systemctl reload cs-agent.service || lab_fail "systemctl reload cs-agent.service"
lab_wait_for 30 sh -c 'csctl hosts ls | grep -q "^lab .*not-enabled "' ||
  { csctl hosts ls; lab_fail "after the reload lab is not shown not-enabled (without observe)"; }
lab_wait_for 30 sh -c "csctl get vm-fd -o json | grep -q '\"state\": \"not-enabled\"'" ||
  { csctl get vm-fd; lab_fail "vm-fd is not not-enabled after the reload"; }
[ "$(main_pid cs-agent.service)" = "$pid" ] || lab_fail "systemctl reload restarted cs-agent"
no_cookie "the reload that turned observing off"
csctl rollout start --selector stage=canary --stages 100% --soak 90s ||
  lab_fail "csctl rollout start over the canaries"
lab_wait_enforced vm-fd 60
cookie=$(lab_one_cookie "$vm")
applied=$(vm_field applied_trust_group)
[ "$applied" = "$group" ] || lab_fail "enforced in group '$applied', observing predicted '$group'"
lab_result "step 5: the canary enforces" "rollout over stage=canary; vm-fd enforced in group $applied (as observed), every thread on cookie $cookie"

# Step 6 (one host: the canary is the fleet): the rollout runs its last
# stage, soaking (it ends by itself once the soak passes), and the host
# enforces.
csctl rollout status -o json | grep -q '"state": "running"' ||
  { csctl rollout status; lab_fail "the rollout is not running"; }
csctl hosts ls | grep -q "^lab .* enforce " ||
  { csctl hosts ls; lab_fail "csctl hosts ls does not show lab enforcing"; }
lab_result "step 6" "rollout running its 100% stage; $(csctl hosts ls | awk '$1 == "lab"' | tr -s ' ' | cut -d' ' -f1-7)"
lab_stop_vm "$vm"
