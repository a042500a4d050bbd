#!/bin/sh
# init of the lab guest in --systemd mode (run_lab.sh --systemd): the build
# machine's root, read-only over 9p, booted with systemd as PID 1 and the
# Debian packages' files installed, so that csd and cs-agent run in their
# real units. Started by the kernel as `init=/bin/sh -- THIS_SCRIPT`.
#
# Stage one, here: tmpfs wherever systemd or the units must write, seeded
# from the read-only root (/etc, the folders the packages install into), the
# packages' files (unpacked by run_lab.sh into the results share) copied in,
# their system user made, and a unit lab.target that starts csd.service,
# cs-agent.service and lab-scenario.service (guest/systemd_scenario.sh,
# which runs the scenario and writes the verdict). Then systemd replaces
# this shell as PID 1 with lab.target as its default: nothing the build
# machine enables (multi-user.target's services) starts.
#
# With LAB_DPKG=1 (run_lab.sh --upgrade-debs) nothing is installed here:
# the scenario installs and upgrades the packages with the real dpkg, whose
# maintainer scripts talk to this systemd. This stage makes what dpkg
# writes writable instead (its database, seeded from the build machine's
# so that dependencies resolve; /usr/share), and lab.target starts only
# the scenario.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec 0</dev/console 1>/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run

out=/run/lab-out
mkdir -p $out
if ! mount -t 9p -o trans=virtio,version=9p2000.L host0 $out; then
  echo "lab init: cannot mount the shared folder (9p host0): no verdict possible"
  busybox poweroff -f
fi
# LAB_SCENARIO, LAB_SCRIPT, LAB_SRC, LAB_BUILD, written by run_lab.sh.
. $out/lab.env
fail_boot() {
  echo "FAIL: $*" >$out/verdict
  echo "lab init: $*"
  sync; umount $out; busybox poweroff -f
}

