# SIGKILL of cs-agent in the middle of tagging a VM of 51 threads. The
# agent is frozen (SIGSTOP) while the VM starts, so the VM is complete and
# untagged when the agent wakes; the lab kills it the moment the first
# thread (QEMU's main thread, where the group's cookie is created) holds a
# cookie, and counts how many threads were tagged by then. A sampler reads
# every thread's cookie every few ms throughout: no thread may go back to 0
# once tagged. After a restart every thread is in the VM's group, and csd
# shows the VM enforced.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT

lab_start_csd
lab_start_agent
lab_wait_host
csctl tag vm-big --tenant acme || lab_fail "tag vm-big"
sleep 1

attempt=1
while :; do
  kill -STOP "$AGENT_PID"
  lab_start_vm vm-big -smp 48 --duty 1
  vm=$LAB_PID
  threads=$(lab_cookies "$vm" | wc -l)
  [ "$(lab_cookies_of "$vm")" = 0 ] || lab_fail "vm-big has cookies before the agent ran"
  lab_cookies --watch 5 30 "$vm" >/tmp/watch.txt &
  sampler=$!
  lab_cookies --kill-on-cookie "$vm" "$AGENT_PID" 20000 >/tmp/kill.txt &
  killer=$!
  sleep 0.2
  kill -CONT "$AGENT_PID"
  wait "$killer" || lab_fail "the agent never tagged vm-big's main thread"
  wait "$AGENT_PID" 2>/dev/null
  read -r _ us _ tagged _ total </tmp/kill.txt
  lab_result "kill, attempt $attempt" "SIGKILL ${us} us after the agent woke; $tagged of $total threads tagged"
  [ "$tagged" -lt "$total" ] && break
  # The agent finished before the kill landed: not the case under test.
  [ $attempt -lt 3 ] || lab_fail "in 3 attempts the agent was never killed mid-tagging"
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  lab_stop_vm "$vm"
  lab_start_agent
  lab_wait_host
  attempt=$((attempt + 1))
done

started=$(cut -d' ' -f1 /proc/uptime)
lab_start_agent
# one_cookie PID: every thread of PID holds one cookie, not 0.
one_cookie() { [ "$(lab_cookies_of "$1" | wc -l)" = 1 ] && [ "$(lab_cookies_of "$1")" != 0 ]; }
lab_wait_for 20 one_cookie "$vm" ||
  lab_fail "after the restart vm-big's threads do not share one cookie: $(lab_cookies "$vm" | awk '{print $3}' | sort | uniq -c | tr '\n' ';')"
done_at=$(cut -d' ' -f1 /proc/uptime)
cookie=$(lab_one_cookie "$vm")
lab_result "after restart" "all $threads threads hold $cookie, $(awk -v a="$started" -v b="$done_at" 'BEGIN{printf "%.2f", b - a}') s after the agent restarted"
lab_wait_enforced vm-big
# A second more of samples past enforcement, then the sampler stops (30 s
# is its limit, not the time it needs).
sleep 1
kill -TERM "$sampler"
wait "$sampler"
cp /tmp/watch.txt "$LAB_OUT/" 2>/dev/null
summary=$(tail -1 /tmp/watch.txt)
lab_result "sampler" "$summary"
to_zero=$(grep -c -- ' -> 0 ' /tmp/watch.txt)
[ "$to_zero" = 0 ] || lab_fail "a thread went back to cookie 0: $(grep -- ' -> 0 ' /tmp/watch.txt | head -3 | tr '\n' ';')"
lab_stop_vm "$vm"
