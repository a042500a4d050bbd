# Issue #33 item 1: an upgrade under real systemd and real dpkg keeps
# enforcing (run_lab.sh --systemd systemd_upgrade --debs OLD --upgrade-debs
# NEW: the 9p root booted with systemd as PID 1, the build machine's dpkg
# database on tmpfs, nothing installed at boot; guest/init_systemd.sh).
# Shows:
#  - `dpkg -i` of the old cosched-server and cosched-agent enables both
#    units and starts neither; configured as an operator would
#    (guest/systemd_site.sh), `systemctl start` runs them, and cs-agent tags
#    a fake QEMU of uid 107;
#  - `dpkg -i` of the new ones (a rebuild of the same tree with a higher
#    version, COSCHED_VERSION_SUFFIX): their maintainer scripts restart both
#    units while dpkg runs, so that when dpkg returns each unit's main
#    process is a new one running the new binary (/proc/PID/exe --version),
#    its metrics say the new version, cs-agent has made its first pass
#    within a stated time, without a prctl write, and csd serves again with
#    the host registered under the new agent version;
#  - every VM thread's cookie, read every 100 ms from before the upgrade to
#    after the host is back, never differs from its cookie before it.
# That an upgrade leaves a daemon the operator stopped stopped is
# tests/packaging/maintscripts_test.sh's (a third dpkg run here would add a
# minute of emulated guest).
. "$LAB_GUEST/lib.sh"
. "$LAB_GUEST/systemd_site.sh"
set -u
# csctl as root goes through csd's Unix socket (admin), as an operator's
# would; loopback TCP is viewer only.
unset CSCTL_SERVER

QEMU_UID=107
SETPRIV=/usr/bin/setpriv
# How long after `dpkg -i` returns the new cs-agent may take to make its
# first reconcile pass, in this emulated guest (measured: see docs/lab.md).
FIRST_PASS_BOUND_S=30

main_pid() { systemctl show -p MainPID --value "$1"; }
# unit_us UNIT PROPERTY: a monotonic timestamp of systemd's, in us.
unit_us() { systemctl show -p "$2" --value "$1"; }
uptime_us() { awk '{ printf "%.0f\n", $1 * 1000000 }' /proc/uptime; }
# seconds FROM_US TO_US: the span in seconds, 2 decimals (negative: before).
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b - a) / 1000000 }'; }
installed() { dpkg-query -W -f '${db:Status-Status} ${Version}' "$1" 2>/dev/null; }
# agent_version_at_csd: the agent version csd holds for host lab.
agent_version_at_csd() {
  csctl hosts get lab -o json 2>/dev/null | sed -n 's/.*"agent_version": "\([^"]*\)".*/\1/p'
}
# build_info PORT: the version label of cosched_build_info at 127.0.0.1:PORT.
build_info() {
  curl -sf "http://127.0.0.1:$1/metrics" | sed -n 's/^cosched_build_info{.*version="\([^"]*\)".*/\1/p'
}
# Functions, so that lab_wait_for can poll them.
says_version() { [ "$(build_info "$1")" = "$2" ]; }
host_back() {
  csctl hosts get lab -o json >/tmp/host.json 2>&1 &&
    grep -q '"connected": true' /tmp/host.json && [ "$(agent_version_at_csd)" = "$1" ]
}
logged_pass() { journalctl -u cs-agent.service _PID="$1" --no-pager | grep -q 'reconcile pass:'; }
# journal_us PID PATTERN: when cs-agent PID first logged PATTERN, by the
# journal's monotonic clock, in us.
journal_us() {
  journalctl -u cs-agent.service _PID="$1" --no-pager -o short-monotonic | grep "$2" | head -1 |
    sed -n 's/^\[ *\([0-9]*\)\.\([0-9]*\)\].*/\1\2/p'
}

