# Helpers for lab scenarios with real libvirt and real QEMU (the --root9p
# mode of run_lab.sh; sh/dash). A scenario starts with
#   . "$LAB_GUEST/lib.sh"; . "$LAB_GUEST/libvirt.sh"
# init_root9p.sh has already started libvirtd with sched_core = "none".
#
# libvirtd runs with the settings of ARCHITECTURE.md ("Real libvirt and real
# QEMU inside the lab"): QEMU as root, no security driver, no namespaces, no
# ownership changes, QEMU writes its own log (no virtlogd). Domains are
# `<domain type='qemu'>` (TCG inside the TCG guest: very slow, so they stay
# paused unless running is needed), no disk, no network.

export LIBVIRT_DEFAULT_URI=qemu:///system
LAB_LIBVIRTD_PIDFILE=/run/lab-libvirtd.pid
LAB_LIBVIRTD_LOG=/var/log/libvirt/libvirtd.log

# lab_wait_secs SECONDS COMMAND...: lab_wait_for (lib.sh), which is bounded
# by elapsed time too; the older name the libvirt scenarios use.
lab_wait_secs() { lab_wait_for "$@"; }

# lab_wait_host_secs / lab_wait_enforced_secs VM SECONDS: lib.sh's checks,
# bounded in real time.
lab_host_connected() { csctl hosts get lab -o json | grep -q '"connected": true'; }
lab_wait_host_secs() {
  lab_wait_secs "${1:-60}" lab_host_connected ||
    { tail -20 /tmp/agent.log; lab_fail "the agent did not connect to csd"; }
}
lab_vm_enforced() { csctl get "$1" -o json | grep -q '"state": "enforced"'; }
lab_wait_enforced_secs() {
  lab_wait_secs "${2:-60}" lab_vm_enforced "$1" ||
    { csctl get "$1"; tail -20 /tmp/agent.log; lab_fail "$1 is not enforced after ${2:-60} s"; }
}

# lab_libvirtd_conf SCHED_CORE: qemu.conf (and libvirtd.conf) for the next
# libvirtd start. SCHED_CORE: none, vcpus, emulator or full.
lab_libvirtd_conf() {
  cat >/etc/libvirt/qemu.conf <<EOF
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
namespaces = [ ]
security_driver = "none"
stdio_handler = "file"
sched_core = "$1"
EOF
  cat >/etc/libvirt/libvirtd.conf <<EOF
log_filters = "3:*"
log_outputs = "3:file:$LAB_LIBVIRTD_LOG"
EOF
}

# lab_libvirtd_failed REASON: the marker the harness looks for (it retries
# the boot once), plus the reason as the scenario's failure.
lab_libvirtd_failed() {
  echo "LIBVIRTD-FAILED: $*" >"$LAB_OUT/libvirtd-failed"
  echo "$*" >>"$LAB_FAILURES"
  echo "[lab] LIBVIRTD-FAILED: $*"
  tail -n 30 "$LAB_LIBVIRTD_LOG" 2>/dev/null | sed 's/^/  libvirtd.log | /'
}

# lab_libvirtd_start [SCHED_CORE]: starts libvirtd and waits (up to 180 s:
# its first start probes QEMU's capabilities, under nested emulation) until
# it answers. Returns 1 after lab_libvirtd_failed when it does not.
lab_libvirtd_start() {
  local sched_core=${1:-none} t0 i
  lab_libvirtd_conf "$sched_core"
  rm -f "$LAB_LIBVIRTD_PIDFILE"
  t0=$(cut -d' ' -f1 /proc/uptime)
  if ! libvirtd -d -p "$LAB_LIBVIRTD_PIDFILE"; then
    lab_libvirtd_failed "libvirtd -d exited with status $? (sched_core=$sched_core)"
    return 1
  fi
  i=0
  while ! virsh -q version >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -gt 900 ]; then
      lab_libvirtd_failed "libvirtd did not answer within 180 s (sched_core=$sched_core)"
      return 1
    fi
    if [ $i -gt 25 ] && ! kill -0 "$(cat "$LAB_LIBVIRTD_PIDFILE" 2>/dev/null)" 2>/dev/null; then
      lab_libvirtd_failed "libvirtd exited while starting (sched_core=$sched_core)"
      return 1
    fi
    sleep 0.2
  done
  lab_log "libvirtd $(cat "$LAB_LIBVIRTD_PIDFILE") answers (sched_core=$sched_core) after $(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN{printf "%.1f", b-a}') s"
}

