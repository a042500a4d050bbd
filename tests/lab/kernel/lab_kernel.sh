#!/usr/bin/env bash
# The one place that knows the lab kernels: where each is looked for, how it
# boots, how it is built when none is found, and the check that it can serve
# the lab.
#
#   lab_kernel.sh ensure VERSION...         find (or build) and check each kernel
#   lab_kernel.sh path VERSION [--no-build] print the checked kernel's path; with
#                                           --no-build, nothing (exit 0) if none is found
#
# VERSION is 6.12 (vhost workers are threads of their QEMU) or 6.1 (vhost
# workers are kernel threads). Each is looked for in this order:
#   1. $COSCHED_LAB_KERNEL (6.12) or $COSCHED_LAB_KERNEL_6_1 (6.1);
#   2. ../shared/kernel/bzImage or bzImage-6.1 beside the clone, when present
#      (a cache of the team's own machines; a user's clone has none);
#   3. the cache: $XDG_CACHE_HOME/cosched/lab-kernel, else
#      /var/cache/cosched/lab-kernel as root, else ~/.cache/cosched/lab-kernel.
#      Its kernels are named after the recipe (config.fragment and build.sh),
#      so a changed recipe builds anew.
# When none is found, build.sh builds it into the cache (6 to 11 minutes on 2
# cores; progress on stderr). Each kernel is then booted once with
# kernel_check.c as its init: 2 cores x 2 siblings, core scheduling that reads
# back, schedstats and vhost-net. A kernel that passed is remembered by its
# SHA-256 in the cache (LAB_KERNEL_CHECK=0 skips the check: for run_lab.sh's
# own harness tests, whose kernel is a stand-in).
#
# run_lab.sh sources this file for lab_kernel_settings and lab_kernel_find.

lab_kernel_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# lab_kernel_settings VERSION TRUST_CPU: how VERSION boots. Sets
# LAB_KERNEL_FILE (its file name), LAB_KERNEL_ENV (the variable that
# overrides it) and LAB_KERNEL_OVERRIDE (its value), LAB_KERNEL_CPU (the -cpu model) and LAB_KERNEL_APPEND (extra
# command line). 6.1 takes an AMD CPU without topoext for one without SMT
# siblings, and without random.trust_cpu its pointer-hash key waits for
# entropy the emulated guest lacks, and PR_SCHED_CORE_GET reads 0 until then
# (TRUST_CPU=0 leaves that out, to show the window).
lab_kernel_settings() {
  local version=$1 trust_cpu=${2:-1}
  case $version in
    6.12) LAB_KERNEL_FILE=bzImage; LAB_KERNEL_ENV=COSCHED_LAB_KERNEL
          LAB_KERNEL_CPU=max; LAB_KERNEL_APPEND="" ;;
    6.1)  LAB_KERNEL_FILE=bzImage-6.1; LAB_KERNEL_ENV=COSCHED_LAB_KERNEL_6_1
          LAB_KERNEL_CPU=max,vendor=GenuineIntel
          LAB_KERNEL_APPEND=""; [ "$trust_cpu" = 0 ] || LAB_KERNEL_APPEND="random.trust_cpu=on" ;;
    *) echo "lab kernel: unknown version '$version' (6.12 or 6.1)" >&2; return 2 ;;
  esac
  LAB_KERNEL_OVERRIDE=${!LAB_KERNEL_ENV:-}
}

lab_kernel_cache() {
  if [ -n "${XDG_CACHE_HOME:-}" ]; then echo "$XDG_CACHE_HOME/cosched/lab-kernel"
  elif [ "$(id -u)" = 0 ]; then echo /var/cache/cosched/lab-kernel
  else echo "${HOME:-/tmp}/.cache/cosched/lab-kernel"; fi
}

# The recipe's fingerprint: a cached kernel built by another recipe is not used.
lab_kernel_recipe() {
  cat "$lab_kernel_dir/config.fragment" "$lab_kernel_dir/build.sh" | sha256sum | cut -c1-12
}

