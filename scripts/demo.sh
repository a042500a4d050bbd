#!/usr/bin/env bash
# The main job: builds cosched, starts csd on its embedded store and a local
# cs-agent, and shows `csctl tag vm-123` and `csctl get vm-123`.
# Installs what it needs first. Everything it writes stays under out/demo.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
. scripts/build-env.sh
cosched_configure build >/dev/null
cmake --build build -j"$(nproc)" --target csd cs-agent csctl lab_tools

demo=out/demo
rm -rf "$demo"
mkdir -p "$demo"
# The default port, or the next free one when something already listens.
port=7443
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
# csctl talks to csd on its Unix socket, where csd knows who calls: the
# user running the demo is admin there (root always is). Loopback TCP gives
# only viewer; the local agent acts for its host over it because this
# csd.yaml says so (plaintext_agents). A socket's path must be short.
sock_dir=$(mktemp -d /tmp/cosched-demo.XXXXXX)
chmod 0755 "$sock_dir"
printf 'local_socket: {path: %s/csd.sock}\nroles:\n  - role: admin\n    unix_users: ["%s"]\nplaintext_agents: true\naudit: {file: %s/audit.jsonl}\n' \
  "$sock_dir" "$(id -u)" "$demo" >"$demo/csd.yaml"
export CSCTL_SERVER=unix:$sock_dir/csd.sock
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$sock_dir"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

step "starting csd on 127.0.0.1:$port and $CSCTL_SERVER (SQLite store in $demo/csd)"
build/server/csd --config "$demo/csd.yaml" --listen "127.0.0.1:$port" --data-dir "$demo/csd" \
  2>"$demo/csd.log" &
pids+=($!)
step "starting cs-agent for host $(hostname) (state in $demo/agent)"
build/agent/cs-agent --server "127.0.0.1:$port" --host-id "$(hostname)" \
  --state-dir "$demo/agent" 2>"$demo/agent.log" &
pids+=($!)

for _ in $(seq 100); do
  build/cli/csctl hosts ls >/dev/null 2>&1 && [ -n "$(build/cli/csctl hosts ls -o json | grep host_id)" ] && break
  sleep 0.1
done

step "tag a VM: nothing but its id"
run build/cli/csctl tag vm-123
step "read it back"
run build/cli/csctl get vm-123
step "the same for programs"
run build/cli/csctl get vm-123 -o json
step "hosts known to csd"
run build/cli/csctl hosts ls
step "bad input is refused with the rule"
run build/cli/csctl tag 'bad id!' || true
run build/cli/csctl get vm-nope || true
printf '\nLogs: %s/csd.log, %s/agent.log\n' "$demo" "$demo"
cleanup
pids=()

step "can this host do core scheduling?"
if run build/agent/cs-agent --probe; then
  echo "Yes: the agent above tags VMs for real. Tag a running VM with csctl tag <its libvirt name>."
  exit 0
fi
step "No. The same stack in the lab: a kernel with core scheduling under QEMU (2 cores x 2 siblings)"
echo "(boots the lab kernel in software emulation, about a minute; on a machine without one it is built first, once: tests/lab/kernel, 6 to 11 minutes)"
lab_out=$PWD/$demo/lab
tests/lab/run_lab.sh demo --out "$lab_out" \
  build/tests/lab/fake_qemu/qemu-system-x86_64 build/tests/lab/lab_cookies \
  build/tests/lab/lab_cookie_set build/tests/lab/lab_sibling_share build/tests/lab/lab_tag_gap \
  build/server/csd build/agent/cs-agent build/cli/csctl >"$demo/lab.log" 2>&1 || {
    tail -40 "$demo/lab.log"; echo "the lab run failed: $lab_out"; exit 1; }
tr -d '\r' <"$lab_out/console.log" | grep -E '^(==|    |\(| \S)' | grep -v '^\[' || true
printf '\nLab output: %s\n' "$lab_out"
