#!/usr/bin/env bash
# Runs every test of cosched: unit, integration, libvirt and the lab (a
# core-scheduling kernel under QEMU), then the fuzzers
# (docs/fuzzing.md). Installs what it needs first. Arguments go to the first ctest.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
# Lab and libvirt tests are RUN_SERIAL (they need the whole machine).
stamp=$(mktemp)
status=0
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@") || status=$?
# What the lab scenarios of this run measured (ctest shows a passing test's
# output only with -V): foreign shares before and after tagging, tagging
# gaps, reconcile times, the libvirt side-by-side table.
find build/tests/lab/out -name results.txt -newer "$stamp" 2>/dev/null | sort |
  while read -r figures; do
    echo "--- lab.$(basename "$(dirname "$figures")") figures ---"
    cat "$figures"
  done
rm -f "$stamp"
[ "$status" = 0 ] || exit "$status"

# The libFuzzer targets, in a build of their own (clang, ASan, UBSan): each
# fuzzes ~30 s from its seeds and replays its regressions, two at a time.
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 -DCOSCHED_FUZZ=ON
cmake --build build-fuzz -j"$(nproc)" --target cosched_fuzzers
(cd build-fuzz && ctest --output-on-failure -j2 -L fuzz)
