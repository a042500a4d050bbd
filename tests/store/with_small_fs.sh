#!/usr/bin/env bash
# Runs COMMAND with two tiny file systems of its own, in a private mount
# namespace: $COSCHED_TEST_SMALL_FS (400 KiB, writable) and
# $COSCHED_TEST_READONLY_FS (read-only). Needs root (CI runs as root).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "with_small_fs.sh: needs root to mount file systems" >&2; exit 1; }
exec unshare --mount --propagation private bash -c '
  set -e
  base=$(mktemp -d /tmp/cosched-smallfs.XXXXXX)
  mkdir -p "$base/small" "$base/ro"
  mount -t tmpfs -o size=400k tmpfs "$base/small"
  mount -t tmpfs -o size=64k tmpfs "$base/ro"
  mkdir -p "$base/ro/data"
  mount -o remount,ro "$base/ro"
  COSCHED_TEST_SMALL_FS="$base/small" COSCHED_TEST_READONLY_FS="$base/ro/data" "$@"
  status=$?
  umount "$base/small" "$base/ro"
  rmdir "$base/small" "$base/ro" "$base"
  exit $status
' with_small_fs "$@"
