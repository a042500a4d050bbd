# Agent fault: a corrupt state file. cs-agent is killed with SIGKILL, csd is
# stopped, bytes in the middle of the agent's assignments.pb are overwritten
# (its checksum no longer matches) and a new VM starts; then the agent is
# restarted with csd away, and csd comes back later.
#
# The restarted agent must run on (an agent that exits loops under
# Restart=always and leaves every VM started meanwhile untagged), move the
# file aside and name it in one ERROR line and a metric, and keep every VM
# fail-closed: the ones it had tagged on the cookies they hold, the new one
# on a cookie of its own. A sampler reads every thread of the tagged VMs
# every 5 ms from before the kill until csd's state is enforced again: no
# thread may ever be at cookie 0.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT

# The longest the sampler may run: it is stopped once csd's state is back,
# and the scenario fails if it ended before that, since then the end was
# not watched.
watch_s=120

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
# vm-4 starts while the agent is down; csd knows it already.
csctl tag vm-4 --tenant globex || lab_fail "tag vm-4"
for vm in vm-1 vm-2 vm-3; do lab_wait_enforced $vm; done
acme=$(lab_one_cookie "$vm1")
[ "$(lab_one_cookie "$vm2")" = "$acme" ] || lab_fail "vm-1 and vm-2 do not share acme's cookie"
globex=$(lab_one_cookie "$vm3")
[ "$globex" != "$acme" ] || lab_fail "vm-3 shares acme's cookie"
state=/tmp/agent/assignments.pb
lab_wait_for 10 test -s "$state" || lab_fail "the agent kept no $state"

lab_cookies --watch 5 "$watch_s" "$vm1" "$vm2" "$vm3" >/tmp/watch.txt &
sampler=$!
watch_until=$(($(cut -d. -f1 /proc/uptime) + watch_s))
sleep 1

kill -9 "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
kill "$CSD_PID"
wait "$CSD_PID" 2>/dev/null
size=$(wc -c <"$state")
printf 'bit rot' | dd of="$state" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null ||
  lab_fail "cannot corrupt $state"
cp "$state" /tmp/corrupted.pb
lab_result "state file" "$size bytes, 7 overwritten at offset $((size / 2))"
lab_start_vm vm-4 -smp 1 --duty 30
vm4=$LAB_PID

echo "--- restart ---" >>/tmp/agent.log
restarted=$(cut -d' ' -f1 /proc/uptime)
lab_start_agent
since_restart() { sed -n '/--- restart ---/,$p' /tmp/agent.log; }
lab_wait_for 30 sh -c "sed -n '/--- restart ---/,\$p' /tmp/agent.log | grep -q 'reconcile pass:'" ||
  { since_restart | tail -20; lab_fail "the restarted agent made no reconcile pass"; }
lab_wait_for 20 lab_has_one_cookie "$vm4" ||
  lab_fail "vm-4, started while the agent was down, has no cookie of its own: $(lab_cookies "$vm4" | tr '\n' ';')"
tagged=$(cut -d' ' -f1 /proc/uptime)
lab_result "vm-4 (started while the agent was down)" \
  "$(awk -v a="$restarted" -v b="$tagged" 'BEGIN{printf "%.2f", b - a}') s from the agent's restart to a cookie of its own"

# Give a looping agent time to die: it must still be there.
sleep 2
kill -0 "$AGENT_PID" 2>/dev/null ||
  { since_restart | tail -20; lab_fail "the agent exited after the restart"; }
