#!/bin/sh
# /init of the lab guest (busybox-static). Mounts what a scenario needs, runs
# /lab/scenario.sh, writes the verdict to the shared folder and powers off.
# The verdict is "PASS" when the scenario exits 0, else "FAIL: <first reason
# the scenario gave with lab_fail>" (or its exit status).
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/root
# devtmpfs first: the kernel found no /dev/console in the initramfs, so this
# script has no stdio yet, and busybox starts background jobs with stdin from
# /dev/null.
mount -t devtmpfs devtmpfs /dev
exec 0</dev/console 1>/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tracefs tracefs /sys/kernel/tracing
mkdir -p /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
hostname lab
ip link set lo up

if ! mount -t 9p -o trans=virtio,version=9p2000.L host0 /mnt; then
  echo "lab init: cannot mount the shared folder (9p host0): no verdict possible"
  poweroff -f
fi

export LAB_SCENARIO=$(cat /lab/name)
export LAB_OUT=/mnt
export LAB_RESULTS=/mnt/results.txt
export LAB_FAILURES=/mnt/failures.txt
export LAB_TRACEFS=/sys/kernel/tracing
: >"$LAB_RESULTS"
: >"$LAB_FAILURES"

echo "lab: scenario $LAB_SCENARIO starting ($(uname -r), $(nproc) CPUs)"
cd /tmp
sh /lab/scenario.sh
rc=$?
if [ $rc -eq 0 ] && [ ! -s "$LAB_FAILURES" ]; then
  echo PASS >/mnt/verdict
else
  reason=$(head -n 1 "$LAB_FAILURES")
  echo "FAIL: ${reason:-scenario exit status $rc}" >/mnt/verdict
fi
echo "lab: scenario $LAB_SCENARIO done: $(cat /mnt/verdict)"
sync
umount /mnt
poweroff -f
