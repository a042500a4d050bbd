#!/usr/bin/env bash
# Installs every Debian 12 package cosched needs to build, test and run its lab.
# Idempotent: packages already present are skipped by apt.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake pkg-config git
  # one compile for build/ and the packages (scripts/build-env.sh)
  ccache
  # RPC and serialisation
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  # support libraries
  libssl-dev libabsl-dev libgoogle-glog-dev libgflags-dev libsqlite3-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  prometheus-cpp-dev libvirt-dev libxml2-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # the test binaries link with lld (tests/CMakeLists.txt)
  lld
  # fuzzing (fuzz/): libFuzzer, ASan and UBSan come with clang's runtime
  clang-14 libclang-rt-14-dev
  # lab and integration tests: a core-scheduling kernel under emulation, real libvirt
  qemu-system-x86 busybox-static libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
  cpio gzip openssl procps iproute2
  # the etcd store backend (store/etcd_store.h): its tests start their own etcd members
  etcd-server
  # docs/install.md's etcd steps (etcdctl), run by tests/install/install_guide_test.py
  etcd-client
  # the Python client (clients/python): gRPC and protobuf runtimes, its tests
  python3-grpcio python3-protobuf python3-pytest
  # tests/common/config_reference_test.py reads the shipped YAML files
  python3-yaml
  # the Debian packages (scripts/package.sh, debian/) and their checks
  debhelper dpkg-dev lintian
  # promtool checks and unit-tests the Prometheus rules (deploy/prometheus, tests/prometheus),
  # and the server loads them and the dashboard against real daemons (prometheus_live)
  prometheus
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