[ "${LAB_DPKG:-0}" = 1 ] || lab_fail "run with run_lab.sh --systemd systemd_upgrade --upgrade-debs DIR"
old_debs="$LAB_DEBS_INSTALL/cosched-server_*.deb $LAB_DEBS_INSTALL/cosched-agent_*.deb"
new_debs="$LAB_DEBS_UPGRADE/cosched-server_*.deb $LAB_DEBS_UPGRADE/cosched-agent_*.deb"
old=$(dpkg-deb -f "$LAB_DEBS_INSTALL"/cosched-agent_*.deb Version)
new=$(dpkg-deb -f "$LAB_DEBS_UPGRADE"/cosched-agent_*.deb Version)
dpkg --compare-versions "$new" gt "$old" || lab_fail "$new is no upgrade of $old"
lab_result "versions" "install $old, upgrade to $new"

# --- the first installation: dpkg -i, under systemd -----------------------
for pkg in cosched-server cosched-agent; do
  case $(installed $pkg) in
    installed*) lab_fail "$pkg is installed already (the build machine's dpkg database)" ;;
  esac
done
# shellcheck disable=SC2086 # the globs name one .deb each
dpkg -i $old_debs >"$LAB_OUT/dpkg-install.log" 2>&1 ||
  { tail -20 "$LAB_OUT/dpkg-install.log"; lab_fail "dpkg -i of $old failed (dpkg-install.log)"; }
for pkg in cosched-server cosched-agent; do
  [ "$(installed $pkg)" = "installed $old" ] || lab_fail "$pkg after dpkg -i: $(installed $pkg)"
done
for unit in csd.service cs-agent.service; do
  [ "$(systemctl is-enabled $unit)" = enabled ] || lab_fail "$unit is not enabled after the first install"
  ! systemctl is-active -q $unit || lab_fail "the first install started $unit"
done
getent passwd cosched >/dev/null || lab_fail "the first install made no system user cosched"
lab_result "dpkg -i (first install)" "cosched-server and cosched-agent $old installed; both units enabled, neither started"

# The operator's first steps (docs/operating.md, "First deployment").
lab_configure_site "$LAB_BUILD"
# csd first, serving before the agent starts (else the agent's first
# Register fails and waits out its backoff).
systemctl start csd.service || lab_fail "systemctl start csd.service: $(systemctl status csd.service --no-pager 2>&1 | tail -5)"
lab_wait_for 60 csctl hosts ls >/dev/null || lab_fail "csd.service does not serve: $(systemctl status csd.service --no-pager 2>&1 | tail -5)"
systemctl start cs-agent.service || lab_fail "systemctl start cs-agent.service: $(systemctl status cs-agent.service --no-pager 2>&1 | tail -5)"
lab_wait_for 60 systemctl is-active -q cs-agent.service || lab_fail "cs-agent.service is not active"
csd=$(main_pid csd.service)
agent=$(main_pid cs-agent.service)
case $("/proc/$agent/exe" --version) in
  "cs-agent $old "*) ;;
  *) lab_fail "the running cs-agent is not $old: $("/proc/$agent/exe" --version)" ;;
esac
lab_wait_host
[ "$(agent_version_at_csd)" = "$old" ] || lab_fail "csd holds agent version '$(agent_version_at_csd)', not $old"

chmod 1777 /tmp
rm -f /tmp/vm-up.pid
$SETPRIV --reuid=$QEMU_UID --regid=$QEMU_UID --clear-groups \
  qemu-system-x86_64 -name guest=vm-up,debug-threads=on -pidfile /tmp/vm-up.pid -smp 2 --duty 30 \
  2>/tmp/vm-up.err &
vm=$!
lab_wait_for 10 test -s /tmp/vm-up.pid || lab_fail "the fake QEMU did not start as uid $QEMU_UID: $(cat /tmp/vm-up.err)"
csctl tag vm-up --tenant acme || lab_fail "csctl tag vm-up"
lab_wait_enforced vm-up 60
cookie=$(lab_one_cookie "$vm")
lab_cookies "$vm" | sort >/tmp/before.txt
threads=$(wc -l </tmp/before.txt)
lab_result "before the upgrade" "csd pid $csd, cs-agent pid $agent ($old); vm-up (uid $QEMU_UID): $threads threads on cookie $cookie"

