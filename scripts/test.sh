#!/usr/bin/env bash
# Runs every test of cosched: unit, integration, libvirt, the Debian packages'
# build with lintian, and the lab (a core-scheduling kernel under QEMU), then
# the fuzzers (docs/fuzzing.md).
# Installs what it needs first. With arguments, runs only `ctest ARGS` in
# build/ (a label, a name: docs/lab.md), without the fuzzers.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
. scripts/build-env.sh
# Each phase's start, in minutes since this script began (CI's budget).
phase() { echo "test.sh: [$((SECONDS / 60))m$((SECONDS % 60))s] $*"; }
# The lab kernels (tests/lab/kernel): found and checked (one boot each), or
# built into a cache on a machine that has none, beside the project's build.
# Its lines start with "[lab kernel VERSION]".
tests/lab/kernel/lab_kernel.sh ensure 6.12 6.1 &
kernels=$!
phase "building (build/, Debian's flags: scripts/build-env.sh)"
cosched_configure build
cmake --build build -j"$(nproc)"
phase "built"
kernel_status=0
wait "$kernels" || kernel_status=$?
[ "$kernel_status" = 0 ] || { echo "test.sh: no usable lab kernel (above)"; exit 1; }

# What the lab scenarios of a ctest run measured (ctest shows a passing
# test's output only with -V): foreign shares before and after tagging,
# tagging gaps, reconcile times, the libvirt side-by-side table.
show_lab_figures() {  # STAMP: results written after it
  find build/tests/lab/out -name results.txt -newer "$1" 2>/dev/null | sort |
    while read -r figures; do
      echo "--- lab.$(basename "$(dirname "$figures")") figures ---"
      cat "$figures"
    done
}
run_ctest() { (cd build && ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@"); }

stamp=$(mktemp)
trap 'rm -f "$stamp"' EXIT
if [ $# -gt 0 ]; then
  status=0
  run_ctest "$@" || status=$?
  show_lab_figures "$stamp"
  exit "$status"
fi

# The libFuzzer targets need a build of their own (clang, ASan, UBSan). It
# runs at low priority beside the tests that are not the lab: those mostly
# wait (partition_test alone holds a partition for 150 s) and leave the CPUs
# idle. The lab waits for it: its RUN_SERIAL scenarios want the machine.
fuzz_log=$(mktemp)
(
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCOSCHED_FUZZ=ON -DCOSCHED_FUZZ_SECONDS=15 &&
    nice -n 10 cmake --build build-fuzz -j"$(nproc)" --target cosched_fuzzers
) >"$fuzz_log" 2>&1 &
fuzz_build=$!

# The Debian packages (scripts/package.sh: a package build without tests, then
# lintian), also at low priority beside them; lab.systemd_units installs them
# in a guest booted with systemd. Then the same tree again as a higher
# version (+lab1), which lab.systemd_upgrade upgrades them to with dpkg: its
# objects come from ccache but those that include the version, and it skips
# the -dbgsym packages and the checks its first set passed (--quick: 113 s
# against the first set's 178 s, at nice 10 on 2 busy cores).
package_log=$(mktemp)
(
  nice -n 10 ./scripts/package.sh &&
    COSCHED_VERSION_SUFFIX=+lab1 nice -n 10 ./scripts/package.sh --quick build-deb-upgrade
) >"$package_log" 2>&1 &
package_build=$!

failed=()
phase "tests outside the lab (ctest -LE 'lab|packages'), the fuzz build and the packages"
run_ctest -LE 'lab|packages' || failed+=("ctest -LE 'lab|packages'")
phase "tests outside the lab done"
fuzz_status=0
wait "$fuzz_build" || fuzz_status=$?
if [ "$fuzz_status" != 0 ]; then
  echo "--- the fuzz build failed (status $fuzz_status) ---"
  tail -n 60 "$fuzz_log"
  failed+=("fuzz build")
fi
rm -f "$fuzz_log"
package_status=0
wait "$package_build" || package_status=$?
if [ "$package_status" != 0 ]; then
  echo "--- the package build failed (status $package_status) ---"
  tail -n 60 "$package_log"
  failed+=("package build")
else
  echo "--- packages (scripts/package.sh) ---"
  grep -E '^(-rw|[EW]: |package\.sh:)' "$package_log" || true
fi
rm -f "$package_log"

# The lab, and docs/install.md followed on the packages (label packages).
phase "the lab and the install guide (ctest -L 'lab|packages')"
run_ctest -L 'lab|packages' || failed+=("ctest -L 'lab|packages'")
show_lab_figures "$stamp"

# Each fuzzer runs 15 s from its seeds (a smoke run: docs/fuzzing.md says
# how to fuzz for longer) and replays its regressions, two at a time.
if [ "$fuzz_status" = 0 ]; then
  phase "the fuzzers"
  (cd build-fuzz && ctest --output-on-failure -j2 -L fuzz) || failed+=("fuzzers")
fi

phase "done"
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: failed: ${failed[*]}"
  exit 1
fi
echo "test.sh: every test passed"
