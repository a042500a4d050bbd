#!/usr/bin/env bash
# The packages' maintainer scripts, as built into the .debs, keep a running
# daemon running across an upgrade, never start one the operator stopped,
# and start nothing at a first installation (issue #33). Each script runs as
# dpkg runs it, in a mount namespace whose /run says systemd runs, with
# systemctl, deb-systemd-invoke and deb-systemd-helper replaced by fakes
# that keep each unit's state and log every call. Needs root (unshare -m);
# scripts/package.sh runs it on the packages it built.
#
#   tests/packaging/maintscripts_test.sh DEBDIR
set -euo pipefail
debs=${1:?usage: maintscripts_test.sh DEBDIR}
[ "$(id -u)" = 0 ] || { echo "maintscripts_test.sh: needs root (unshare -m)"; exit 1; }
if [ "${MAINTSCRIPTS_TEST_INNER:-}" != 1 ]; then
  exec unshare -m env MAINTSCRIPTS_TEST_INNER=1 "$0" "$@"
fi
mount -t tmpfs maintscripts-test /run
mkdir -p /run/systemd/system
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The fakes: a unit is active while $work/state/UNIT exists.
mkdir -p "$work/bin" "$work/state"
cat >"$work/bin/systemctl" <<'FAKE'
#!/bin/sh
echo "systemctl $*" >>"$FAKE_LOG"
while [ "${1#-}" != "$1" ]; do shift; done
case $1 in
  is-active) [ -e "$FAKE_STATE/$2" ] ;;
  try-restart) if [ -e "$FAKE_STATE/$2" ]; then echo "restarted $2" >>"$FAKE_LOG"; fi ;;
  start|restart) touch "$FAKE_STATE/$2"; echo "started $2" >>"$FAKE_LOG" ;;
  stop) rm -f "$FAKE_STATE/$2"; echo "stopped $2" >>"$FAKE_LOG" ;;
  *) exit 0 ;;
esac
FAKE
cat >"$work/bin/deb-systemd-invoke" <<'FAKE'
#!/bin/sh
echo "deb-systemd-invoke $*" >>"$FAKE_LOG"
exec systemctl "$@"
FAKE
cat >"$work/bin/deb-systemd-helper" <<'FAKE'
#!/bin/sh
echo "deb-systemd-helper $*" >>"$FAKE_LOG"
exit 0
FAKE
cat >"$work/bin/systemd-sysusers" <<'FAKE'
#!/bin/sh
echo "systemd-sysusers $*" >>"$FAKE_LOG"
FAKE
chmod +x "$work/bin"/*
export PATH="$work/bin:$PATH" FAKE_LOG="$work/log" FAKE_STATE="$work/state"

failures=0
fail() { echo "FAIL: $*"; sed 's/^/    /' "$FAKE_LOG"; failures=$((failures + 1)); }
# run SCRIPT ARGS...: a maintainer script of the package under test, if it has one.
run() { [ ! -e "$ctl/$1" ] || sh "$ctl/$@" >/dev/null; }

for pair in cosched-agent:cs-agent.service cosched-server:csd.service; do
  pkg=${pair%%:*} unit=${pair#*:}
  deb=$(ls "$debs/${pkg}_"*.deb | head -1)
  version=$(dpkg-deb -f "$deb" Version)
  ctl="$work/$pkg"
  before=$failures
  mkdir -p "$ctl"
  dpkg-deb -e "$deb" "$ctl"

  # A first installation enables the unit and starts nothing.
  : >"$FAKE_LOG"; rm -f "$FAKE_STATE/$unit"
  run preinst install
  run postinst configure ""
  grep -q "deb-systemd-helper enable $unit\|deb-systemd-helper enable '$unit'" "$FAKE_LOG" ||
    fail "$pkg: a first installation does not enable $unit"
  ! grep -q "started\|restarted" "$FAKE_LOG" || fail "$pkg: a first installation starts $unit"

  # An upgrade of a running daemon: never stopped before the new files are
  # in place, restarted after (dpkg's order: old prerm, new preinst, unpack,
  # old postrm, new postinst).
  : >"$FAKE_LOG"; touch "$FAKE_STATE/$unit"
  run prerm upgrade "$version"
  run preinst upgrade 0.1.0
  grep -q "stopped" "$FAKE_LOG" && fail "$pkg: the upgrade stops $unit before the new files are in place"
  run postrm upgrade "$version"
  run postinst configure 0.1.0
  grep -q "restarted $unit" "$FAKE_LOG" || fail "$pkg: the upgrade does not restart the running $unit"
  [ -e "$FAKE_STATE/$unit" ] || fail "$pkg: $unit is not running after the upgrade"

  # An upgrade while the operator has the daemon stopped: it stays stopped.
  : >"$FAKE_LOG"; rm -f "$FAKE_STATE/$unit"
  run prerm upgrade "$version"
  run preinst upgrade 0.1.0
  run postrm upgrade "$version"
  run postinst configure 0.1.0
  [ ! -e "$FAKE_STATE/$unit" ] || fail "$pkg: the upgrade started $unit, which the operator had stopped"
  [ "$failures" != "$before" ] ||
    echo "maintscripts_test: $pkg $version: install starts nothing, upgrade restarts a running $unit and leaves a stopped one"
done
[ "$failures" = 0 ] || { echo "maintscripts_test: $failures failure(s)"; exit 1; }