# --- the upgrade: dpkg -i of the new packages ------------------------------
# The sampler reads every thread's cookie every 100 ms from here until the
# host is back at csd under the new agent.
lab_cookies --watch 100 600 "$vm" >/tmp/watch.txt 2>&1 &
watch=$!
sleep 1
dpkg_start=$(uptime_us)
# shellcheck disable=SC2086
dpkg -i $new_debs >"$LAB_OUT/dpkg-upgrade.log" 2>&1 ||
  { tail -20 "$LAB_OUT/dpkg-upgrade.log"; lab_fail "dpkg -i of $new failed (dpkg-upgrade.log)"; }
dpkg_end=$(uptime_us)
# What runs the moment dpkg returns: both units' main processes are new
# ones (the postinsts' try-restart), started while dpkg ran.
csd_new=$(main_pid csd.service)
agent_new=$(main_pid cs-agent.service)
csd_started=$(unit_us csd.service ExecMainStartTimestampMonotonic)
agent_started=$(unit_us cs-agent.service ExecMainStartTimestampMonotonic)
# try-restart: the old agent is told to stop (ActiveExit), is gone
# (InactiveEnter), and the new one starts.
agent_stopping=$(unit_us cs-agent.service ActiveExitTimestampMonotonic)
agent_gone=$(unit_us cs-agent.service InactiveEnterTimestampMonotonic)
agent_exe=$(readlink "/proc/$agent_new/exe")
agent_exe_version=$("/proc/$agent_new/exe" --version 2>&1)
csd_exe_version=$("/proc/$csd_new/exe" --version 2>&1)
for pkg in cosched-server cosched-agent; do
  [ "$(installed $pkg)" = "installed $new" ] || lab_fail "$pkg after the upgrade: $(installed $pkg)"
done
systemctl is-active -q cs-agent.service || lab_fail "cs-agent.service is not active after the upgrade"
systemctl is-active -q csd.service || lab_fail "csd.service is not active after the upgrade"
[ "$agent_new" != 0 ] && [ "$agent_new" != "$agent" ] ||
  lab_fail "the upgrade did not restart cs-agent (main pid $agent_new, was $agent)"
[ "$csd_new" != 0 ] && [ "$csd_new" != "$csd" ] ||
  lab_fail "the upgrade did not restart csd (main pid $csd_new, was $csd)"
for started in "cs-agent $agent_started" "csd $csd_started"; do
  at=${started#* }
  [ "$at" -ge "$dpkg_start" ] && [ "$at" -le "$dpkg_end" ] ||
    lab_fail "${started%% *} started at $(seconds 0 "$at") s, not while dpkg -i ran ($(seconds 0 "$dpkg_start")-$(seconds 0 "$dpkg_end") s)"
done
# The process runs the file dpkg put there (an old one runs a deleted file)
# and that file is the new build.
[ "$agent_exe" = /usr/sbin/cs-agent ] || lab_fail "cs-agent's main process runs '$agent_exe', not /usr/sbin/cs-agent"
case $agent_exe_version in "cs-agent $new "*) ;; *) lab_fail "the new cs-agent says '$agent_exe_version', not $new" ;; esac
case $csd_exe_version in "csd $new "*) ;; *) lab_fail "the new csd says '$csd_exe_version', not $new" ;; esac
case $(cs-agent --version) in "cs-agent $new "*) ;; *) lab_fail "cs-agent --version: $(cs-agent --version)" ;; esac
case $(csd --version) in "csd $new "*) ;; *) lab_fail "csd --version: $(csd --version)" ;; esac
lab_result "dpkg -i (upgrade)" "$(seconds "$dpkg_start" "$dpkg_end") s; csd restarted at +$(seconds "$dpkg_start" "$csd_started") s (pid $csd -> $csd_new), cs-agent at +$(seconds "$dpkg_start" "$agent_started") s (pid $agent -> $agent_new): both run $new when dpkg returns"
lab_result "cs-agent's restart" "told to stop at +$(seconds "$dpkg_start" "$agent_stopping") s, gone $(seconds "$agent_stopping" "$agent_gone") s later, the new one started $(seconds "$agent_gone" "$agent_started") s after that: no agent for $(seconds "$agent_gone" "$agent_started") s, new binary running $(seconds "$agent_started" "$dpkg_end") s before dpkg returned"

