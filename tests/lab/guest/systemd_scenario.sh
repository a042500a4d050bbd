#!/bin/sh
# lab-scenario.service in --systemd mode (guest/init_systemd.sh): runs the
# scenario while csd and cs-agent run in their packaged units, writes the
# verdict and the units' journal to the results share, and powers off.
export PATH=$LAB_OUT/pkgroot/usr/bin:$LAB_BUILD/tests/lab:$LAB_BUILD/tests/lab/fake_qemu:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
export LANG=C.UTF-8
export LAB_RESULTS=$LAB_OUT/results.txt
export LAB_FAILURES=$LAB_OUT/failures.txt
export LAB_TRACEFS=/sys/kernel/tracing
export LAB_GUEST=$LAB_SRC/tests/lab/guest
export LAB_SYSTEMD=1
: >"$LAB_RESULTS"
: >"$LAB_FAILURES"
cd /tmp
echo "lab: scenario $LAB_SCENARIO starting under systemd $(systemctl --version | head -1 | cut -d' ' -f2)"
sh "$LAB_SCRIPT"
rc=$?
for unit in csd cs-agent; do
  journalctl --no-pager -o short-monotonic -u $unit.service >"$LAB_OUT/journal-$unit.txt" 2>&1
done
# The whole boot, for what the units' own journals do not say.
journalctl --no-pager -o short-monotonic -b >"$LAB_OUT/journal.txt" 2>&1
if [ $rc -eq 0 ] && [ ! -s "$LAB_FAILURES" ]; then
  echo PASS >"$LAB_OUT/verdict"
else
  reason=$(head -n 1 "$LAB_FAILURES")
  echo "FAIL: ${reason:-scenario exit status $rc}" >"$LAB_OUT/verdict"
fi
echo "lab: scenario $LAB_SCENARIO done: $(cat "$LAB_OUT/verdict")"
sync
umount "$LAB_OUT"
# Not systemctl poweroff: the verdict is written, and an orderly shutdown of
# the 9p root takes long under emulation.
busybox poweroff -f
