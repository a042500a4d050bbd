#!/usr/bin/env bash
# Runs one lab scenario in a guest with a real core-scheduling kernel, under
# software emulation with 2 cores x 2 SMT siblings, and turns the guest's
# verdict into an exit status (0: PASS).
#
#   run_lab.sh SCENARIO [--kernel VERSION] [--no-trust-cpu] [--out DIR] [--timeout SECONDS] [BINARY...]
#   run_lab.sh --root9p SCENARIO [--kernel VERSION] [--build DIR] [--out DIR] [--timeout SECONDS]
#   run_lab.sh --systemd SCENARIO [--debs DIR] [--upgrade-debs DIR] [--build DIR] [--out DIR] [--timeout SECONDS]
#
# SCENARIO is tests/lab/scenarios/SCENARIO.sh (or a path to a script). Every BINARY (and every path
# in $LAB_BINARIES, separated by spaces or colons) is copied to the guest's
# /bin under its own name, with the shared libraries ldd lists for it copied
# to the same paths. Results land in DIR (default: a temporary folder, kept on
# failure): verdict, results.txt (the scenario's figures), console.log, and
# whatever the scenario writes to $LAB_OUT.
#
# --kernel VERSION picks the lab kernel (kernel/lab_kernel.sh): 6.12 (default,
# vhost workers are threads of their QEMU) or 6.1 (vhost workers are kernel
# threads, children of kthreadd). 6.1 boots with `-cpu
# max,vendor=GenuineIntel` (else it finds no SMT siblings) and
# `random.trust_cpu=on` (else its PR_SCHED_CORE_GET reads 0 for tagged tasks
# until its pointer-hash key is ready); --no-trust-cpu leaves the latter out,
# to show that window.
#
# Environment: COSCHED_LAB_KERNEL and COSCHED_LAB_KERNEL_6_1 (the kernels;
# by default found or built by kernel/lab_kernel.sh), LAB_TIMEOUT (seconds
# per boot, default 240), LAB_QEMU (default qemu-system-x86_64 from PATH),
# LAB_BINARIES, LAB_KEEP=1 keeps the work folder.
#
# --root9p: no initramfs. The guest's root is this machine's own root,
# read-only over 9p, so it has libvirtd, the real QEMU, every library and the
# build tree at the same paths (ARCHITECTURE.md, "Real libvirt and real QEMU
# inside the lab"). guest/init_root9p.sh mounts tmpfs where libvirt must
# write, starts libvirtd and runs the scenario from the source tree with the
# binaries of the build tree (--build DIR, else $LAB_BUILD, else <repo>/build)
# on its PATH. The guest gets 2 GiB for the nested QEMU domains. A libvirtd
# that does not start, like a guest oops, is reported and retried once.
#
# --systemd: the 9p root booted with systemd as PID 1 (guest/init_systemd.sh),
# with the files of the Debian packages in --debs DIR (default
# <repo>/build-deb, made by scripts/package.sh) installed, so csd and
# cs-agent run in their packaged units; the scenario runs as a unit beside
# them (guest/systemd_scenario.sh) with the build tree's lab tools.
#
# --upgrade-debs DIR (with --systemd): real dpkg instead. The guest's dpkg
# database is the build machine's, on tmpfs, and nothing is installed at
# boot: the scenario installs cosched-server and cosched-agent of --debs
# with `dpkg -i`, under the running systemd, then upgrades them to those of
# DIR (a higher version: COSCHED_VERSION_SUFFIX, scripts/version.sh), so
# that the packages' own maintainer scripts start and restart the units.
# The guest finds the .debs in $LAB_DEBS_INSTALL and $LAB_DEBS_UPGRADE.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

die() { echo "run_lab: $*" >&2; exit 2; }

[ $# -ge 1 ] || die "usage: run_lab.sh SCENARIO [--out DIR] [--timeout SECONDS] [BINARY...]"
root9p=0
systemd=0
debs=$repo/build-deb
upgrade_debs=""
kernel_version=6.12
trust_cpu=1
case $1 in
  --root9p) root9p=1; shift ;;
  --systemd) root9p=1; systemd=1; shift ;;
