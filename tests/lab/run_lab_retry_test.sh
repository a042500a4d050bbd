#!/usr/bin/env bash
# run_lab.sh's retry rule, with a stand-in for QEMU (LAB_QEMU): a guest oops,
# or with --root9p a libvirtd that did not start, is reported and the run is
# retried once; a second one in a row fails; a failing verdict is never
# retried. The stand-in prints a console and writes what the guest's init
# would into the shared folder (-virtfs local,path=DIR,mount_tag=host0),
# following a plan of one outcome per boot.
#
#   run_lab_retry_test.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:?usage: run_lab_retry_test.sh BUILD_DIR}" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/cosched-lab-retry.XXXXXX")
trap 'rm -rf "$work"' EXIT
touch "$work/bzImage"  # never booted, so never checked either
export LAB_KERNEL_CHECK=0 COSCHED_LAB_KERNEL=$work/bzImage LAB_QEMU=$work/qemu FAKE_PLAN=$work/plan FAKE_BOOTS=$work/boots

cat >"$work/qemu" <<'EOF'
#!/usr/bin/env bash
dir=""
for a in "$@"; do
  case $a in local,path=*,mount_tag=host0,*) dir=${a#local,path=}; dir=${dir%%,mount_tag=host0*} ;; esac
done
[ -d "$dir" ] || { echo "fake qemu: no host0 folder in: $*"; exit 1; }
boot=$(($(cat "$FAKE_BOOTS" 2>/dev/null || echo 0) + 1))
echo "$boot" >"$FAKE_BOOTS"
case $(sed -n "${boot}p" "$FAKE_PLAN") in
  pass) echo "lab: scenario done: PASS"; echo PASS >"$dir/verdict"; echo "boot: $boot" >"$dir/results.txt" ;;
  fail) echo "lab: scenario done: FAIL: planned"; echo "FAIL: planned" >"$dir/verdict" ;;
  oops) echo "[    2.5] Oops: int3: 0000 [#1] SMP"; echo "[    2.5] Kernel panic - not syncing: Fatal exception" ;;
  libvirtd) echo "libvirtd exited at start" >"$dir/libvirtd-failed" ;;
  *) echo "fake qemu: no plan for boot $boot"; exit 1 ;;
esac
EOF
chmod +x "$work/qemu"

failures=0
# expect NAME PLAN WANT_STATUS WANT_BOOTS WANT_TEXT [run_lab.sh ARGS...]
expect() {
  local name=$1 plan=$2 want_status=$3 want_boots=$4 want_text=$5 status=0; shift 5
  tr ',' '\n' <<<"$plan" >"$FAKE_PLAN"
  rm -f "$FAKE_BOOTS"
  "$here/run_lab.sh" "$@" --timeout 30 --out "$work/out-$name" >"$work/$name.log" 2>&1 || status=$?
  local boots
  boots=$(cat "$FAKE_BOOTS" 2>/dev/null || echo 0)
  if [ "$status" != "$want_status" ] || [ "$boots" != "$want_boots" ] || ! grep -q -- "$want_text" "$work/$name.log"; then
    echo "FAIL $name (plan $plan): exit $status (want $want_status), $boots boots (want $want_boots), want output '$want_text':"
    sed 's/^/  | /' "$work/$name.log"
    failures=$((failures + 1))
  else
    echo "ok   $name (plan $plan): exit $status after $boots boot(s)"
  fi
}

expect pass pass 0 1 'lab.smoke PASS' smoke
expect oops_then_pass oops,pass 0 2 'guest kernel oops (emulator code-patching race), retrying once' smoke
grep -q 'boot: 2' "$work/oops_then_pass.log" || { echo "FAIL: the retry's figures were not shown"; failures=$((failures + 1)); }
[ -d "$work/out-oops_then_pass.oops" ] || { echo "FAIL: the oopsed attempt was not kept"; failures=$((failures + 1)); }
expect oops_twice oops,oops 1 2 'guest kernel oops again on the retry: failing' smoke
expect fail_not_retried fail,pass 1 1 'lab.smoke FAIL: planned' smoke
expect libvirtd_then_pass libvirtd,pass 0 2 'libvirtd did not start in the guest (libvirtd exited at start), retrying once' \
  --root9p libvirt_discovery --build "$build"
expect libvirtd_twice libvirtd,libvirtd 1 2 'libvirtd failed again on the retry: failing' \
  --root9p libvirt_discovery --build "$build"
expect oops_root9p oops,pass 0 2 'retrying once' --root9p libvirt_discovery --build "$build"

[ $failures = 0 ] || { echo "$failures case(s) failed"; exit 1; }
echo "all cases passed"
