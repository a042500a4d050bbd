# Blind read-back on 6.1 (booted without random.trust_cpu): until the
# kernel's pointer-hash key is ready, PR_SCHED_CORE_GET reads 0 for tasks
# that do hold a cookie (__ptr_to_hashval fails and GET writes 0). The lab
# shows that window with its own tools first; then the agent must see it (a
# cookie it just created reads 0), report its VMs' threads unverified and the
# VMs pending, not enforced, and write each thread once: over several
# reconcile passes its prctl writes stay where they were, where an agent
# taking the zeros for untagged threads would make a new cookie and rewrite
# every thread each pass. Then the lab makes the key ready (a read of
# /dev/random: the kernel's jitter entropy completes its random pool, and
# the key is filled a moment later): read-back must work again, every
# thread counted tagged, each VM on one cookie of its own (the one given it
# while blind) with no write at all.
#
# The agent starts with csd away (as one that ran before), so its VMs fail
# closed on cookies of their own: csd's store opens /dev/urandom (SQLite's randomness), and on
# 6.1 that read initialises the random pool and ends the window. The agent
# runs with lab_insecure_random.so preloaded for the same reason: its first
# RPC seeds gRPC's backoff jitter with a blocking getrandom, which ended the
# window a second or two after it started (measured: its first pass blind,
# the next one not). The library changes who ends the window, not how
# cookies are set or read. csd starts once the key is ready, and the VMs
# tagged then must be enforced.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT
case $(uname -r) in
  6.1.*) ;;
  *) lab_fail "needs the 6.1 lab kernel, not $(uname -r)" ;;
esac
grep -q 'random.trust_cpu=on' /proc/cmdline &&
  lab_fail "booted with random.trust_cpu=on: the pointer-hash key is ready at once"
crng() { dmesg | sed -n 's/.*\[ *\([0-9.]*\)\] random: crng init done.*/\1/p' | head -1; }
[ -z "$(crng)" ] || lab_fail "the kernel's random pool is already initialised (crng init done at $(crng) s)"

# The kernel's side, read with the lab's own tools: a task given a fresh
# cookie reads back 0.
sleep 600 &
probe=$!
lab_cookie_set create "$probe" thread || lab_fail "lab_cookie_set create on the probe task"
[ "$(lab_cookies_of "$probe")" = 0 ] ||
  lab_fail "a cookie just created reads $(lab_cookies_of "$probe"): the pointer-hash key is ready, no blind window"
lab_result "kernel" "$(uname -r) without random.trust_cpu: a cookie lab_cookie_set just created on pid $probe reads 0"

