#!/usr/bin/env bash
# Keeps a release's on-disk formats and proto descriptors for the
# compatibility tests (tests/compat/README.md, docs/compatibility.md): run
# at each release, from its tag, and commit the folder it writes.
#
#   scripts/compat-fixtures.sh NAME     writes tests/compat/fixtures/NAME/
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: scripts/compat-fixtures.sh NAME (the release, e.g. 0.2.0)" >&2; exit 2; }
out=tests/compat/fixtures/$1
[ ! -e "$out" ] || { echo "compat-fixtures: $out exists; a release's fixtures never change" >&2; exit 2; }
. scripts/build-env.sh
[ -f build/CMakeCache.txt ] || cosched_configure build
cmake --build build -j"$(nproc)" --target make_compat_fixtures
build/tests/compat/make_compat_fixtures "$out"
# Every file of the API and of the store's records, with what they import.
(cd proto && protoc --include_imports --descriptor_set_out="../$out/cosched.protoset" \
  cosched/v1/*.proto cosched/store/*.proto)
# The store's WAL and lock files are not part of the format.
rm -f "$out"/csd-sqlite/*-wal "$out"/csd-sqlite/*-shm
ls -lR "$out"
