#!/bin/sh
# init of the lab guest in --root9p mode (run_lab.sh --root9p): the guest's
# root is the build machine's own root, read-only over 9p, so libvirtd, QEMU,
# every library and the build tree are there at the same paths. Started by
# the kernel as `init=/bin/sh -- THIS_SCRIPT` (no exec bit needed).
#
# It mounts what must be writable on tmpfs, starts libvirtd (settings from
# ARCHITECTURE.md, "Real libvirt and real QEMU inside the lab"), runs the
# scenario from the source tree and writes the verdict to the results share
# (9p tag host0), as guest/init.sh does in the initramfs mode. When libvirtd
# does not start, it writes the marker `libvirtd-failed` there and the
# harness retries once.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
export LANG=C.UTF-8
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec 0</dev/console 1>/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tracefs tracefs /sys/kernel/tracing
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
hostname lab
ip link set lo up

out=/run/lab-out
mkdir -p $out
if ! mount -t 9p -o trans=virtio,version=9p2000.L host0 $out; then
  echo "lab init: cannot mount the shared folder (9p host0): no verdict possible"
  busybox poweroff -f
fi
# LAB_SCENARIO, LAB_SCRIPT (the scenario), LAB_SRC (source tree), LAB_BUILD
# (build tree), written by run_lab.sh.
. $out/lab.env

# /tmp becomes a tmpfs; a build or source tree under the host's /tmp stays
# visible at the same path.
mkdir -p /run/host-tmp
mount --bind /tmp /run/host-tmp
mount -t tmpfs -o mode=1777 tmpfs /tmp
for tree in "$LAB_BUILD" "$LAB_SRC"; do
  case $tree in
    /tmp/*)
      mkdir -p "$tree"
      mount --bind "/run/host-tmp/${tree#/tmp/}" "$tree" ;;
  esac
done

# Writable copies (tmpfs seeded from the read-only root) and empty tmpfs.
tmpfs_copy() {  # DIR: a tmpfs over DIR holding what DIR held
  local seed=/run/seed$(echo "$1" | tr / _)
  mkdir -p "$seed"
  cp -a "$1/." "$seed/" 2>/dev/null
  mount -t tmpfs tmpfs "$1"
  cp -a "$seed/." "$1/" 2>/dev/null
  rm -rf "$seed"
}
tmpfs_copy /etc/libvirt
# Not the build machine's own domains, networks or pools.
rm -rf /etc/libvirt/qemu /etc/libvirt/storage /etc/libvirt/secrets /etc/libvirt/nwfilter
mount -t tmpfs tmpfs /var/lib/libvirt
mount -t tmpfs tmpfs /var/cache/libvirt
mount -t tmpfs tmpfs /var/log
mount -t tmpfs tmpfs /root
mkdir -p /var/log/libvirt/qemu /var/lib/libvirt/qemu /var/cache/libvirt/qemu/capabilities /run/libvirt
# libvirtd probes QEMU's capabilities on its first start (~40 s under nested
# emulation). The cache an earlier boot wrote (run_lab.sh keeps it in the
# build tree) is valid here when nothing changed; libvirtd checks that itself
# and probes again otherwise.
caps_seed=$LAB_BUILD/tests/lab/root9p-cache/capabilities
cp "$caps_seed"/*.xml /var/cache/libvirt/qemu/capabilities/ 2>/dev/null
# libvirt 9.0 resolves its compiled-in user and group libvirt-qemu before it
# reads qemu.conf (which says root): give it copies of /etc/passwd and
# /etc/group with such entries when the build machine has none.
if ! grep -q '^libvirt-qemu:' /etc/passwd; then
  cp /etc/passwd /run/passwd
  echo 'libvirt-qemu:x:64055:64055:Libvirt Qemu:/var/lib/libvirt:/usr/sbin/nologin' >>/run/passwd
  mount --bind /run/passwd /etc/passwd
fi
if ! grep -q '^libvirt-qemu:' /etc/group; then
  cp /etc/group /run/group
  echo 'libvirt-qemu:x:64055:' >>/run/group
  mount --bind /run/group /etc/group
fi

export LAB_OUT=$out
export LAB_RESULTS=$out/results.txt
export LAB_FAILURES=$out/failures.txt
export LAB_TRACEFS=/sys/kernel/tracing
export LAB_GUEST=$LAB_SRC/tests/lab/guest
export LAB_ROOT9P=1
# The project's binaries from the build tree. Not tests/lab/fake_qemu: the
# real qemu-system-x86_64 is wanted here.
export PATH=$LAB_BUILD/server:$LAB_BUILD/agent:$LAB_BUILD/cli:$LAB_BUILD/tests/lab:$PATH
: >"$LAB_RESULTS"
: >"$LAB_FAILURES"

echo "lab: scenario $LAB_SCENARIO starting on the 9p root ($(uname -r), $(nproc) CPUs, $(awk '/MemTotal/{print int($2/1024)}' /proc/meminfo) MiB)"
. "$LAB_GUEST/lib.sh"   # lab_log; nothing here may call lab_fail (it exits)
. "$LAB_GUEST/libvirt.sh"
cd /tmp
rc=0
if lab_libvirtd_start none; then
  sh "$LAB_SCRIPT"
  rc=$?
else
  rc=1
fi
lab_libvirtd_keep_logs
mkdir -p $out/libvirt-caps
cp /var/cache/libvirt/qemu/capabilities/*.xml $out/libvirt-caps/ 2>/dev/null
if [ $rc -eq 0 ] && [ ! -s "$LAB_FAILURES" ]; then
  echo PASS >$out/verdict
else
  reason=$(head -n 1 "$LAB_FAILURES")
  echo "FAIL: ${reason:-scenario exit status $rc}" >$out/verdict
fi
echo "lab: scenario $LAB_SCENARIO done: $(cat $out/verdict)"
sync
umount $out
# The build machine's poweroff is systemctl: busybox's powers off directly.
busybox poweroff -f