error=$(since_restart | grep '^E.*not using the kept assignments' | head -1)
[ -n "$error" ] || { since_restart | tail -20; lab_fail "no ERROR line names the corrupt state file"; }
lab_result "ERROR line" "${error#*] }"
set -- /tmp/agent/assignments.pb.corrupt-*
[ -f "$1" ] || lab_fail "the corrupt file was not moved aside: $(ls /tmp/agent | tr '\n' ' ')"
cmp -s "$1" /tmp/corrupted.pb || lab_fail "$1 is not the corrupt file as it was"
echo "$error" | grep -qF "moved it to $1" || lab_fail "the ERROR line does not name $1"
[ ! -e "$state" ] || lab_fail "$state is still there (csd is away: nothing should have written it)"
lab_wait_for 20 sh -c 'wget -q -O /tmp/metrics.txt http://127.0.0.1:9464/metrics' ||
  lab_fail "cannot scrape the agent's /metrics"
counted=$(awk '$1 == "cosched_agent_state_unusable_total{reason=\"corrupt\"}" {print $2}' /tmp/metrics.txt)
[ "$counted" = 1 ] || lab_fail "cosched_agent_state_unusable_total{reason=\"corrupt\"} is '$counted', not 1"

# Fail-closed with csd away: every VM holds one cookie, none shares with
# another tenant's, and the tagged VMs kept theirs (one of acme's two keeps
# the group's cookie, the other is split off on a new one, never through 0).
c1=$(lab_one_cookie "$vm1")
c2=$(lab_one_cookie "$vm2")
c3=$(lab_one_cookie "$vm3")
c4=$(lab_one_cookie "$vm4")
[ "$c3" = "$globex" ] || lab_fail "vm-3 lost its cookie $globex across the restart (now $c3)"
[ "$c1" = "$acme" ] || [ "$c2" = "$acme" ] || lab_fail "neither vm-1 nor vm-2 kept acme's cookie $acme"
[ "$(printf '%s\n' "$c1" "$c2" "$c3" "$c4" | sort -u | wc -l)" = 4 ] ||
  lab_fail "fail-closed VMs share cookies: vm-1 $c1 vm-2 $c2 vm-3 $c3 vm-4 $c4"
lab_result "csd away" "vm-1 $c1, vm-2 $c2, vm-3 $c3, vm-4 $c4 (acme was $acme, globex $globex)"

# csd is back: its state replaces the fail-closed groups, and is kept again.
lab_start_csd
lab_wait_host
for vm in vm-1 vm-2 vm-3 vm-4; do lab_wait_enforced $vm; done
acme_again() { [ "$(lab_cookies_of "$vm1")" = "$(lab_cookies_of "$vm2")" ]; }
lab_wait_for 20 acme_again ||
  lab_fail "vm-1 and vm-2 do not share a cookie again once csd is back"
lab_one_cookie "$vm1" >/dev/null
lab_one_cookie "$vm4" >/dev/null
lab_wait_for 10 sh -c "head -c 20 $state | grep -q cs-agent-assignments" ||
  lab_fail "the agent did not save csd's state to $state again"
[ "$(cut -d. -f1 /proc/uptime)" -lt "$watch_until" ] ||
  lab_fail "the sampler ended before csd's state was back: raise watch_s"
lab_result "csd back" "every VM enforced, vm-1 and vm-2 share $(lab_cookies_of "$vm1") again"

kill -TERM "$sampler"
wait "$sampler"
cp /tmp/watch.txt "$LAB_OUT/" 2>/dev/null
lab_result "sampler" "$(tail -1 /tmp/watch.txt)"
grep -q '^samples ' /tmp/watch.txt || lab_fail "the sampler printed no summary"
grep -q -- ' -> error' /tmp/watch.txt && lab_fail "the sampler could not read a cookie: $(grep -- ' -> error' /tmp/watch.txt | head -3 | tr '\n' ';')"
to_zero=$(grep -c -- ' -> 0 ' /tmp/watch.txt)
[ "$to_zero" = 0 ] || lab_fail "a VM thread was at cookie 0: $(grep -- ' -> 0 ' /tmp/watch.txt | head -3 | tr '\n' ';')"
for pid in "$vm1" "$vm2" "$vm3" "$vm4"; do lab_stop_vm "$pid"; done
