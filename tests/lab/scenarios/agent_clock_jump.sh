# Clock jumps: the wall clock steps back an hour and then forward two while
# csd and cs-agent run. Timers, backoff, report intervals and RPC deadlines
# run on monotonic clocks, so tagging, reports and reconnects go on as if
# nothing happened (a deadline computed from a stepped wall clock would
# expire at once or never).
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT

# jump SECONDS: steps the wall clock by SECONDS (may be negative).
jump() {
  local now
  now=$(date +%s)
  date -s "@$((now + $1))" >/dev/null || lab_fail "date -s failed"
  lab_log "wall clock stepped by $1 s: now $(date -u '+%F %T')"
}

# tagged PID: every thread of PID holds one cookie, not 0.
tagged() {
  local c
  c=$(lab_cookies_of "$1")
  [ "$(echo "$c" | wc -l)" = 1 ] && [ "$c" != 0 ] && [ "${c#error}" = "$c" ]
}

# tag_and_time VM TENANT PID: tags VM and prints the seconds until its threads
# hold a cookie (read by the lab, not through reports). The agent runs with
# fail_open, so an untagged VM has none.
tag_and_time() {
  local t0 t1
  [ "$(lab_cookies_of "$3")" = 0 ] || lab_fail "$1 has a cookie before its tag"
  t0=$(cut -d' ' -f1 /proc/uptime)
  csctl tag "$1" --tenant "$2" >/dev/null || lab_fail "tag $1"
  lab_wait_for 30 tagged "$3" || lab_fail "$1 was not tagged"
  t1=$(cut -d' ' -f1 /proc/uptime)
  awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}'
}

lab_start_vm vm-1 -smp 2 --duty 10
vm1=$LAB_PID
lab_start_csd
cat >/tmp/agent.yaml <<EOF
server: "$CSCTL_SERVER"
host_id: lab
state_dir: /tmp/agent
discovery: procfs
fail_open: true
report_interval_s: 2
EOF
cs-agent --config /tmp/agent.yaml >>/tmp/agent.log 2>&1 &
AGENT_PID=$!
lab_wait_host
took=$(tag_and_time vm-1 acme "$vm1") || exit 1
lab_result "before any jump" "vm-1 tagged $took s after csctl tag"

# Back one hour, with everything connected.
jump -3600
lab_start_vm vm-2 -smp 2 --duty 10
vm2=$LAB_PID
took=$(tag_and_time vm-2 globex "$vm2") || exit 1
lab_result "after a step back of 1 h" "vm-2 tagged $took s after csctl tag"
lab_float_cmp "$took" "<" 10 || lab_fail "tagging took $took s after the clock stepped back"
seen1=$(csctl hosts get lab -o json | awk -F'"' '/"last_seen_time"/ {print $4}')
lab_wait_for 10 sh -c "[ \"\$(csctl hosts get lab -o json | awk -F'\"' '/\"last_seen_time\"/ {print \$4}')\" != '$seen1' ]" ||
  lab_fail "the agent stopped reporting after the clock stepped back (last seen $seen1)"
lab_result "reports after the step back" "last seen moved on from $seen1"

# csd goes away, the clock steps forward two hours while the agent retries,
# and csd comes back: the agent reconnects within its backoff (at most 10 s
# between attempts); a sleep on the wall clock would last two hours less, or
# after a step back, an hour more.
kill -KILL "$CSD_PID"
wait "$CSD_PID" 2>/dev/null
sleep 1
jump 7200
lab_start_csd
t0=$(cut -d' ' -f1 /proc/uptime)
lab_wait_host
t1=$(cut -d' ' -f1 /proc/uptime)
back=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}')
lab_result "reconnect after csd restart and a step forward of 2 h" "$back s after csd answered"
lab_float_cmp "$back" "<" 20 || lab_fail "the agent took $back s to reconnect"
lab_start_vm vm-3 -smp 2 --duty 10
vm3=$LAB_PID
took=$(tag_and_time vm-3 acme "$vm3") || exit 1
lab_result "after a step forward of 2 h" "vm-3 tagged $took s after csctl tag"
lab_float_cmp "$took" "<" 10 || lab_fail "tagging took $took s after the clock stepped forward"
for pid in "$vm1" "$vm2" "$vm3"; do lab_one_cookie "$pid" >/dev/null; done
lab_result "cookies" "vm-1 $(lab_one_cookie "$vm1"), vm-2 $(lab_one_cookie "$vm2"), vm-3 $(lab_one_cookie "$vm3")"
lab_stop_vm "$vm1"
lab_stop_vm "$vm2"
lab_stop_vm "$vm3"
