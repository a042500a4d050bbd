# Side by side with libvirt's own sched_core (run_lab.sh --root9p). The same
# three domains (sb-a1 and sb-a2 of tenant acme, sb-g1 of tenant globex; TCG,
# paused) under:
#  (a) libvirt sched_core = "none", cs-agent running;
#  (b) libvirt sched_core = "emulator", no cs-agent;
#  (c) libvirt sched_core = "emulator", cs-agent started on (b)'s domains.
# acme's domains are tagged at level tenant, globex's at level vm. The
# cookie layout of each case is printed as a table, with a sentence per
# case. In (c) cs-agent must put acme's two domains on one cookie and keep
# sb-g1 apart, without a fight with libvirt: the cookies are sampled every
# ~100 ms for 30 s and any change fails the test.
. "$LAB_GUEST/lib.sh"
. "$LAB_GUEST/libvirt.sh"
set -u
trap 'lab_keep_logs; lab_libvirtd_keep_logs' EXIT
lab_check_topology

domains="sb-a1 sb-a2 sb-g1"
lab_domain_define sb-a1 00000000-0000-4000-8000-00000000d001 2
lab_domain_define sb-a2 00000000-0000-4000-8000-00000000d002 2
lab_domain_define sb-g1 00000000-0000-4000-8000-00000000d003 2

start_domains() {
  local d
  for d in $domains; do lab_domain_start "$d" --paused; done
}
destroy_domains() {
  local d
  for d in $domains; do lab_domain_destroy "$d"; done
}
# cookie_of CASE DOMAIN: the domain's cookie as recorded for CASE.
cookie_of() { eval "echo \${cookie_$1_$(echo "$2" | tr - _)}"; }

# record CASE: checks that every thread of each domain holds one cookie,
# keeps it as cookie_CASE_DOMAIN and adds a row to the table: per domain the
# cookie and how many threads hold it, or each thread's when they differ.
record() {
  local case=$1 d cookies n row=""
  for d in $domains; do
    lab_domain_cookies "$d" >/tmp/cookies-$case-$d.txt || lab_fail "($case) cannot read $d's cookies"
    cp /tmp/cookies-$case-$d.txt "$LAB_OUT/"
    cookies=$(awk '{print $3}' /tmp/cookies-$case-$d.txt | sort -u)
    n=$(wc -l </tmp/cookies-$case-$d.txt)
    if [ "$(echo "$cookies" | wc -l)" = 1 ]; then
      row="$row | $(printf '%-18s' "$cookies ($n/$n)")"
    else
      row="$row | $(lab_domain_thread_summary "$d")"
      cookies=mixed
    fi
    eval "cookie_${case}_$(echo "$d" | tr - _)=\$cookies"
  done
  eval "row_$case=\$row"
}

# layout CASE: "N cookies for 3 domains" and whether acme shares one.
distinct() { printf '%s\n' "$@" | sort -u | grep -vc '^0$'; }

csctl_tags() {
  csctl tag sb-a1 --tenant acme --isolation tenant >/dev/null || lab_fail "csctl tag sb-a1"
  csctl tag sb-a2 --tenant acme --isolation tenant >/dev/null || lab_fail "csctl tag sb-a2"
  csctl tag sb-g1 --tenant globex --isolation vm >/dev/null || lab_fail "csctl tag sb-g1"
}
wait_enforced_all() {
  local d
  for d in $domains; do lab_wait_enforced_secs "$d" 120; done
}

# --- (a) sched_core = "none", cs-agent ---------------------------------------
lab_log "(a) libvirt sched_core=none, cs-agent"
start_domains
for d in $domains; do
  [ "$(lab_domain_one_cookie "$d")" = 0 ] || lab_fail "(a) $d has a cookie before cs-agent runs"
done
lab_start_csd
csctl_tags
lab_start_agent_libvirt
lab_wait_host_secs 120
wait_enforced_all
record a
a1=$(cookie_of a sb-a1); a2=$(cookie_of a sb-a2); g1=$(cookie_of a sb-g1)
[ "$a1" != mixed ] && [ "$a2" != mixed ] && [ "$g1" != mixed ] || lab_fail "(a) a domain's threads hold different cookies"
[ "$a1" != 0 ] && [ "$a1" = "$a2" ] && [ "$g1" != 0 ] && [ "$g1" != "$a1" ] ||
  lab_fail "(a) layout sb-a1 $a1, sb-a2 $a2, sb-g1 $g1: expected acme on one cookie, globex on another"
lab_stop_agent
destroy_domains

# --- (b) sched_core = "emulator", no cs-agent ------------------------------
lab_log "(b) libvirt sched_core=emulator, no cs-agent"
lab_libvirtd_restart emulator
start_domains
record b
a1=$(cookie_of b sb-a1); a2=$(cookie_of b sb-a2); g1=$(cookie_of b sb-g1)
[ "$a1" != mixed ] && [ "$a2" != mixed ] && [ "$g1" != mixed ] ||
  lab_fail "(b) libvirt's emulator mode left a domain's threads with different cookies"
[ "$(distinct "$a1" "$a2" "$g1")" = 3 ] ||
  lab_fail "(b) expected 3 cookies from libvirt, got sb-a1 $a1, sb-a2 $a2, sb-g1 $g1"
