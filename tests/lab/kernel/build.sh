#!/usr/bin/env bash
# Builds a lab kernel from Debian's linux-source-VERSION package: `make
# tinyconfig`, then the options in config.fragment (SMT and core scheduling,
# schedstats, tracing, cgroups, 9p, loopback networking, vhost-net). About 6 to
# 11 minutes on 2 cores. Installs the source package and the build packages it
# needs (as root). Shows progress on stderr; the whole build log is kept next
# to OUTPUT as OUTPUT.log.
#
#   build.sh VERSION OUTPUT      VERSION: 6.12 or 6.1
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "lab kernel build: $*" >&2; exit 2; }

[ $# -eq 2 ] || die "usage: build.sh VERSION OUTPUT (VERSION 6.12 or 6.1)"
version=$1 out=$2
case $version in 6.12|6.1) ;; *) die "unknown version '$version' (6.12 or 6.1)" ;; esac
mkdir -p "$(dirname "$out")"
log=$out.log
say() { echo "[lab kernel $version] $*" >&2; }

need=(linux-source-"$version" bc bison flex libelf-dev libssl-dev cpio make gcc xz-utils)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  [ "$(id -u)" -eq 0 ] || die "needs ${missing[*]}: run as root, or install them"
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
tarball=/usr/src/linux-source-$version.tar.xz
[ -f "$tarball" ] || die "$tarball is missing although linux-source-$version is installed"

# The sources unpack to ~1.4 GB: next to the output (a cache folder), not /tmp.
work=$(mktemp -d "$(dirname "$out")/build-$version.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "unpacking $tarball"
tar -C "$work" -xf "$tarball"
cd "$work/linux-source-$version"

say "configuring: tinyconfig + $here/config.fragment"
{
  make tinyconfig
  ./scripts/kconfig/merge_config.sh -m .config "$here/config.fragment"
  make olddefconfig
} >"$log" 2>&1 || { tail -n 30 "$log" >&2; die "configuration failed (log: $log)"; }
# olddefconfig drops an option whose dependencies are missing, silently.
for opt in CONFIG_SCHED_CORE CONFIG_SCHED_SMT CONFIG_SCHEDSTATS CONFIG_FTRACE \
           CONFIG_PERF_EVENTS CONFIG_CGROUPS CONFIG_9P_FS CONFIG_UNIX CONFIG_INET \
           CONFIG_INOTIFY_USER CONFIG_BPF_SYSCALL CONFIG_NAMESPACES CONFIG_UNIX98_PTYS \
           CONFIG_VHOST_NET CONFIG_PROC_EVENTS; do
  grep -qx "$opt=y" .config || die "$opt did not survive olddefconfig (log: $log)"
done

# Progress: kbuild prints one "  CC      path" line per object; count them.
say "compiling with $(nproc) jobs (a line per 500 objects; about 1 500 in all)"
status=0
make -j"$(nproc)" bzImage 2>&1 | tee -a "$log" |
  awk -v tag="[lab kernel $version]" '/^  (CC|AS|LD|AR) / {
         if (++n % 500 == 0) { printf "%s %d objects built\n", tag, n > "/dev/stderr"; fflush("/dev/stderr") } }' ||
  status=$?
[ "$status" = 0 ] && [ -f arch/x86/boot/bzImage ] ||
  { tail -n 30 "$log" >&2; die "make bzImage failed (log: $log)"; }
cp arch/x86/boot/bzImage "$out.tmp"
mv "$out.tmp" "$out"
say "built $out ($(make -s kernelrelease))"