esac
[ $# -ge 1 ] || die "usage: run_lab.sh --root9p|--systemd SCENARIO [--build DIR] [--out DIR] [--timeout SECONDS]"
scenario=$1; shift
out=""
timeout_s=${LAB_TIMEOUT:-240}
build=${LAB_BUILD:-$repo/build}
binaries=()
while [ $# -gt 0 ]; do
  case $1 in
    --root9p) root9p=1; shift ;;
    --systemd) root9p=1; systemd=1; shift ;;
    --debs) debs=$2; shift 2 ;;
    --upgrade-debs) upgrade_debs=$2; shift 2 ;;
    --kernel) kernel_version=$2; shift 2 ;;
    --no-trust-cpu) trust_cpu=0; shift ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    *) binaries+=("$1"); shift ;;
  esac
done
[ -z "$upgrade_debs" ] || [ $systemd = 1 ] || die "--upgrade-debs needs --systemd"
if [ -n "${LAB_BINARIES:-}" ]; then
  IFS=': ' read -r -a extra <<<"$LAB_BINARIES"
  binaries+=("${extra[@]}")
fi

# A scenario is a name from scenarios/, or the path of a script (for trying
# one out before it is added).
if [[ $scenario == */* ]]; then
  script=$(cd "$(dirname "$scenario")" && pwd)/$(basename "$scenario")
  scenario=$(basename "$scenario" .sh)
else
  script="$here/scenarios/$scenario.sh"
fi
[ -f "$script" ] || die "no scenario $script"
qemu=${LAB_QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null || die "$qemu not found (scripts/install-deps.sh installs qemu-system-x86)"
[ $root9p = 1 ] || command -v cpio >/dev/null || die "cpio not found (scripts/install-deps.sh installs it)"

# busybox-static, not a dynamic busybox: the guest has no libc of its own.
busybox=""
for b in /bin/busybox /usr/bin/busybox /usr/lib/busybox/busybox-static; do
  if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then busybox=$b; break; fi
done
[ -n "$busybox" ] || die "no static busybox (scripts/install-deps.sh installs busybox-static)"

# --- the kernel -------------------------------------------------------------
# kernel/lab_kernel.sh knows the lab kernels: where each is found (or built),
# how it boots, and the check that it can serve the lab.
. "$here/kernel/lab_kernel.sh"
lab_kernel_settings "$kernel_version" "$trust_cpu" || exit 2
kernel_cpu=$LAB_KERNEL_CPU kernel_append=$LAB_KERNEL_APPEND
lab_kernel_find "$kernel_version" || die "no usable lab kernel $kernel_version (above)"
kernel=$LAB_KERNEL

work=$(mktemp -d "${TMPDIR:-/tmp}/cosched-lab.XXXXXX")
cleanup() { [ "${LAB_KEEP:-0}" = 1 ] || rm -rf "$work"; }
trap cleanup EXIT

# --- the 9p root ------------------------------------------------------------
if [ $root9p = 1 ]; then
  [ ${#binaries[@]} -eq 0 ] || die "--root9p takes no BINARY: the guest runs the build tree's ($build)"
  build=$(cd "$build" 2>/dev/null && pwd) || die "no build tree $build (--build DIR)"
  # The guest puts tmpfs on these (/tmp keeps a build tree visible).
  for tree in "$build" "$repo"; do
    case $tree/ in
      /run/*|/root/*|/var/log/*|/var/lib/libvirt/*|/var/cache/libvirt/*|/etc/libvirt/*|/dev/*|/proc/*|/sys/*)
        die "$tree is hidden in the guest by a tmpfs: use a tree elsewhere" ;;
    esac
  done
  if [ $systemd = 1 ]; then
    for tool in tests/lab/lab_cookies tests/lab/fake_qemu/qemu-system-x86_64; do
      [ -x "$build/$tool" ] || die "$build/$tool not built (cmake --build $build --target lab_tools)"
    done
    for pkg in cosched-server cosched-agent cosched-client; do
      ls "$debs"/${pkg}_*.deb >/dev/null 2>&1 || die "no $pkg package in $debs (scripts/package.sh builds them)"
    done
    [ -x /lib/systemd/systemd ] || die "no /lib/systemd/systemd (Debian's systemd package)"
    if [ -n "$upgrade_debs" ]; then
      for pkg in cosched-server cosched-agent; do
        ls "$upgrade_debs"/${pkg}_*.deb >/dev/null 2>&1 ||
          die "no $pkg package in $upgrade_debs (COSCHED_VERSION_SUFFIX=+lab1 scripts/package.sh --quick DIR builds them)"
        old_version=$(dpkg-deb -f "$(ls "$debs"/${pkg}_*.deb | head -1)" Version)
        new_version=$(dpkg-deb -f "$(ls "$upgrade_debs"/${pkg}_*.deb | head -1)" Version)
        dpkg --compare-versions "$new_version" gt "$old_version" ||
          die "$pkg $new_version in $upgrade_debs is no upgrade of $old_version in $debs"
      done
      # The guest's dpkg starts from this machine's database: with the
      # packages installed here, its first install would be an upgrade.
      if dpkg-query -W -f '${Status}\n' cosched-server cosched-agent 2>/dev/null | grep -q ' installed$'; then
        die "cosched-server or cosched-agent is installed on this machine: the guest (this root) cannot install them afresh"
      fi
    fi
  else
    for tool in server/csd agent/cs-agent cli/csctl tests/lab/lab_cookies tests/lab/lab_tag_gap; do
      [ -x "$build/$tool" ] || die "$build/$tool not built (cmake --build $build --target lab_libvirt_binaries)"
    done
  fi
  for tool in libvirtd virsh; do
    command -v $tool >/dev/null || die "$tool not found (scripts/install-deps.sh installs libvirt-daemon, libvirt-daemon-driver-qemu and libvirt-clients)"
  done
  [ -x /usr/bin/qemu-system-x86_64 ] || die "no /usr/bin/qemu-system-x86_64 for the guest's libvirt (qemu-system-x86)"
  # The guest mounts tmpfs on these, and its root is read-only: they must
  # exist here. libvirtd makes the libvirt ones at its first start, so a
  # machine that never ran it lacks them.
  for dir in /var/lib/libvirt /var/cache/libvirt /var/log /root /etc/libvirt; do
    [ -d "$dir" ] || mkdir -p "$dir" 2>/dev/null ||
      die "$dir is missing and cannot be made (the guest mounts a tmpfs there): run as root"
  done
  [ -x /bin/busybox ] || die "no /bin/busybox (busybox-static): the guest powers off with it"
  guest_init=$here/guest/init_root9p.sh
  [ $systemd = 0 ] || guest_init=$here/guest/init_systemd.sh
  [ -f "$guest_init" ] || die "no $guest_init"
fi

# --- the initramfs ----------------------------------------------------------
if [ $root9p = 0 ]; then
root="$work/root"
mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,dev,proc,sys,mnt,tmp,run,etc,root,lab}
# The same merged-/usr layout as the build machine, so that library paths
# from ldd are valid in the guest as they are.
for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
cp "$busybox" "$root/usr/bin/busybox"
for applet in $("$busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$root/usr/bin/$applet"
done

copy_with_libs() {  # FILE DEST_NAME
  local file=$1 name=$2 lib
  # A binary named like a busybox applet (setpriv) replaces the applet's
  # link; cp would otherwise write through the link over busybox itself.
  rm -f "$root/usr/bin/$name"
  # Without debug info: csd alone is ~55 MB of it in a RelWithDebInfo build,
  # and the emulated guest unpacks every byte of the initramfs at each boot.
  # Symbols stay, for glog's stack traces.
  objcopy --strip-debug "$file" "$root/usr/bin/$name" 2>/dev/null || cp -L "$file" "$root/usr/bin/$name"
  if ldd "$file" 2>/dev/null | grep 'not found' >/dev/null; then
    die "$file needs libraries this machine lacks: $(ldd "$file" | grep 'not found' | tr -s ' \t\n' ' ')"
  fi
  # ldd prints "libx.so.1 => /path/libx.so.1 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)".
  while read -r lib; do
    [ -e "$root$lib" ] && continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done < <(ldd "$file" 2>/dev/null | awk '/=> \//{print $3} /^[ \t]*\//{print $1}')
}
for bin in "${binaries[@]}"; do
  [ -f "$bin" ] && [ -x "$bin" ] || die "binary $bin not found (build the lab targets first: cmake --build BUILD --target lab_tools)"
  copy_with_libs "$bin" "$(basename "$bin")"
done
cp "$here/guest/init.sh" "$root/init"
cp "$here/guest/lib.sh" "$root/lab/lib.sh"
cp "$script" "$root/lab/scenario.sh"
chmod 755 "$root/init" "$root/lab/scenario.sh"
echo "$scenario" >"$root/lab/name"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$work/initramfs.cpio.gz"
fi

# --- boot -------------------------------------------------------------------
out_is_temporary=0
if [ -z "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/cosched-lab-$scenario.XXXXXX")
  out_is_temporary=1
fi
mkdir -p "$out"

# The emulated CPUs take an interrupt only when the host runs their thread; on
# a busy build machine that can take tens of milliseconds, which the guest
# sees as siblings running different cookies that long. A higher host
# priority for the emulator keeps those windows short. Only root may raise
# it; otherwise the lab runs at normal priority (and says so).
nice_level=${LAB_NICE:--10}
nice_cmd=""
if [ "$nice_level" != 0 ]; then
  if nice -n "$nice_level" true 2>/dev/null && [ "$(nice -n "$nice_level" nice)" = "$((nice_level + $(nice)))" ]; then
    nice_cmd="nice -n $nice_level"
  else
    echo "run_lab: cannot run the emulator at nice $nice_level (not root?): figures may show longer foreign windows"
  fi
fi

# A guest oops or panic; a WARNING alone is not one.
oops_re='Oops:|Kernel panic|BUG:|general protection fault|int3'

# The guest: initramfs, or (--root9p) this machine's root read-only over 9p
# with more memory for nested QEMU domains.
if [ $root9p = 1 ]; then
  guest_args=(-m 2048
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
    -kernel "$kernel"
    -append "console=ttyS0 panic=-1 quiet${kernel_append:+ $kernel_append} root=hostroot rootfstype=9p rootflags=trans=virtio,version=9p2000.L,msize=262144,cache=loose ro init=/bin/sh -- $guest_init")
else
  guest_args=(-m 1024 -kernel "$kernel" -initrd "$work/initramfs.cpio.gz"
    -append "console=ttyS0 panic=-1 quiet${kernel_append:+ $kernel_append}")
fi

# run_once ATTEMPT_DIR: 0 PASS, 1 FAIL (verdict), 2 no verdict, 3 guest oops,
# 4 libvirtd did not start (--root9p).
run_once() {
  local dir=$1 rc=0 start end
  rm -rf "$dir"; mkdir -p "$dir"
  if [ $root9p = 1 ]; then
    printf 'LAB_SCENARIO=%s\nLAB_SCRIPT=%s\nLAB_SRC=%s\nLAB_BUILD=%s\n' \
      "$scenario" "$script" "$repo" "$build" >"$dir/lab.env"
  fi
  if [ $systemd = 1 ] && [ -n "$upgrade_debs" ]; then
    # The .debs themselves, for the guest's dpkg. csctl runs unpacked:
    # cosched-client would install into the guest's read-only /usr/bin.
    local set pkg
    for set in install:"$debs" upgrade:"$upgrade_debs"; do
      mkdir -p "$dir/debs/${set%%:*}"
      for pkg in cosched-server cosched-agent; do
        cp "${set#*:}"/${pkg}_*.deb "$dir/debs/${set%%:*}/"
      done
    done
    dpkg-deb -x "$(ls "$debs"/cosched-client_*.deb | head -1)" "$dir/pkgroot"
    printf 'LAB_DPKG=1\nLAB_DEBS_INSTALL=/run/lab-out/debs/install\nLAB_DEBS_UPGRADE=/run/lab-out/debs/upgrade\n' >>"$dir/lab.env"
  elif [ $systemd = 1 ]; then
    # The packages' files, as dpkg would unpack them; the guest installs them.
    local deb
    for deb in "$debs"/cosched-server_*.deb "$debs"/cosched-agent_*.deb "$debs"/cosched-client_*.deb; do
      dpkg-deb -x "$deb" "$dir/pkgroot"
    done
  fi
  start=$(date +%s.%N)
  timeout -k 10 "$timeout_s" $nice_cmd "$qemu" \
    -accel tcg,thread=multi -cpu "$kernel_cpu" -smp 4,sockets=1,cores=2,threads=2 \
    -nographic -no-reboot -nic none \
    -virtfs "local,path=$dir,mount_tag=host0,security_model=none" \
    "${guest_args[@]}" </dev/null >"$dir/console.log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  LAST_SECONDS=$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}')
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "run_lab: the guest did not finish within ${timeout_s}s" >>"$dir/harness.log"
  fi
  if [ $root9p = 1 ] && ls "$dir"/libvirt-caps/*.xml >/dev/null 2>&1; then
    # libvirtd's QEMU capabilities, for the next boot (see init_root9p.sh).
    mkdir -p "$build/tests/lab/root9p-cache/capabilities" &&
      cp "$dir"/libvirt-caps/*.xml "$build/tests/lab/root9p-cache/capabilities/" 2>/dev/null || true
  fi
  if grep -Eq "$oops_re" "$dir/console.log"; then return 3; fi
  [ -f "$dir/libvirtd-failed" ] && return 4
  [ -f "$dir/verdict" ] || return 2
  grep -q '^PASS' "$dir/verdict" && return 0
  return 1
}

show_figures() {
  local dir=$1
  if [ -s "$dir/results.txt" ]; then
    echo "--- lab.$scenario figures ---"
    cat "$dir/results.txt"
  fi
}

status=0
run_once "$out" || status=$?
if [ $status -eq 3 ]; then
  echo "run_lab: guest kernel oops (emulator code-patching race), retrying once"
  grep -E -m1 -B2 -A8 "$oops_re" "$out/console.log" | sed 's/^/  | /' || true
  rm -rf "$out.oops"; mv "$out" "$out.oops"  # keep the first attempt for inspection
  status=0
  run_once "$out" || status=$?
  [ $status -ne 3 ] || echo "run_lab: guest kernel oops again on the retry: failing"
elif [ $status -eq 4 ]; then
  echo "run_lab: libvirtd did not start in the guest ($(cat "$out/libvirtd-failed")), retrying once"
  tail -n 20 "$out/libvirt/libvirtd.log" 2>/dev/null | sed 's/^/  | /' || true
  rm -rf "$out.libvirtd"; mv "$out" "$out.libvirtd"  # keep the first attempt for inspection
  status=0
  run_once "$out" || status=$?
  [ $status -ne 4 ] || echo "run_lab: libvirtd failed again on the retry: failing"
fi

show_figures "$out"
case $status in
  0)
    if [ $out_is_temporary = 1 ]; then
      rm -rf "$out" "$out.oops" "$out.libvirtd"
      echo "run_lab: lab.$scenario PASS in ${LAST_SECONDS}s"
    else
      echo "run_lab: lab.$scenario PASS in ${LAST_SECONDS}s (results: $out)"
    fi
    exit 0 ;;
  1)
    echo "run_lab: lab.$scenario $(head -1 "$out/verdict") (results: $out)"
    echo "--- guest console ---"
    cat "$out/console.log" ;;
  2)
    echo "run_lab: lab.$scenario FAIL: no verdict from the guest (timeout or crash) after ${LAST_SECONDS}s (results: $out)"
    cat "$out/harness.log" 2>/dev/null || true
    echo "--- guest console (last 60 lines) ---"
    tail -n 60 "$out/console.log" ;;
  3)
    echo "run_lab: lab.$scenario FAIL: guest kernel oops (results: $out)"
    echo "--- guest console ---"
    cat "$out/console.log" ;;
  4)
    echo "run_lab: lab.$scenario FAIL: libvirtd did not start in the guest: $(cat "$out/libvirtd-failed") (results: $out)"
    echo "--- libvirtd log (last 40 lines) ---"
    tail -n 40 "$out/libvirt/libvirtd.log" 2>/dev/null || true
    echo "--- guest console (last 60 lines) ---"
    tail -n 60 "$out/console.log" ;;
esac
exit 1
