# Helpers for lab scenarios (busybox sh). A scenario starts with
#   . /lab/lib.sh
# and gets: $LAB_OUT (the shared folder: files written there come back to the
# host), $LAB_RESULTS (figures, printed by the harness), $LAB_TRACEFS, and the
# project binaries in /bin.

lab_log() { echo "[lab $(cut -d' ' -f1 /proc/uptime)s] $*"; }

# lab_fail REASON: records the reason (the first one becomes the verdict) and
# ends the scenario.
lab_fail() {
  echo "$*" >>"$LAB_FAILURES"
  echo "[lab] FAIL: $*"
  exit 1
}

# lab_result NAME VALUE...: one figure, "NAME: VALUE", shown by the harness.
lab_result() {
  local name=$1; shift
  echo "$name: $*" >>"$LAB_RESULTS"
  echo "[lab] $name: $*"
}

# lab_wait_for SECONDS COMMAND...: polls COMMAND every 50 ms until it succeeds.
lab_wait_for() {
  local limit=$1 waited=0; shift
  while ! "$@" 2>/dev/null; do
    [ $waited -ge $((limit * 20)) ] && return 1
    sleep 0.05
    waited=$((waited + 1))
  done
}

# lab_start_vm NAME FAKE_QEMU_ARGS...: starts a fake QEMU VM in the background
# and waits until all its threads exist. Sets LAB_PID to its pid (a child of
# the calling shell, so `wait $LAB_PID` gives its exit status).
lab_start_vm() {
  local name=$1; shift
  rm -f "/run/$name.pid"
  qemu-system-x86_64 -name "guest=$name,debug-threads=on" -pidfile "/run/$name.pid" "$@" &
  LAB_PID=$!
  lab_wait_for 10 test -s "/run/$name.pid" || lab_fail "VM $name did not start"
  [ "$(cat "/run/$name.pid")" = "$LAB_PID" ] || lab_fail "VM $name: pidfile does not match"
}

# lab_stop_vm PID: SIGTERM, and fails unless the fake QEMU exits cleanly.
lab_stop_vm() {
  kill -TERM "$1"
  wait "$1" || lab_fail "fake QEMU $1 did not exit cleanly (status $?)"
}

# lab_trace_setup: sched_switch on, global clock, big buffers, not recording.
# The event stays enabled until power-off: turning a tracepoint off patches
# kernel code, and that is where the emulator's code-patching race oopses the
# guest. Recording windows use tracing_on, which patches nothing.
lab_trace_setup() {
  local t=$LAB_TRACEFS
  echo 0 >"$t/tracing_on"
  echo global >"$t/trace_clock" || lab_fail "no global trace clock"
  echo 8192 >"$t/buffer_size_kb"
  echo 1 >"$t/events/sched/sched_switch/enable" || lab_fail "cannot enable sched:sched_switch"
}

# lab_trace_record SECONDS FILE: a fresh sched_switch trace of SECONDS.
lab_trace_record() {
  local t=$LAB_TRACEFS
  echo >"$t/trace"
  echo 1 >"$t/tracing_on"
  sleep "$1"
  echo 0 >"$t/tracing_on"
  cat "$t/trace" >"$2"
}

# lab_stretch_slices [NS]: sets the scheduler's base slice (default 30 ms,
# the kernel's is 3 ms here). Emulated CPUs run far slower than real ones and
# take an interrupt only when the host runs their thread, so every change of
# cookie on a core opens a window of milliseconds in which the siblings run
# different cookies (see "What the lab can and cannot show"). Longer slices
# mean fewer such changes; core scheduling itself is unchanged.
lab_stretch_slices() {
  local ns=${1:-30000000}
  [ -d /sys/kernel/debug/sched ] || mount -t debugfs debugfs /sys/kernel/debug
  echo "$ns" >/sys/kernel/debug/sched/base_slice_ns || lab_fail "cannot set base_slice_ns"
}

