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

# lab_uptime_cs: sets LAB_NOW_CS to the guest's uptime in centiseconds
# (/proc/uptime; `read` is a builtin, so no program is started).
lab_uptime_cs() {
  local up rest
  read -r up rest </proc/uptime
  # "12.05": 12 * 100 + (105 - 100), so that a fraction "05" is not octal.
  LAB_NOW_CS=$(( ${up%.*} * 100 + 1${up#*.} - 100 ))
}

# lab_wait_for SECONDS COMMAND...: polls COMMAND every 50 ms until it
# succeeds, for at most SECONDS of elapsed time (a whole number). Bounded by
# the clock, not by a count of polls: in the emulated guest one poll that
# starts csctl takes far longer than the 50 ms between polls. COMMAND is
# tried at least once; a poll that ends past the deadline is the last.
lab_wait_for() {
  local deadline
  lab_uptime_cs
  deadline=$((LAB_NOW_CS + $1 * 100)); shift
  while ! "$@" 2>/dev/null; do
    lab_uptime_cs
    [ $LAB_NOW_CS -ge $deadline ] && return 1
    sleep 0.05
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

# lab_vhost_workers PID: the tids of the real vhost-net workers of fake QEMU
# PID (--vhost-net), one a line. Linux >= 6.4 (the 6.12 lab kernel) makes
# them threads of PID, 6.1 kernel threads (children of kthreadd); both are
# named vhost-PID (lab_cookies -n matches processes, not threads).
lab_vhost_workers() {
  lab_cookies "$1" | awk -v n="vhost-$1" '$4 == n {print $2}'
  lab_cookies -n "vhost-$1" 2>/dev/null | awk '{print $2}'
}

# lab_vhost_kthreads PID: those of them that are kernel threads (6.1), not
# threads of PID; none on 6.12.
lab_vhost_kthreads() { lab_cookies -n "vhost-$1" 2>/dev/null | awk '{print $2}'; }

# lab_vhost_worker_cookies PID: the distinct cookies of PID's vhost workers,
# one a line.
lab_vhost_worker_cookies() {
  local t
  for t in $(lab_vhost_workers "$1"); do lab_cookies "$t" | awk -v t="$t" '$2 == t {print $3}'; done | sort -u
}

# lab_share_field FILE GROUP FIELD: a figure from `lab_sibling_share --text`
# output (fields: 2 run_ms, 3 same%, 4 idle%, 5 foreign%, 6 unknown%,
# 7 foreign intervals, 8 longest foreign us).
lab_share_field() { awk -v g="$2" -v f="$3" '$1 == g {print $f}' "$1"; }

# lab_float_cmp A OP B: awk float comparison, OP one of < <= > >=.
lab_float_cmp() { awk -v a="$1" -v b="$3" -v op="$2" 'BEGIN{
  r = (op == "<") ? a < b : (op == "<=") ? a <= b : (op == ">") ? a > b : a >= b; exit !r }'; }

# lab_foreign_verdict TAGGED UNTAGGED: empty when a tagged VM's foreign share
# (%) passes, else why not. It is judged against the VM's untagged share
# measured in the same run, not against a fixed figure: under software
# emulation the windows in which a core switches cookies stretch with the
# build machine's load (ARCHITECTURE.md, "What the lab can and cannot
# show"), and correct agents measured 1.5-3% on an idle 2-core machine
# where untagged was 93-95%. Passing takes both:
# - UNTAGGED over 50%: the VMs did share cores, so the base means something;
# - TAGGED at least 20x below UNTAGGED, and at most 10%. A real leak (a VM
#   left at cookie 0 beside another untagged task, two tenants on one
#   cookie) lets the VMs share siblings as untagged ones do, which both
#   rules catch; the ceiling names that case when the ratio alone would
#   only say "too close".
lab_foreign_verdict() {
  lab_float_cmp "$2" ">" 50 || { echo "untagged foreign $2% is not over 50%: the VMs did not share cores"; return; }
  lab_float_cmp "$1" "<=" 10 || { echo "tagged foreign $1% is over the 10% ceiling: a leak"; return; }
  lab_float_cmp "$(awk -v a="$1" 'BEGIN { print a * 20 }')" "<=" "$2" ||
    echo "tagged foreign $1% is not 20x below untagged $2% of this run"
}

# --- the cosched stack in the guest -------------------------------------

export CSCTL_SERVER=127.0.0.1:7443

# lab_start_csd: csd on loopback, store in /tmp/csd (kept across restarts).
# The scenarios' csctl and agents talk plaintext TCP: this csd.yaml makes
# them admin and lets agents act for their host (csd's defaults: viewer, no
# host); no Unix socket, so csctl stays on $CSCTL_SERVER. $LAB_CSD_CONFIG,
# when set, is more YAML for csd's config file.
lab_start_csd() {
  {
    printf 'plaintext_role: admin\nplaintext_agents: true\nlocal_socket: {path: "off"}\n'
    [ -z "${LAB_CSD_CONFIG:-}" ] || printf '%s\n' "$LAB_CSD_CONFIG"
  } >/tmp/csd.yaml
  csd --config /tmp/csd.yaml --listen "$CSCTL_SERVER" --data-dir /tmp/csd >>/tmp/csd.log 2>&1 &
  CSD_PID=$!
  lab_wait_for 30 csctl hosts ls >/dev/null || { cat /tmp/csd.log; lab_fail "csd did not start"; }
}

# lab_start_agent [ARGS...]: cs-agent for host "lab" finding VMs in procfs,
# state in /tmp/agent (kept across restarts). After lab_crosscheck_begin its
# collector runs, with 1 s windows, polling every 500 ms (it is a host task
# too, and the guest is slow). Without it the agent only tags: the
# collector and the lab's trace make the slow guest slower, and scenarios
# that judge foreign time against untagged run without them (agent_telemetry
# measures it with them). $LAB_AGENT_CONFIG, when set, is more YAML for
# the agent's config file (one setting a line).
lab_start_agent() {
  {
    if [ "${LAB_CROSSCHECK:-0}" = 1 ]; then
      printf 'report_interval_s: 1\ntelemetry:\n  enabled: true\n  buffer_size_kb: 2048\n  poll_interval_ms: 500\n'
    else
      printf 'telemetry:\n  enabled: false\n'
    fi
    [ -z "${LAB_AGENT_CONFIG:-}" ] || printf '%s\n' "$LAB_AGENT_CONFIG"
  } >/tmp/agent-lab.yaml
  cs-agent --config /tmp/agent-lab.yaml --server "$CSCTL_SERVER" --host-id lab \
    --state-dir /tmp/agent --discovery procfs "$@" >>/tmp/agent.log 2>&1 &
  AGENT_PID=$!
}

# lab_start_reporting_agent [ARGS...]: lab_start_agent with its collector
# on (1 s windows, as after lab_crosscheck_begin) but no lab trace, once csd
# has its registration: for scenarios that judge the stats it reports.
lab_start_reporting_agent() {
  local crosscheck=${LAB_CROSSCHECK:-0}
  LAB_CROSSCHECK=1
  lab_start_agent "$@"
  LAB_CROSSCHECK=$crosscheck
  lab_wait_host
}

# lab_engine_changes_within MAX: the policy engine changed the host's layout
# at least once and at most MAX times (its EngineDecision audit records, one
# revision a change), kept in $LAB_OUT/engine-audit.json.
lab_engine_changes_within() {
  local changes
  csctl audit --who csd:engine --limit 1000 -o json >"$LAB_OUT/engine-audit.json" ||
    lab_fail "csctl audit"
  changes=$(awk '/"method": "EngineDecision"/ { d = 1 } d && /"revision":/ { r = $2; sub(/,$/, "", r); seen[r] = 1; d = 0 }
    END { n = 0; for (r in seen) n++; print n }' "$LAB_OUT/engine-audit.json")
  [ "$changes" -ge 1 ] && [ "$changes" -le "$1" ] ||
    lab_fail "the engine changed the layout $changes times (bound: $1 per hour)"
  lab_result "layout changes" "$changes (bound $1 per hour)"
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
  lab_has_one_cookie "$1" ||
    lab_fail "threads of $1 do not share one cookie: $(lab_cookies "$1" | tr '\n' ';')"
  lab_cookies_of "$1"
}

# lab_has_one_cookie PID [NOT]: whether PID's threads all hold one cookie,
# not 0 (and not NOT). A shell function: lab_wait_for can poll it, a child
# `sh -c` cannot see it.
lab_has_one_cookie() {
  local cookies
  cookies=$(lab_cookies_of "$1")
  [ -n "$cookies" ] && [ "$(echo "$cookies" | wc -l)" = 1 ] && [ "$cookies" != 0 ] &&
    [ "${cookies#error}" = "$cookies" ] && [ "$cookies" != "${2:-}" ]
}

# lab_last_reconcile: the agent's last logged pass that changed something.
lab_last_reconcile() { grep 'reconcile pass:' /tmp/agent.log | tail -1 | sed 's/.*reconcile pass: //'; }

# lab_keep_logs: copies csd's and the agent's logs to the results folder.
lab_keep_logs() { cp /tmp/csd.log /tmp/agent.log "$LAB_OUT/" 2>/dev/null || true; }

# --- live telemetry against an independent count ------------------------
# The agent's collector (live) is checked against `csctl analyze` of a text
# trace the lab records itself, in its own tracefs instance (so scenarios
# may still use the top-level one), with the `tai` clock: nothing sets a TAI
# offset here, so its timestamps are the wall clock the windows use.

LAB_CHECK=$LAB_TRACEFS/instances/lab-check

# lab_crosscheck_begin: starts the lab's trace, and turns the collector on
# in agents that lab_start_agent starts from now on.
lab_crosscheck_begin() {
  mkdir -p "$LAB_CHECK" || lab_fail "cannot create the tracefs instance lab-check"
  echo tai >"$LAB_CHECK/trace_clock" || lab_fail "no tai trace clock"
  echo 1 >"$LAB_CHECK/options/record-tgid" || lab_fail "no record-tgid trace option"
  echo 8192 >"$LAB_CHECK/buffer_size_kb"
  echo 1 >"$LAB_CHECK/events/sched/sched_switch/enable" || lab_fail "cannot enable sched:sched_switch"
  echo 1 >"$LAB_CHECK/tracing_on"
  rm -f /tmp/live-mark.json
  LAB_CROSSCHECK=1
}

# lab_crosscheck_mark: lab_crosscheck_end compares only the windows that end
# after this point. For runs whose VMs get their final thread map only after
# the collector started: a VM tagged at scope vcpus is fail-closed at scope
# emulator (all its threads) until csd's assignment arrives, and the
# offline map is fixed. Call it once every VM is enforced; it waits until
# csd holds a window that ended a second or more after the call, so the
# windows that follow it all start under the map of now.
lab_crosscheck_mark() {
  local after=$(($(date +%s) + 1))
  lab_wait_for 30 lab_stats_end_after "$after" /tmp/live-mark.json ||
    lab_fail "csd has no stats window that ended after $after"
  lab_result "crosscheck mark" "windows up to $(lab_json_field /tmp/live-mark.json end_unix_ns) ns left out"
}

# lab_stats_end_after SECONDS FILE: csd's stats for host lab into FILE, and
# whether its last window ended at Unix time SECONDS or later.
lab_stats_end_after() {
  local end
  csctl stats --host lab --window 1h -o json >"$2" || return 1
  end=$(lab_json_field "$2" end_unix_ns)
  [ -n "$end" ] && [ "${end%?????????}" -ge "$1" ]
}

# lab_stats_delta MARK NOW: the figures of the windows in NOW that MARK does
# not hold (two `csctl stats --host lab -o json` answers of one run, MARK the
# earlier), in the keys lab_json_field, lab_vm_figure and the per-core sums
# of lab_crosscheck_end read: span, windows, per VM runtime and shares (each
# share from both answers' nanoseconds), the per-core sums as one core.
lab_stats_delta() {
  awk -v mark="$1" '
    function field() { v = $2; sub(/,$/, "", v); gsub(/"/, "", v); return v }
    FNR == 1 { f = (FILENAME == mark) ? 1 : 2; name = ""; split("", o) }
    $1 == "\"start_unix_ns\":" || $1 == "\"end_unix_ns\":" || $1 == "\"windows\":" {
      k = $1; gsub(/[":]/, "", k); if (!((f, k) in top)) top[f, k] = field() }
    $1 ~ /^"(both_busy|one_idle|both_idle|unknown)_ns":$/ { k = $1; gsub(/[":]/, "", k); core[f, k] += field() }
    $1 ~ /^"(runtime_ns|same_pct|idle_pct|foreign_pct|unknown_pct)":$/ { k = $1; gsub(/[":]/, "", k); o[k] = field() }
    $1 == "\"vm\":" { name = field() }
    /}/ {
      if (name != "" && name != "total") {
        vms[name] = 1; rt[f, name] = o["runtime_ns"]
        for (k in o) if (k != "runtime_ns") ns[f, name, k] = o[k] * o["runtime_ns"] / 100
      }
      name = ""; split("", o)
    }
    END {
      printf "{\n  \"start_unix_ns\": %s,\n  \"end_unix_ns\": %s,\n  \"windows\": %d,\n  \"vms\": [\n",
        top[1, "end_unix_ns"], top[2, "end_unix_ns"], top[2, "windows"] - top[1, "windows"]
      for (vm in vms) {
        run = rt[2, vm] - rt[1, vm]
        if (run <= 0) continue
        printf "    {\n      \"runtime_ns\": %.0f,\n", run
        split("same_pct idle_pct foreign_pct unknown_pct", keys, " ")
        for (i = 1; i <= 4; i++) {
          pct = 100 * (ns[2, vm, keys[i]] - ns[1, vm, keys[i]]) / run
          # The answers round to 4 decimals: a share of 0 may come out -0.0000.
          if (pct < 0.00005 && pct > -0.00005) pct = 0
          printf "      \"%s\": %.4f,\n", keys[i], pct
        }
        printf "      \"vm\": \"%s\"\n    },\n", vm
      }
      printf "  ],\n  \"cores\": [\n    {\n"
      printf "      \"both_busy_ns\": %.0f,\n      \"one_idle_ns\": %.0f,\n", core[2, "both_busy_ns"] - core[1, "both_busy_ns"], core[2, "one_idle_ns"] - core[1, "one_idle_ns"]
      printf "      \"both_idle_ns\": %.0f,\n      \"unknown_ns\": %.0f\n    }\n  ]\n}\n", core[2, "both_idle_ns"] - core[1, "both_idle_ns"], core[2, "unknown_ns"] - core[1, "unknown_ns"]
    }' "$1" "$2"
}

# lab_json_field FILE KEY: the first number after "KEY": in FILE.
lab_json_field() {
  awk -v k="\"$2\":" '{ for (i = 1; i <= NF; i++) if ($i == k) { v = $(i + 1); sub(/,$/, "", v); print v; exit } }' "$1"
}

# lab_vm_figure FILE VM KEY: a figure of VM in a JSON list of objects with a
# "vm" key (csctl analyze's list, or the vms of csctl stats), keys in any
# order, one per line.
lab_vm_figure() {
  awk -v vm="$2" -v k="\"$3\":" '
    { for (i = 1; i <= NF; i++) {
        if ($i == k) { v = $(i + 1); sub(/,$/, "", v); val = v }
        if ($i == "\"vm\":") { n = $(i + 1); gsub(/[",]/, "", n); name = n } } }
    /}/ { if (name == vm && val != "") { print val; exit } name = ""; val = "" }' "$1"
}

# lab_crosscheck_end [--busy-only] VM=[vcpus:]PID[,PID...]...: stops the lab's trace
# and checks, for each VM, that the live shares csd summed over all windows
# agree within 1 percentage point with `csctl analyze` over exactly the
# windows' span (those after lab_crosscheck_mark, when it was called):
# same, idle, foreign and unknown; with --busy-only idle,
# unknown and same + foreign (for runs in which a VM's trust group changed:
# live "same" follows the group of the moment, the offline map is fixed).
# A VM's threads are every thread the trace saw in its processes, or, with
# `vcpus:` (thread scope vcpus), their vCPU threads.
lab_crosscheck_end() {
  local busy_only=0 spec vm pid tid start_ns end_ns from to first written line key live off keys live_file mark_end
  [ "$1" = --busy-only ] && { busy_only=1; shift; }
  # A window closes every second; the Report carrying it follows.
  sleep 2.5
  csctl stats --host lab --window 1h -o json >/tmp/live.json || lab_fail "csctl stats --host lab"
  live_file=/tmp/live.json
  if [ -f /tmp/live-mark.json ]; then
    # At least 3 s of windows after the mark.
    mark_end=$(lab_json_field /tmp/live-mark.json end_unix_ns)
    lab_wait_for 30 lab_stats_end_after $((${mark_end%?????????} + 3)) /tmp/live.json ||
      lab_fail "csd has no stats window 3 s after the crosscheck mark"
    lab_stats_delta /tmp/live-mark.json /tmp/live.json >/tmp/live-span.json
    cp /tmp/live-mark.json /tmp/live-span.json "$LAB_OUT/"
    live_file=/tmp/live-span.json
  fi
  echo 0 >"$LAB_CHECK/tracing_on"
  cat "$LAB_CHECK/trace" >/tmp/check-trace.txt
  cp /tmp/live.json "$LAB_OUT/"
  written=$(awk '/entries-in-buffer\/entries-written/ {print $3}' /tmp/check-trace.txt)
  [ -n "$written" ] && [ "${written%/*}" = "${written#*/}" ] ||
    lab_fail "the lab's crosscheck trace lost events ($written)"
  start_ns=$(lab_json_field "$live_file" start_unix_ns)
  end_ns=$(lab_json_field "$live_file" end_unix_ns)
  [ -n "$start_ns" ] && [ -n "$end_ns" ] || { cat "$live_file"; lab_fail "csd has no stats windows for host lab"; }
  from=$(awk -v n="$start_ns" 'BEGIN { printf "%s.%s", substr(n, 1, length(n) - 9), substr(n, length(n) - 8) }')
  to=$(awk -v n="$end_ns" 'BEGIN { printf "%s.%s", substr(n, 1, length(n) - 9), substr(n, length(n) - 8) }')
  first=$(awk '$1 !~ /^#/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) { print substr($i, 1, length($i) - 1); exit } }' /tmp/check-trace.txt)
  lab_result "crosscheck span" "live windows $from - $to ($(lab_json_field "$live_file" windows) windows), trace of $(wc -l </tmp/check-trace.txt) lines from $first"
  lab_float_cmp "$first" "<" "$from" || lab_fail "the lab's trace starts after the first window"

  printf '0-1\n0-1\n2-3\n2-3\n' >/tmp/check-topology
  # The thread map, without reading the trace here: an awk over its 10^5
  # lines took 20 s of the emulated guest, where csctl analyze reads it in
  # one. At scope emulator every thread of the VM's process, by the
  # trace's record-tgid column (threads that exited included); at scope
  # vcpus only its "CPU <n>/KVM" threads, which live as long as the VM.
  : >/tmp/check-threads
  for spec in "$@"; do
    vm=${spec%%=*} pids=${spec#*=} scope=emulator
    case "$pids" in vcpus:*) scope=vcpus pids=${pids#vcpus:} ;; esac
    for pid in $(echo "$pids" | tr ',' ' '); do
      if [ $scope = emulator ]; then
        echo "tgid:$pid $vm" >>/tmp/check-threads
        continue
      fi
      for tid in $(ls "/proc/$pid/task" 2>/dev/null); do
        comm=
        read -r comm <"/proc/$pid/task/$tid/comm" 2>/dev/null || continue
        case "$comm" in "CPU "[0-9]*/KVM | "CPU "[0-9]*/TCG) echo "$tid $vm" >>/tmp/check-threads ;; esac
      done
    done
  done
  sort -u /tmp/check-threads -o /tmp/check-threads
  csctl analyze /tmp/check-trace.txt --topology /tmp/check-topology --threads /tmp/check-threads \
    --from "$from" --to "$to" -o json >/tmp/offline.json || lab_fail "csctl analyze"
  cp /tmp/offline.json /tmp/check-threads /tmp/check-topology "$LAB_OUT/"
  # On a failure the trace goes back to the host too, to be looked into.
  trap 'cp /tmp/check-trace.txt "$LAB_OUT/"; lab_keep_logs' EXIT
  # Per core (whether each sibling ran anything): the same events give the
  # same split, whatever the thread map.
  live=$(awk '/"both_busy_ns"/ {b += $2} /"one_idle_ns"/ {o += $2} /"both_idle_ns"/ {i += $2}
      /"unknown_ns"/ {u += $2}
      END { t = b + o + i + u; if (t > 0) printf "%.1f %.1f %.1f", 100 * b / t, 100 * o / t, 100 * i / t }' "$live_file")
  off=$(csctl analyze /tmp/check-trace.txt --topology /tmp/check-topology --threads /tmp/check-threads \
      --from "$from" --to "$to" -o table | sed -n 's/.*cores: both busy \([0-9.]*\)%, one idle \([0-9.]*\)%, both idle \([0-9.]*\)%.*/\1 \2 \3/p')
  lab_result "crosscheck cores" "both busy / one idle / both idle %: live $live, offline $off"
  [ -n "$live" ] && [ -n "$off" ] || lab_fail "no per-core figures (live '$live', offline '$off')"
  awk -v a="$live" -v b="$off" 'BEGIN { split(a, x, " "); split(b, y, " ");
      for (k = 1; k <= 3; k++) { d = x[k] - y[k]; if (d < 0) d = -d; if (d > 1) exit 1 } }' ||
    lab_fail "per-core split: live $live% and offline $off% differ by more than 1 point"
  keys="same_pct idle_pct foreign_pct unknown_pct"
  [ $busy_only = 1 ] && keys="busy_pct idle_pct unknown_pct"
  for spec in "$@"; do
    vm=${spec%%=*}
    line="$vm"
    for key in same_pct idle_pct foreign_pct unknown_pct; do
      live=$(lab_vm_figure "$live_file" "$vm" $key)
      off=$(lab_vm_figure /tmp/offline.json "$vm" $key)
      [ -n "$live" ] && [ -n "$off" ] || lab_fail "$vm: no $key (live '$live', offline '$off')"
      eval "live_$key=$live off_$key=$off"
      line="$line $key live $live offline $off;"
    done
    live_busy_pct=$(awk -v a="$live_same_pct" -v b="$live_foreign_pct" 'BEGIN { print a + b }')
    off_busy_pct=$(awk -v a="$off_same_pct" -v b="$off_foreign_pct" 'BEGIN { print a + b }')
    lab_result "$vm live vs offline" "$line runtime live $(lab_vm_figure "$live_file" "$vm" runtime_ns) ns, offline $(lab_vm_figure /tmp/offline.json "$vm" runtime_ns) ns"
    for key in $keys; do
      eval "live=\$live_$key off=\$off_$key"
      awk -v a="$live" -v b="$off" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1) }' ||
        lab_fail "$vm $key: live $live% and offline $off% differ by more than 1 point"
    done
  done
  trap lab_keep_logs EXIT
}