# A tree under the host's /tmp stays visible at its path (/tmp is a tmpfs
# here, as in --root9p mode).
mkdir -p /run/host-tmp
mount --bind /tmp /run/host-tmp
mount -t tmpfs -o mode=1777 tmpfs /tmp
for tree in "$LAB_BUILD" "$LAB_SRC"; do
  case $tree in
    /tmp/*) mkdir -p "$tree"; mount --bind "/run/host-tmp/${tree#/tmp/}" "$tree" ;;
  esac
done

tmpfs_copy() {  # DIR: a tmpfs over DIR holding what DIR held
  local seed=/run/seed$(echo "$1" | tr / _)
  mkdir -p "$seed"
  cp -a "$1/." "$seed/" 2>/dev/null
  mount -t tmpfs -o mode=755 tmpfs "$1"
  cp -a "$seed/." "$1/" 2>/dev/null
  rm -rf "$seed"
}
# Before the tmpfs below hide them: the build machine's dpkg database and
# /usr/share, for dpkg in the guest. /run/lab-host/usr/lib leads to /usr/lib
# for the few links in /usr/share that climb out of it (../../lib/...).
if [ "${LAB_DPKG:-0}" = 1 ]; then
  mkdir -p /run/lab-host/var/lib/dpkg /run/lab-host/usr/share
  mount --bind /var/lib/dpkg /run/lab-host/var/lib/dpkg &&
    mount --bind /usr/share /run/lab-host/usr/share &&
    ln -s /usr/lib /run/lab-host/usr/lib || fail_boot "cannot bind /var/lib/dpkg and /usr/share for dpkg"
fi
tmpfs_copy /etc
tmpfs_copy /usr/sbin
tmpfs_copy /usr/lib/systemd/system
tmpfs_copy /usr/lib/sysusers.d
for dir in /var/lib /var/log /var/cache /var/tmp /root; do
  mount -t tmpfs -o mode=755 tmpfs $dir
done
chmod 1777 /var/tmp
mkdir -p /var/log/journal
if [ "${LAB_DPKG:-0}" = 1 ]; then
  # dpkg's database: its files copied (status, triggers, alternatives...),
  # the ~4000 files of info/ as links to the build machine's (read only, but
  # dpkg reads other packages' files lists and writes only those of the
  # packages it installs, by rename).
  mkdir -p /var/lib/dpkg/info /var/lib/dpkg/updates
  for f in /run/lab-host/var/lib/dpkg/*; do
    case ${f##*/} in info|updates|lock*) ;; *) cp -a "$f" /var/lib/dpkg/ ;; esac
  done
  cp -rs /run/lab-host/var/lib/dpkg/info/. /var/lib/dpkg/info/ ||
    fail_boot "cannot seed the guest's dpkg database"
  # /usr/share, and the folders in it that the packages install into: a
  # tmpfs of links to the build machine's entries, so that dpkg can add
  # /usr/share/cosched, a man page, a doc folder. (dpkg needs the folder of
  # every path it unpacks writable, even one excluded by path-exclude: a
  # read-only one fails its first rename.) The folders are read from the
  # .debs themselves, so a package that gains one (man5 did) needs nothing
  # here.
  mount -t tmpfs -o mode=755 tmpfs /usr/share
  ln -s /run/lab-host/usr/share/* /usr/share/ || fail_boot "cannot lay /usr/share out for dpkg"
  package_dirs=$(for deb in "$LAB_DEBS_INSTALL"/*.deb "$LAB_DEBS_UPGRADE"/*.deb; do
      dpkg-deb --fsys-tarfile "$deb" | tar -t
    done | sed -n 's|^\./\(usr/share/.*\)/[^/]*$|/\1|p' | sort -u) ||
    fail_boot "cannot list the packages' folders"
  # sort puts a folder before the folders in it.
  for dir in $package_dirs; do
    [ -L "$dir" ] || continue  # made here already, or new: dpkg makes it
    rm "$dir" && mkdir "$dir" &&
      { [ -z "$(ls -A "/run/lab-host$dir")" ] || ln -s "/run/lab-host$dir"/* "$dir/"; } ||
      fail_boot "cannot lay $dir out for dpkg"
  done
  # The build machine is a container image whose policy-rc.d forbids
  # starting services (exit 101): deb-systemd-invoke would restart nothing.
  # A hypervisor has none.
  rm -f /usr/sbin/policy-rc.d
fi
# The build machine's identity and mounts are not the guest's.
echo lab >/etc/hostname
: >/etc/machine-id
: >/etc/fstab

units="csd.service cs-agent.service"
if [ "${LAB_DPKG:-0}" != 1 ]; then
  # The packages' files, as dpkg would place them. /usr/bin and /usr/share are
  # the build machine's, read-only: csctl runs from the unpacked tree (on the
  # scenario's PATH), man pages and docs stay there.
  [ -x $out/pkgroot/usr/sbin/csd ] && [ -x $out/pkgroot/usr/sbin/cs-agent ] ||
    fail_boot "no unpacked packages in the results share (run_lab.sh --systemd --debs DIR)"
  # File by file: the folders exist (/, /usr and /lib on the read-only root,
  # the tmpfs above), and a tar would try to set their modes.
  (cd $out/pkgroot && find . -path ./usr/share -prune -o -path ./usr/bin -prune -o ! -type d -print) |
    while read -r f; do
      mkdir -p "/$(dirname "$f")" && cp -a "$out/pkgroot/$f" "/$f" || exit 1
    done || fail_boot "cannot install the packages' files"
  # The lab's site settings (guest/systemd_site.sh).
  . "$LAB_SRC/tests/lab/guest/systemd_site.sh"
  lab_configure_site "$LAB_BUILD"
  # What their maintainer scripts do: the system user (cosched-server's
  # sysusers.d file). Units are started by lab.target, not enabled.
  systemd-sysusers || fail_boot "systemd-sysusers failed"
  getent passwd cosched >/dev/null || fail_boot "no system user cosched after systemd-sysusers"
else
  [ -d "${LAB_DEBS_INSTALL:-}" ] && [ -d "${LAB_DEBS_UPGRADE:-}" ] ||
    fail_boot "no .debs in the results share (run_lab.sh --systemd --upgrade-debs DIR)"
  units=""
fi

# The scenario and its helpers run from the source and build trees.
cat >/etc/systemd/system/lab-scenario.service <<EOF
[Unit]
Description=lab scenario $LAB_SCENARIO
After=csd.service cs-agent.service

[Service]
Type=oneshot
Environment=LAB_SCENARIO=$LAB_SCENARIO LAB_SCRIPT=$LAB_SCRIPT LAB_SRC=$LAB_SRC LAB_BUILD=$LAB_BUILD LAB_OUT=$out
Environment=LAB_DPKG=${LAB_DPKG:-0} LAB_DEBS_INSTALL=${LAB_DEBS_INSTALL:-} LAB_DEBS_UPGRADE=${LAB_DEBS_UPGRADE:-}
ExecStart=/bin/sh $LAB_SRC/tests/lab/guest/systemd_scenario.sh
StandardOutput=journal+console
StandardError=journal+console
EOF
cat >/etc/systemd/system/lab.target <<EOF
[Unit]
Description=the lab: csd, cs-agent and the scenario in their units
Requires=basic.target
After=basic.target
Wants=$units lab-scenario.service
AllowIsolate=yes
EOF
echo "lab: scenario $LAB_SCENARIO: starting systemd on the 9p root ($(uname -r), $(nproc) CPUs)"
exec /lib/systemd/systemd --unit=lab.target --show-status=false