# Agent metrics, scraped from /metrics.
scrape() { wget -q -O /tmp/metrics.txt http://127.0.0.1:9464/metrics; }
metric() { awk -v k="$1" '$1 == k {v = $2} END {printf "%d", v}' /tmp/metrics.txt; }
threads() { metric "cosched_agent_threads{status=\"$1\"}"; }
passes() { awk '$1 ~ /^cosched_agent_reconcile_passes_total\{/ {s += $2} END {printf "%d", s}' /tmp/metrics.txt; }
writes() { metric cosched_agent_prctl_writes_total; }
blind() { metric cosched_agent_cookie_readback_blind; }
figures() { echo "blind $(blind), threads found $(threads found) tagged $(threads tagged) unverified $(threads unverified) wrong $(threads wrong), $(writes) prctl writes in $(passes) passes"; }

export LD_PRELOAD=/bin/lab_insecure_random.so
# vm-1: main, 2 vCPUs, IO, vhost; vm-2: main, 1 vCPU, IO, vhost.
lab_start_vm vm-1 -smp 2 --duty 10
vm1=$LAB_PID
lab_start_vm vm-2 -smp 1 --duty 10
vm2=$LAB_PID
found=9
# An agent that ran here before: csd's last answer (enforce) is kept in its
# state dir, so with csd away it fails closed at once. A first start would
# make no cookie for 30 s while it waits for csd's first answer
# (docs/operating.md, "First deployment"), and the window may close meanwhile.
mkdir -p -m 700 /tmp/agent
printf '\010\001' >/tmp/agent/enablement.pb  # HostEnablement{state: STATE_ENFORCE}
# A rescan every 2 s: passes with nothing new to do, where a blind agent
# that believed the zeros would rewrite.
LAB_AGENT_CONFIG="rescan_interval_ms: 2000" lab_start_agent

# Blind: every thread given its VM's fail-closed cookie once, unverified.
blind_settled() {
  scrape && [ "$(blind)" = 1 ] && [ "$(threads found)" = $found ] && [ "$(threads unverified)" = $found ]
}
lab_wait_for 30 blind_settled || lab_fail "the agent does not report its $found threads unverified while blind: $(figures)"
lab_result "agent blind" "$(figures)"
[ "$(threads tagged)" = 0 ] && [ "$(threads wrong)" = 0 ] || lab_fail "while blind the agent counts threads tagged or wrong: $(figures)"
[ "$(metric 'cosched_agent_vms{state="pending"}')" = 2 ] ||
  lab_fail "the 2 VMs are not pending while blind: $(grep '^cosched_agent_vms{' /tmp/metrics.txt | tr '\n' ' ')"
grep -q 'a cookie just created on thread .* reads back as 0' /tmp/agent.log || lab_fail "the agent logged no blind read-back"
# The kernel still reads 0 for the threads the agent gave cookies.
for pid in "$vm1" "$vm2"; do
  [ "$(lab_cookies_of "$pid")" = 0 ] || lab_fail "threads of $pid read $(lab_cookies_of "$pid" | tr '\n' ' ') while blind"
done
[ "$(lab_cookies_of "$probe")" = 0 ] || lab_fail "the window closed during the blind checks"

# Bounded: no writes over 3 more passes (6 s at the 2 s rescan). The
# figures are taken once a further pass has ended: a pass's metrics are set
# one after another (the pass count and thread gauges before the write
# counter), so a scrape during the first pass's update can see its threads
# unverified and none of its writes yet (seen once in CI: 0 writes, then 11).
settled_passes=$(passes)
next_pass() { scrape && [ "$(passes)" -gt "$settled_passes" ]; }
lab_wait_for 30 next_pass || lab_fail "no reconcile pass after $settled_passes: $(figures)"
writes1=$(writes) passes1=$(passes)
# Each VM: its cookie created (1), taken by a courier (1), given to every
# other thread (threads - 1).
[ "$writes1" -le $((found + 2)) ] ||
  lab_fail "$writes1 prctl writes to tag 2 VMs of $found threads: more than each thread once"
more_passes() { scrape && [ "$(passes)" -ge $((passes1 + 3)) ]; }
lab_wait_for 30 more_passes || lab_fail "no 3 reconcile passes after $passes1: $(figures)"
[ "$(writes)" = "$writes1" ] ||
  lab_fail "the agent rewrote cookies while blind: $writes1 prctl writes after $passes1 passes, $(writes) after $(passes)"
[ "$(blind)" = 1 ] && [ "$(threads unverified)" = $found ] || lab_fail "no longer blind and unverified: $(figures)"
[ "$(lab_cookies_of "$probe")" = 0 ] || lab_fail "the window closed during the bounded-writes check"
lab_result "bounded writes" "$writes1 prctl writes after $passes1 passes, $(writes) after $(passes) passes"

# The key made ready: a blocking read of /dev/random runs the kernel's
# jitter entropy until its pool is initialised; the key follows.
dd if=/dev/random of=/dev/null bs=1 count=1 2>/dev/null || lab_fail "cannot read /dev/random"
probe_reads() { [ "$(lab_cookies_of "$probe")" != 0 ]; }
lab_wait_for 20 probe_reads || lab_fail "cookies still read 0 20 s after the random pool was initialised"
ready=$(cut -d' ' -f1 /proc/uptime)
lab_result "key ready" "crng init done at $(crng) s, the probe's cookie $(lab_cookies_of "$probe") read back at $ready s"
writes2=$(writes)
read_back() { scrape && [ "$(blind)" = 0 ] && [ "$(threads tagged)" = $found ] && [ "$(threads unverified)" = 0 ]; }
lab_wait_for 20 read_back || lab_fail "the agent does not read back its $found threads tagged once the key is ready: $(figures)"
lab_result "agent reads back" "$(figures), at $(cut -d' ' -f1 /proc/uptime) s"
[ "$(metric 'cosched_agent_vms{state="fail-closed"}')" = 2 ] ||
  lab_fail "the 2 VMs are not fail-closed once read back: $(grep '^cosched_agent_vms{' /tmp/metrics.txt | tr '\n' ' ')"
c1=$(lab_one_cookie "$vm1") || exit 1
c2=$(lab_one_cookie "$vm2") || exit 1
[ "$c1" != "$c2" ] || lab_fail "vm-1 and vm-2 share cookie $c1"
[ "$(writes)" = "$writes2" ] ||
  lab_fail "the agent rewrote cookies given while blind: $writes2 prctl writes at the key, $(writes) after read-back"
lab_result "tagged" "vm-1 $c1, vm-2 $c2 (the cookies given while blind): $(writes) prctl writes in all, none since the key"

# csd, and the VMs tagged: ordinary enforcement on cookies read back.
lab_start_csd
lab_wait_host
csctl tag vm-1 >/dev/null || lab_fail "tag vm-1"
csctl tag vm-2 >/dev/null || lab_fail "tag vm-2"
lab_wait_enforced vm-1
lab_wait_enforced vm-2
[ "$(lab_one_cookie "$vm1")" != "$(lab_one_cookie "$vm2")" ] || lab_fail "vm-1 and vm-2 share a cookie once tagged"
scrape || lab_fail "cannot scrape the agent's /metrics"
lab_result "enforced" "vm-1 $(lab_one_cookie "$vm1"), vm-2 $(lab_one_cookie "$vm2") after csctl tag: $(figures)"
kill "$probe"
lab_stop_vm "$vm1"
lab_stop_vm "$vm2"
