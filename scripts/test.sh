#!/usr/bin/env bash
# Runs every test of cosched: unit, integration, libvirt and the lab (a
# core-scheduling kernel under QEMU). Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
cd build
# Lab and libvirt tests are RUN_SERIAL (they need the whole machine).
ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@"