# cs-agent's first reconcile pass (logged always), by the journal's clock.
lab_wait_for $FIRST_PASS_BOUND_S logged_pass "$agent_new" ||
  lab_fail "the new cs-agent made no reconcile pass within ${FIRST_PASS_BOUND_S} s after dpkg returned"
first_us=$(journal_us "$agent_new" 'reconcile pass:')
[ -n "$first_us" ] || lab_fail "no time for the new cs-agent's first pass in the journal"
[ "$first_us" -le $((dpkg_end + FIRST_PASS_BOUND_S * 1000000)) ] ||
  lab_fail "the new cs-agent's first pass came $(seconds "$dpkg_end" "$first_us") s after dpkg returned (bound ${FIRST_PASS_BOUND_S} s)"
pass=$(journalctl -u cs-agent.service _PID="$agent_new" --no-pager | grep 'reconcile pass:' | head -1)
pass=${pass#*reconcile pass: }
echo "$pass" | grep -q ' 0 prctl writes' || lab_fail "the new cs-agent rewrote cookies: $pass"
lab_result "new cs-agent running" "its first pass $(seconds "$dpkg_end" "$first_us") s after dpkg returned (bound ${FIRST_PASS_BOUND_S} s): $pass"

# Both daemons say the new version in their metrics; csd serves again and
# holds the host under the new agent.
# The packaged configs: csd's metrics on 127.0.0.1:9465, cs-agent's on 9464.
lab_wait_for 30 says_version 9465 "$new" || lab_fail "csd's cosched_build_info says '$(build_info 9465)', not $new"
lab_wait_for 30 says_version 9464 "$new" || lab_fail "cs-agent's cosched_build_info says '$(build_info 9464)', not $new"
lab_wait_for 60 host_back "$new" ||
  { cat /tmp/host.json; lab_fail "csd does not hold host lab connected with agent $new"; }
registered_us=$(journal_us "$agent_new" 'registered host lab with csd')
[ -n "$registered_us" ] || lab_fail "the new cs-agent logged no registration with csd"
listed=$(csctl hosts ls | awk '$1 == "lab" { print $NF }')
[ "$listed" = "$new" ] || lab_fail "csctl hosts ls shows agent '$listed' for lab, not $new"
lab_wait_enforced vm-up 30
lab_result "csd serves again" "the new cs-agent registered $(seconds "$dpkg_end" "$registered_us") s after dpkg returned; csctl hosts ls: lab connected, AGENT $listed; vm-up enforced; cosched_build_info of both: $new"

kill -TERM $watch
wait $watch
cp /tmp/watch.txt "$LAB_OUT/"
summary=$(tail -1 /tmp/watch.txt)
case "$summary" in samples*) ;; *) lab_fail "the cookie sampler: $(cat /tmp/watch.txt)" ;; esac
grep -q '^change' /tmp/watch.txt && lab_fail "a cookie changed across the upgrade: $(grep '^change' /tmp/watch.txt | head -3 | tr '\n' ';')"
echo "$summary" | grep -q ' threads_appeared 0 threads_gone 0$' || lab_fail "vm-up's threads changed under the sampler: $summary"
lab_cookies "$vm" | sort >/tmp/after.txt
cmp -s /tmp/before.txt /tmp/after.txt || { diff /tmp/before.txt /tmp/after.txt; lab_fail "cookies changed across the upgrade"; }
samples=$(echo "$summary" | awk '{ print $2 }')
lab_result "cookies read every 100 ms" "$samples samples of $threads threads from 1 s before dpkg -i until the host was back: every one $cookie, as before"

lab_stop_vm "$vm"