libvirtd_cookies=$(lab_cookies_of "$(cat "$LAB_LIBVIRTD_PIDFILE")" | tr '\n' ' ')
[ "$libvirtd_cookies" = "0 " ] || lab_fail "(b) libvirtd's own threads hold cookies: $libvirtd_cookies"

# --- (c) sched_core = "emulator", cs-agent ----------------------------------
lab_log "(c) libvirt sched_core=emulator, cs-agent started on the running domains"
t0=$(lab_ms_now)
lab_start_agent_libvirt
lab_wait_host_secs 120
wait_enforced_all
converge() {
  local a1 a2 g1
  a1=$(lab_domain_cookie_set sb-a1); a2=$(lab_domain_cookie_set sb-a2); g1=$(lab_domain_cookie_set sb-g1)
  case "$a1$a2$g1" in *,*) return 1 ;; esac
  [ -n "$a1" ] && [ "$a1" != 0 ] && [ "$a1" = "$a2" ] && [ -n "$g1" ] && [ "$g1" != 0 ] && [ "$g1" != "$a1" ]
}
lab_wait_secs 60 converge || lab_fail "(c) acme's domains are not on one cookie: $(for d in $domains; do echo "$d: $(lab_domain_thread_summary "$d")"; done)"
converge_ms=$(( $(lab_ms_now) - t0 ))
record c
a1=$(cookie_of c sb-a1); a2=$(cookie_of c sb-a2); g1=$(cookie_of c sb-g1)
[ "$a1" != mixed ] && [ "$a2" != mixed ] && [ "$g1" != mixed ] || lab_fail "(c) a domain's threads hold different cookies"
[ "$a1" != 0 ] && [ "$a1" = "$a2" ] && [ "$g1" != 0 ] && [ "$g1" != "$a1" ] ||
  lab_fail "(c) layout sb-a1 $a1, sb-a2 $a2, sb-g1 $g1: expected acme on one cookie, globex on another"
adopted="" moved=""
for d in $domains; do
  if [ "$(cookie_of c "$d")" = "$(cookie_of b "$d")" ]; then
    adopted="${adopted:+$adopted, }$d"
  else
    moved="${moved:+$moved, }$d"
  fi
done

# No fight: 30 s of samples, every 100 ms, of every thread's cookie (by the
# lab's reader, in one process).
passes_before=$(grep -c 'reconcile pass:' /tmp/agent.log)
pids=$(for d in $domains; do lab_domain_pid "$d"; done | tr '\n' ' ')
lab_cookies --watch 100 30 $pids >/tmp/flap.txt 2>&1
cp /tmp/flap.txt "$LAB_OUT/"
summary=$(grep "^samples" /tmp/flap.txt)
samples=$(echo "$summary" | awk '$1 == "samples" {print $2}')
changes=$(echo "$summary" | awk '$1 == "samples" {print $4}')
[ -n "$samples" ] && [ -n "$changes" ] || lab_fail "(c) lab_cookies --watch: $(cat /tmp/flap.txt)"
first_change=$(grep -m1 '^change' /tmp/flap.txt)
[ "$samples" -ge 200 ] || lab_log "(c) only $samples samples in 30 s (the guest is slow)"
passes_during=$(( $(grep -c 'reconcile pass:' /tmp/agent.log) - passes_before ))
[ $changes = 0 ] || lab_fail "(c) cookies changed $changes times in 30 s ($samples samples): first: $first_change"
[ $passes_during = 0 ] || lab_fail "(c) the agent wrote cookies in $passes_during passes during the 30 s: $(lab_last_reconcile)"
agent_cookies=$(lab_cookies_of "$AGENT_PID" | tr '\n' ' ')
[ "$agent_cookies" = "0 " ] || lab_fail "(c) the agent's own threads hold cookies: $agent_cookies"

# --- the table ------------------------------------------------------------
header=$(printf '%-34s | %-18s | %-18s | %-18s' "case" "sb-a1 (acme)" "sb-a2 (acme)" "sb-g1 (globex)")
{
  echo "side-by-side cookie layout (cookie hash (threads holding it/threads); 0 = none):"
  echo "  (compare hashes within a row: across rows one may repeat, as the kernel hashes a cookie's address and reuses it once the cookie is gone)"
  echo "  $header"
  echo "  $(printf '%-34s' "(a) sched_core=none + cs-agent")$row_a"
  echo "  $(printf '%-34s' "(b) sched_core=emulator, no agent")$row_b"
  echo "  $(printf '%-34s' "(c) sched_core=emulator + cs-agent")$row_c"
} | tee -a "$LAB_RESULTS"
lab_result "(a)" "libvirt sets no cookie; cs-agent put acme's two domains on one cookie ($(cookie_of a sb-a1)) and globex's on another ($(cookie_of a sb-g1)): 3 domains, 2 cookies, every QEMU thread tagged."
lab_result "(b)" "libvirt gives every QEMU process a cookie of its own before it runs: 3 domains, 3 cookies, all threads of a domain on its cookie; acme's two domains may never run together on one core, and nothing groups, reports or verifies."
lab_result "(c)" "cs-agent kept libvirt's cookies of ${adopted:-no domain} as they were (adopted, no write) and moved ${moved:-no domain} onto its trust group's cookie: 3 domains, 2 cookies, converged ${converge_ms} ms after the agent started; ${samples} samples over 30 s (every 100 ms), ${changes} changes, ${passes_during} agent passes with writes (no flapping)."

destroy_domains
lab_stop_agent