# lab_libvirtd_stop: SIGTERM, and waits until it is gone (domains keep
# running; they are destroyed first where that matters).
lab_libvirtd_stop() {
  local pid i=0
  pid=$(cat "$LAB_LIBVIRTD_PIDFILE" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null; do
    i=$((i + 1))
    [ $i -gt 300 ] && { kill -KILL "$pid"; sleep 0.5; break; }
    sleep 0.1
  done
  rm -f "$LAB_LIBVIRTD_PIDFILE"
}

# lab_libvirtd_restart SCHED_CORE: a libvirtd with another qemu.conf; ends
# the scenario (with the retry marker) when it does not start.
lab_libvirtd_restart() {
  lab_libvirtd_stop
  lab_libvirtd_start "$1" || exit 1
}

# lab_libvirtd_keep_logs: libvirtd's and the domains' logs to the results.
lab_libvirtd_keep_logs() {
  mkdir -p "$LAB_OUT/libvirt"
  cp "$LAB_LIBVIRTD_LOG" "$LAB_OUT/libvirt/" 2>/dev/null
  cp /var/log/libvirt/qemu/*.log "$LAB_OUT/libvirt/" 2>/dev/null
  cp /run/libvirt/qemu/*.xml "$LAB_OUT/libvirt/" 2>/dev/null
  return 0
}

# lab_domain_define NAME UUID MAX_VCPUS [CURRENT_VCPUS [MEMORY_MIB]]: a
# persistent TCG domain without disk, network, USB or balloon.
# $LAB_DOMAIN_METADATA, when set, is the domain's <metadata> element.
lab_domain_define() {
  local name=$1 uuid=$2 max=$3 cur=${4:-$3} mem=${5:-48}
  cat >"/tmp/$name.xml" <<EOF
<domain type='qemu'>
  <name>$name</name>
  <uuid>$uuid</uuid>
  <memory unit='MiB'>$mem</memory>
  <vcpu placement='static' current='$cur'>$max</vcpu>
  ${LAB_DOMAIN_METADATA:-}
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <features><acpi/><tcg><tb-cache unit='MiB'>16</tb-cache></tcg></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <controller type='usb' model='none'/>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
  virsh -q define "/tmp/$name.xml" >/dev/null || lab_fail "virsh define $name failed"
}

# lab_domain_start NAME [VIRSH_START_ARGS...]: virsh start (e.g. --paused).
lab_domain_start() {
  local name=$1 err; shift
  if ! err=$(virsh -q start "$name" "$@" 2>&1); then
    tail -n 20 "/var/log/libvirt/qemu/$name.log" 2>/dev/null | sed 's/^/  qemu log | /'
    lab_fail "virsh start $name $*: $err"
  fi
}

# lab_domain_destroy NAME: virsh destroy; no error when it is not running.
lab_domain_destroy() { virsh -q destroy "$1" >/dev/null 2>&1 || true; }

# lab_domain_pid NAME: the QEMU pid from libvirt's status XML.
lab_domain_pid() {
  sed -n "s/^<domstatus .* pid='\([0-9]*\)'.*/\1/p" "/run/libvirt/qemu/$1.xml" 2>/dev/null | head -1
}

# lab_domain_vcpu_tids NAME: "VCPU_ID TID" lines from libvirt's status XML.
lab_domain_vcpu_tids() {
  sed -n "s/.*<vcpu id='\([0-9]*\)' pid='\([0-9]*\)'.*/\1 \2/p" "/run/libvirt/qemu/$1.xml" 2>/dev/null
}

# lab_domain_uuid NAME: virsh domuuid.
lab_domain_uuid() { virsh -q domuuid "$1" | tr -d ' \n'; }

# lab_domain_cookies NAME: lab_cookies of its QEMU process ("pid tid cookie comm").
lab_domain_cookies() {
  local pid
  pid=$(lab_domain_pid "$1")
  [ -n "$pid" ] || return 1
  lab_cookies "$pid"
}

# lab_domain_one_cookie NAME: the one cookie every thread of NAME's QEMU
# process holds (0 when none holds one); fails when they differ.
lab_domain_one_cookie() {
  local cookies
  cookies=$(lab_domain_cookies "$1" | awk '{print $3}' | sort -u)
  [ -n "$cookies" ] && [ "$(echo "$cookies" | wc -l)" = 1 ] && [ "${cookies#error}" = "$cookies" ] ||
    lab_fail "threads of domain $1 do not share one cookie: $(lab_domain_cookies "$1" | tr '\n' ';')"
  echo "$cookies"
}

# lab_domain_cookie_set NAME: NAME's distinct cookies, comma-separated (one
# value when all threads agree). Never fails the scenario: for polling.
lab_domain_cookie_set() {
  lab_domain_cookies "$1" 2>/dev/null | awk '{print $3}' | sort -u | paste -sd, -
}

# lab_domain_all_tagged NAME: every thread of NAME holds one non-zero cookie.
lab_domain_all_tagged() {
  local cookies
  cookies=$(lab_domain_cookies "$1" | awk '{print $3}' | sort -u) || return 1
  [ -n "$cookies" ] && [ "$(echo "$cookies" | wc -l)" = 1 ] && [ "$cookies" != 0 ] &&
    [ "${cookies#error}" = "$cookies" ]
}

# lab_domain_thread_summary NAME: "comm=cookie" per thread, one line.
lab_domain_thread_summary() {
  lab_domain_cookies "$1" | awk '{c=$3; $1=$2=$3=""; sub(/^ +/, ""); printf "%s%s=%s", sep, $0, c; sep=", "}'
}

# lab_start_agent_libvirt [ARGS...]: cs-agent for host "lab" finding VMs
# through libvirt (qemu:///system), state in /tmp/agent.
lab_start_agent_libvirt() {
  cs-agent --server "$CSCTL_SERVER" --host-id lab --state-dir /tmp/agent \
    --discovery libvirt "$@" >>/tmp/agent.log 2>&1 &
  AGENT_PID=$!
}

# lab_stop_agent: SIGTERM to the agent started above.
lab_stop_agent() {
  [ -n "${AGENT_PID:-}" ] || return 0
  kill -TERM "$AGENT_PID" 2>/dev/null
  wait "$AGENT_PID" 2>/dev/null
  AGENT_PID=""
}

# lab_ms_now: milliseconds of the wall clock.
lab_ms_now() { date +%s%3N; }
