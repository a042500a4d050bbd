#!/usr/bin/env bash
# Runs one libFuzzer target for ctest (fuzz/CMakeLists.txt).
#   run_fuzzer.sh fuzz   BINARY SEEDS WORKDIR SECONDS
#     fuzzes for SECONDS starting from a fresh copy of SEEDS in WORKDIR (the
#     committed seeds stay untouched); a crashing input is left in
#     WORKDIR/artifacts/.
#   run_fuzzer.sh replay BINARY DIR...
#     runs every file of the DIRs once (seeds and regressions).
set -euo pipefail

# Found bugs must fail the test: abort (no recovery) on any sanitizer report.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

mode=$1
binary=$2
shift 2
case "$mode" in
  fuzz)
    seeds=$1 work=$2 seconds=$3
    rm -rf "$work"
    mkdir -p "$work/corpus" "$work/artifacts"
    cp -r "$seeds"/. "$work/corpus/"
    # -timeout: one input may take at most 10 s (a hang is a bug);
    # -rss_limit_mb: so does a parser that allocates without bound.
    if ! "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus"; then
      echo "run_fuzzer: $(basename "$binary") failed; input(s) in $work/artifacts:" >&2
      ls -l "$work/artifacts" >&2
      echo "fix the bug, then keep the input in fuzz/regressions/$(basename "$binary")/" >&2
      exit 1
    fi
    ;;
  replay)
    files=()
    for dir in "$@"; do
      [ -d "$dir" ] || continue
      while IFS= read -r -d '' f; do files+=("$f"); done \
        < <(find "$dir" -type f ! -name README.md -print0 | sort -z)
    done
    ((${#files[@]})) || { echo "run_fuzzer: no inputs in $*" >&2; exit 1; }
    # Plain inputs: each is run once, no mutation.
    exec "$binary" -timeout=10 -rss_limit_mb=2048 "${files[@]}"
    ;;
  *)
    echo "usage: $0 fuzz|replay ..." >&2
    exit 2
    ;;
esac