# lab_check_topology: CPUs 0-1 and 2-3 are SMT siblings, as the lab expects.
lab_check_topology() {
  local cpu expect got
  for cpu in 0 1 2 3; do
    expect=0-1
    [ $cpu -ge 2 ] && expect=2-3
    got=$(cat /sys/devices/system/cpu/cpu$cpu/topology/thread_siblings_list 2>/dev/null)
    [ "$got" = "$expect" ] || lab_fail "topology: cpu$cpu siblings '$got', expected $expect"
  done
}

# lab_cookies_of PID: the distinct cookie values of PID's threads, one a line.
lab_cookies_of() { lab_cookies "$1" | awk '{print $3}' | sort -u; }

# lab_share_field FILE GROUP FIELD: a figure from `lab_sibling_share --text`
# output (fields: 2 run_ms, 3 same%, 4 idle%, 5 foreign%, 6 unknown%,
# 7 foreign intervals, 8 longest foreign us).
lab_share_field() { awk -v g="$2" -v f="$3" '$1 == g {print $f}' "$1"; }

# lab_float_cmp A OP B: awk float comparison, OP one of < <= > >=.
lab_float_cmp() { awk -v a="$1" -v b="$3" -v op="$2" 'BEGIN{
  r = (op == "<") ? a < b : (op == "<=") ? a <= b : (op == ">") ? a > b : a >= b; exit !r }'; }

# --- the cosched stack in the guest -------------------------------------

export CSCTL_SERVER=127.0.0.1:7443

# lab_start_csd: csd on loopback, store in /tmp/csd (kept across restarts).
lab_start_csd() {
  csd --listen "$CSCTL_SERVER" --data-dir /tmp/csd >>/tmp/csd.log 2>&1 &
  CSD_PID=$!
  lab_wait_for 30 csctl hosts ls >/dev/null || { cat /tmp/csd.log; lab_fail "csd did not start"; }
}

# lab_start_agent [ARGS...]: cs-agent for host "lab" finding VMs in procfs,
# state in /tmp/agent (kept across restarts). Waits until csd knows the host.
lab_start_agent() {
  cs-agent --server "$CSCTL_SERVER" --host-id lab --state-dir /tmp/agent \
    --discovery procfs "$@" >>/tmp/agent.log 2>&1 &
  AGENT_PID=$!
}

# lab_wait_host: csd has the agent's registration.
lab_wait_host() {
  lab_wait_for 30 sh -c 'csctl hosts get lab -o json | grep -q "\"connected\": true"' ||
    { tail -20 /tmp/agent.log; lab_fail "the agent did not connect to csd"; }
}

# lab_wait_enforced VM [SECONDS]: csd shows VM enforced by the agent.
lab_wait_enforced() {
  lab_wait_for "${2:-30}" sh -c "csctl get $1 -o json | grep -q '\"state\": \"enforced\"'" ||
    { csctl get "$1"; tail -20 /tmp/agent.log; lab_fail "$1 is not enforced"; }
}

# lab_one_cookie PID: prints the single cookie all of PID's threads share;
# fails when they differ, have none or cannot be read.
lab_one_cookie() {
  local cookies
  cookies=$(lab_cookies_of "$1")
  [ "$(echo "$cookies" | wc -l)" = 1 ] && [ "$cookies" != 0 ] && [ "${cookies#error}" = "$cookies" ] ||
    lab_fail "threads of $1 do not share one cookie: $(lab_cookies "$1" | tr '\n' ';')"
  echo "$cookies"
}

# lab_last_reconcile: the agent's last logged pass that changed something.
lab_last_reconcile() { grep 'reconcile pass:' /tmp/agent.log | tail -1 | sed 's/.*reconcile pass: //'; }

# lab_keep_logs: copies csd's and the agent's logs to the results folder.
lab_keep_logs() { cp /tmp/csd.log /tmp/agent.log "$LAB_OUT/" 2>/dev/null || true; }