# lab_kernel_check KERNEL VERSION: boots KERNEL with kernel_check.c as init.
lab_kernel_check() {
  local kernel=$1 version=$2 cache sum stamp tmp status=0
  [ "${LAB_KERNEL_CHECK:-1}" != 0 ] || return 0
  cache=$(lab_kernel_cache)
  sum=$(sha256sum "$kernel" | cut -c1-64)
  stamp=$cache/checked/$version-$sum
  [ -f "$stamp" ] && return 0
  lab_kernel_settings "$version" 1 || return 2
  for tool in cc cpio gzip qemu-system-x86_64; do
    command -v $tool >/dev/null ||
      { echo "lab kernel: $tool not found to check $kernel (scripts/install-deps.sh installs it)" >&2; return 2; }
  done
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/cosched-kernel-check.XXXXXX")
  mkdir -p "$tmp/root"
  if ! cc -static -O1 -o "$tmp/root/init" "$lab_kernel_dir/kernel_check.c" 2>"$tmp/cc.log"; then
    cat "$tmp/cc.log" >&2; rm -rf "$tmp"
    echo "lab kernel: cannot build kernel_check.c (static libc: libc6-dev)" >&2; return 2
  fi
  (cd "$tmp/root" && echo init | cpio -o -H newc --quiet) | gzip -1 >"$tmp/initrd.gz"
  # A boot that never reached the check (the emulator's timer race on a busy
  # machine panics early now and then) is tried once more, as run_lab.sh does.
  for attempt in 1 2; do
    echo "[lab kernel $version] checking $kernel (one boot)" >&2
    status=0
    timeout -k 5 180 qemu-system-x86_64 -accel tcg,thread=multi -cpu "$LAB_KERNEL_CPU" \
      -smp 4,sockets=1,cores=2,threads=2 -m 256 -nographic -no-reboot -nic none \
      -kernel "$kernel" -initrd "$tmp/initrd.gz" \
      -append "console=ttyS0 panic=-1 quiet${LAB_KERNEL_APPEND:+ $LAB_KERNEL_APPEND}" \
      </dev/null >"$tmp/console.log" 2>&1 || status=$?
    grep -q 'KERNEL_CHECK' "$tmp/console.log" && break
  done
  if tr -d '\r' <"$tmp/console.log" | grep -qx 'KERNEL_CHECK: OK'; then
    tr -d '\r' <"$tmp/console.log" | grep -E '^kernel_check: (release|core)' | sed 's/^/  /' >&2
    mkdir -p "$cache/checked" 2>/dev/null && touch "$stamp" 2>/dev/null || true
    rm -rf "$tmp"
    return 0
  fi
  {
    echo "lab kernel: $kernel cannot serve the lab as Linux $version:"
    if grep -q '^kernel_check:' "$tmp/console.log" || grep -q 'KERNEL_CHECK' "$tmp/console.log"; then
      tr -d '\r' <"$tmp/console.log" | grep -E '^(kernel_check|KERNEL_CHECK)' | sed 's/^/  /'
    else
      echo "  it did not boot to its check (qemu status $status); the console's last lines:"
      tr -d '\r' <"$tmp/console.log" | tail -n 15 | sed 's/^/  | /'
    fi
    echo "  Build one with $lab_kernel_dir/build.sh $version OUTPUT, or remove it to have one built."
  } >&2
  rm -rf "$tmp"
  return 1
}

# lab_kernel_find VERSION [--no-build]: sets LAB_KERNEL to a checked kernel
# of VERSION, building one into the cache when none is found. With
# --no-build, LAB_KERNEL is empty when none is found.
lab_kernel_find() {
  local version=$1 build=1 shared cache built lock_fd
  [ "${2:-}" != --no-build ] || build=0
  lab_kernel_settings "$version" 1 || return 2
  LAB_KERNEL=$LAB_KERNEL_OVERRIDE
  shared=$lab_kernel_dir/../../../../shared/kernel/$LAB_KERNEL_FILE
  if [ -z "$LAB_KERNEL" ] && [ -f "$shared" ]; then
    LAB_KERNEL=$(cd "$(dirname "$shared")" && pwd)/$LAB_KERNEL_FILE
  fi
  cache=$(lab_kernel_cache)
  if [ -z "$LAB_KERNEL" ]; then
    built=$cache/$LAB_KERNEL_FILE-$(lab_kernel_recipe)
    if [ ! -f "$built" ]; then
      [ $build = 1 ] || return 0
      mkdir -p "$cache" || { echo "lab kernel: cannot create the cache $cache" >&2; return 2; }
      # One build at a time: parallel lab tests wait for the first one's.
      exec {lock_fd}>"$cache/.lock"
      flock "$lock_fd"
      if [ ! -f "$built" ]; then
        echo "[lab kernel $version] none found (\$$LAB_KERNEL_ENV, ../shared/kernel, $cache): building it" >&2
        "$lab_kernel_dir/build.sh" "$version" "$built" || { exec {lock_fd}>&-; return 2; }
      fi
      exec {lock_fd}>&-
    fi
    LAB_KERNEL=$built
  fi
  [ -f "$LAB_KERNEL" ] || { echo "lab kernel: $LAB_KERNEL (Linux $version) not found" >&2; return 2; }
  lab_kernel_check "$LAB_KERNEL" "$version"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case ${1:-} in
    ensure)
      shift
      [ $# -ge 1 ] || { echo "usage: lab_kernel.sh ensure VERSION..." >&2; exit 2; }
      for v in "$@"; do
        lab_kernel_find "$v"
        echo "lab kernel $v: $LAB_KERNEL"
      done ;;
    path)
      [ $# -ge 2 ] || { echo "usage: lab_kernel.sh path VERSION [--no-build]" >&2; exit 2; }
      lab_kernel_find "$2" "${3:-}"
      echo "$LAB_KERNEL" ;;
    *) echo "usage: lab_kernel.sh ensure VERSION... | path VERSION [--no-build]" >&2; exit 2 ;;
  esac
fi
