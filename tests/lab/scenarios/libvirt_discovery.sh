# Discovery and tagging through libvirt (run_lab.sh --root9p): three real
# QEMU domains (TCG, paused, no disk, no network) of two tenants, started by
# libvirtd 9.0 in the guest. cs-agent finds them through libvirt's C API;
# what it must find (name, UUID, QEMU pid, vCPU thread ids, the other QEMU
# threads) is taken here from virsh, libvirt's status XML, QMP and /proc.
# After `csctl tag` every thread of each domain holds its group's cookie,
# read back by the lab's own reader (lab_cookies), not through the agent.
. "$LAB_GUEST/lib.sh"
. "$LAB_GUEST/libvirt.sh"
set -u
trap 'lab_keep_logs; lab_libvirtd_keep_logs' EXIT
lab_check_topology

# acme: lv-a1 and lv-a2 at level tenant (one trust group); globex: lv-g1 at
# level vm, tagged by its UUID (csd matches a VM by name or UUID, so this
# holds only if the agent reported the UUID it got from libvirt).
domains="lv-a1 lv-a2 lv-g1"
uuid_lv_a1=00000000-0000-4000-8000-00000000a001
uuid_lv_a2=00000000-0000-4000-8000-00000000a002
uuid_lv_g1=00000000-0000-4000-8000-00000000b001
uuid_of() { eval "echo \$uuid_$(echo "$1" | tr - _)"; }
for d in $domains; do
  lab_domain_define "$d" "$(uuid_of "$d")" 2
done
for d in $domains; do
  t0=$(lab_ms_now)
  lab_domain_start "$d" --paused
  lab_log "virsh start --paused $d: $(( $(lab_ms_now) - t0 )) ms"
done
virsh list --all

# What libvirt and /proc say about each domain.
for d in $domains; do
  pid=$(lab_domain_pid "$d")
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || lab_fail "$d: no QEMU pid in libvirt's status XML"
  [ "$(cat "/run/libvirt/qemu/$d.pid" 2>/dev/null)" = "$pid" ] || lab_fail "$d: pid file and status XML differ"
  [ "$(lab_domain_uuid "$d")" = "$(uuid_of "$d")" ] || lab_fail "$d: virsh domuuid $(lab_domain_uuid "$d")"
  vcpus=$(lab_domain_vcpu_tids "$d" | awk '{print $2}' | sort -n | tr '\n' ' ')
  [ "$(echo $vcpus | wc -w)" = 2 ] || lab_fail "$d: status XML lists vCPU threads '$vcpus', expected 2"
  # (not the "thread-id" of the CPU topology in "props")
  qmp=$(virsh qemu-monitor-command "$d" '{"execute":"query-cpus-fast"}' | sed 's/"props": *{[^}]*}//g' |
    grep -o '"thread-id": *[0-9]*' | grep -o '[0-9]*$' | sort -n | tr '\n' ' ')
  [ "$qmp" = "$vcpus" ] || lab_fail "$d: vCPU threads: status XML '$vcpus', QMP query-cpus-fast '$qmp'"
  for t in $vcpus; do
    [ -d "/proc/$pid/task/$t" ] || lab_fail "$d: vCPU thread $t is not a thread of QEMU pid $pid"
  done
  others=$(for t in /proc/$pid/task/*; do
    t=${t##*/}
    case " $vcpus " in *" $t "*) ;; *) echo "$t:$(cat "/proc/$pid/task/$t/comm")" ;; esac
  done | tr '\n' ' ')
  eval "pid_$(echo "$d" | tr - _)=$pid"
  lab_result "$d" "uuid $(uuid_of "$d"), QEMU pid $pid, vCPU tids ${vcpus% } (status XML = QMP), other threads ${others% }"
done

# The domains with metadata below are tagged from it (TagVM wins, so the
# csctl tags of lv-* hold either way).
LAB_CSD_CONFIG='tag_from_metadata: true'
lab_start_csd
lab_start_agent_libvirt
lab_wait_host_secs 120
grep -q 'finding VMs through libvirt at qemu:///system' /tmp/agent.log ||
  lab_fail "the agent does not use libvirt discovery: $(head -5 /tmp/agent.log)"
lab_wait_secs 30 grep -q 'libvirt: connected to qemu:///system' /tmp/agent.log ||
  lab_fail "the agent did not connect to libvirt"

lab_log "csctl tag"
t0=$(lab_ms_now)
csctl tag lv-a1 --tenant acme --isolation tenant || lab_fail "csctl tag lv-a1"
csctl tag lv-a2 --tenant acme --isolation tenant || lab_fail "csctl tag lv-a2"
csctl tag "$uuid_lv_g1" --tenant globex --isolation vm || lab_fail "csctl tag lv-g1 by UUID"
lab_wait_enforced_secs lv-a1 120
lab_wait_enforced_secs lv-a2 120
lab_wait_enforced_secs "$uuid_lv_g1" 120
lab_result "tag to enforced" "$(( $(lab_ms_now) - t0 )) ms for 3 domains (csctl tag .. csd shows all enforced)"
lab_result "reconcile" "$(lab_last_reconcile)"

# What the agent reported, against /proc.
for vm in lv-a1 lv-a2 "$uuid_lv_g1"; do
  json=$(csctl get "$vm" -o json)
  d=$vm
  [ "$vm" = "$uuid_lv_g1" ] && d=lv-g1
  pid=$(eval "echo \$pid_$(echo "$d" | tr - _)")
  threads=$(ls "/proc/$pid/task" | wc -l)
  found=$(echo "$json" | grep -o '"threads_found": *[0-9]*' | grep -o '[0-9]*$')
  tagged=$(echo "$json" | grep -o '"threads_tagged": *[0-9]*' | grep -o '[0-9]*$')
  echo "$json" | grep -q '"host_id": "lab"' || lab_fail "$vm: csd does not place it on host lab: $json"
  [ "$found" = "$threads" ] || lab_fail "$d: the agent found $found threads, /proc/$pid/task has $threads"
  lab_result "$d agent report" "threads found $found, tagged $tagged (/proc: $threads)"
done

# The lab's own reader: every thread of each domain holds its group's cookie.
for d in $domains; do
  lab_domain_cookies "$d" | sed "s/^/  $d: /"
done
ca1=$(lab_domain_one_cookie lv-a1) || exit 1
ca2=$(lab_domain_one_cookie lv-a2) || exit 1
cg1=$(lab_domain_one_cookie lv-g1) || exit 1
[ "$ca1" != 0 ] && [ "$cg1" != 0 ] || lab_fail "untagged domain: lv-a1 $ca1, lv-g1 $cg1"
[ "$ca1" = "$ca2" ] || lab_fail "acme's domains at level tenant differ: lv-a1 $ca1, lv-a2 $ca2"
[ "$ca1" != "$cg1" ] || lab_fail "acme and globex share cookie $ca1"
for d in $domains; do
  lab_result "$d cookies" "$(lab_domain_thread_summary "$d")"
done
agent_cookies=$(lab_cookies_of "$AGENT_PID" | tr '\n' ' ')
[ "$agent_cookies" = "0 " ] || lab_fail "the agent's own threads hold cookies: $agent_cookies"
libvirtd_cookies=$(lab_cookies_of "$(cat "$LAB_LIBVIRTD_PIDFILE")" | tr '\n' ' ')
[ "$libvirtd_cookies" = "0 " ] || lab_fail "libvirtd's threads hold cookies: $libvirtd_cookies"
lab_result "groups" "acme (lv-a1, lv-a2) $ca1, globex (lv-g1) $cg1; agent and libvirtd threads: none"

# Scope vcpus: the agent's vCPU threads are exactly those libvirt lists. Only
# they keep lv-g1's cookie; QEMU's other threads go back to none.
csctl tag "$uuid_lv_g1" --tenant globex --isolation vm --scope vcpus || lab_fail "csctl tag lv-g1 --scope vcpus"
g1_vcpus=$(lab_domain_vcpu_tids lv-g1 | awk '{print $2}' | sort -n | tr '\n' ' ')
vcpus_only_tagged() {
  lab_domain_cookies lv-g1 | awk -v v=" $g1_vcpus" -v c="$cg1" '
    { want = index(v, " " $2 " ") ? c : "0"; if ($3 != want) bad = 1; n++ } END { exit bad || n == 0 }'
}
lab_wait_secs 60 vcpus_only_tagged ||
  lab_fail "lv-g1 at scope vcpus: want cookie $cg1 on vCPU threads ${g1_vcpus% } only: $(lab_domain_cookies lv-g1 | tr '\n' ';')"
vcpus_reported() { csctl get "$uuid_lv_g1" -o json | grep -q '"threads_found": 2,'; }
lab_wait_secs 30 vcpus_reported ||
  lab_fail "lv-g1 at scope vcpus: the agent does not report its 2 vCPU threads: $(csctl get "$uuid_lv_g1" -o json | tr -d '\n')"
lab_result "lv-g1 scope vcpus" "cookie $cg1 on vCPU threads ${g1_vcpus% } (libvirt's), none on the others; the agent reports 2 threads"

for d in $domains; do lab_domain_destroy "$d"; done

# Tenancy from domain metadata alone (csd's tag_from_metadata), no csctl tag:
# md-1 and md-2 of one Nova project, whose policy's default level is tenant,
# md-3 of another project, and md-bad whose cosched metadata names an
# unknown level, which stays fail-closed on a cookie of its own.
nova_metadata() {
  printf '%s' "<metadata><nova:instance xmlns:nova='http://openstack.org/xmlns/libvirt/nova/1.1'>" \
    "<nova:flavor name='m1.tiny'/><nova:owner><nova:user uuid='0badc0de'>ops</nova:user>" \
    "<nova:project uuid='$1'>$2</nova:project></nova:owner></nova:instance></metadata>"
}
project1=0f1e2d3c4b5a49687766554433221100
project2=aa11bb22cc33dd44ee55ff6600778899
csctl policy set "$project1" --default tenant --allow vm,tenant >/dev/null || lab_fail "csctl policy set"
LAB_DOMAIN_METADATA=$(nova_metadata "$project1" acme) lab_domain_define md-1 00000000-0000-4000-8000-00000000c001 1
LAB_DOMAIN_METADATA=$(nova_metadata "$project1" acme) lab_domain_define md-2 00000000-0000-4000-8000-00000000c002 1
LAB_DOMAIN_METADATA=$(nova_metadata "$project2" globex) lab_domain_define md-3 00000000-0000-4000-8000-00000000c003 1
LAB_DOMAIN_METADATA="<metadata><cosched:vm xmlns:cosched='https://cosched.dev/xmlns/libvirt/1.0'><cosched:tenant>acme</cosched:tenant><cosched:isolation>gold</cosched:isolation></cosched:vm></metadata>" \
  lab_domain_define md-bad 00000000-0000-4000-8000-00000000c004 1
t0=$(lab_ms_now)
for d in md-1 md-2 md-3 md-bad; do lab_domain_start "$d" --paused; done
for d in md-1 md-2 md-3; do lab_wait_enforced_secs "$d" 120; done
lab_result "metadata to enforced" "$(( $(lab_ms_now) - t0 )) ms for 3 domains (virsh start .. csd shows all enforced), no csctl tag"
for d in md-1 md-2 md-3; do
  json=$(csctl get "$d" -o json)
  project=$project1
  [ "$d" = md-3 ] && project=$project2
  echo "$json" | grep -q "\"tenant_id\": \"$project\"" || lab_fail "$d is not tagged for project $project: $json"
  echo "$json" | grep -q '"metadata_host": "lab"' || lab_fail "$d is not tagged from host lab's metadata: $json"
  # Tagged under its domain UUID (names repeat across Nova cells), found
  # by its name too.
  echo "$json" | grep -q "\"vm_id\": \"00000000-0000-4000-8000-00000000c00${d#md-}\"" ||
    lab_fail "$d is not tagged under its UUID: $json"
  echo "$json" | grep -q "\"domain_name\": \"$d\"" || lab_fail "$d's domain name is not kept: $json"
done
csctl audit --vm 00000000-0000-4000-8000-00000000c001 | grep -q 'from metadata on host lab' ||
  lab_fail "md-1's audit record does not say it came from metadata: $(csctl audit --vm 00000000-0000-4000-8000-00000000c001)"
why=$(csctl get md-bad 2>&1) && lab_fail "md-bad, with an unknown level in its metadata, is tagged: $why"
echo "$why" | grep -q "metadata.cosched.isolation 'gold'" || lab_fail "csctl get md-bad does not say why: $why"
lab_result "md-bad" "untagged; csctl get says: $(echo "$why" | tr '\n' ' ')"
own_cookie() { c=$(lab_domain_cookie_set md-bad) && [ "$c" != 0 ] && [ "${c#*,}" = "$c" ]; }
lab_wait_secs 60 own_cookie || lab_fail "md-bad is not fail-closed on one cookie: $(lab_domain_cookies md-bad | tr '\n' ';')"
cm1=$(lab_domain_one_cookie md-1) || exit 1
cm2=$(lab_domain_one_cookie md-2) || exit 1
cm3=$(lab_domain_one_cookie md-3) || exit 1
cbad=$(lab_domain_one_cookie md-bad) || exit 1
[ "$cm1" != 0 ] && [ "$cm3" != 0 ] || lab_fail "untagged domain: md-1 $cm1, md-3 $cm3"
[ "$cm1" = "$cm2" ] || lab_fail "project $project1's domains at level tenant differ: md-1 $cm1, md-2 $cm2"
[ "$cm1" != "$cm3" ] || lab_fail "projects $project1 and $project2 share cookie $cm1"
[ "$cbad" != "$cm1" ] && [ "$cbad" != "$cm3" ] || lab_fail "md-bad shares a cookie with a tagged domain: $cbad"
lab_result "groups from metadata" "project 1 (md-1, md-2) $cm1, project 2 (md-3) $cm3, md-bad $cbad (fail-closed)"

# Issue #38 item 4, the lab's half: Debian's prometheus with the shipped
# rules scrapes this csd and this agent every second. md-bad runs untagged,
# fail-closed on a cookie of its own: CoschedVMsFailClosed goes pending
# for the agent (its `for:` is 10 minutes; pending is what a test can wait
# for), and is gone once md-bad is tagged and enforced.
cat >/tmp/prometheus.yml <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [${LAB_GUEST%/tests/lab/guest}/deploy/prometheus/cosched-rules.yml]
scrape_configs:
  - {job_name: csd, static_configs: [{targets: ['127.0.0.1:9465']}]}
  - {job_name: cs-agent, static_configs: [{targets: ['127.0.0.1:9464']}]}
EOF
prometheus --config.file=/tmp/prometheus.yml --storage.tsdb.path=/tmp/prometheus-tsdb \
  --web.listen-address=127.0.0.1:9391 >/tmp/prometheus.log 2>&1 &
prom_pid=$!
# fail_closed_alert: CoschedVMsFailClosed's state for the agent, or none.
fail_closed_alert() {
  curl -sf http://127.0.0.1:9391/api/v1/alerts | /usr/bin/python3 -c '
import json, sys
alerts = [a for a in json.load(sys.stdin)["data"]["alerts"]
          if a["labels"].get("alertname") == "CoschedVMsFailClosed" and a["labels"].get("job") == "cs-agent"]
print(alerts[0]["state"] if alerts else "none")' 2>/dev/null || echo "no answer"
}
# What Prometheus sees, for a failure's message.
prometheus_view() {
  printf 'rule groups %s; ' "$(curl -sf http://127.0.0.1:9391/api/v1/rules | grep -o '"name":"cosched[^"]*"' | wc -l)"
  printf 'agent VMs %s' "$(curl -sf 'http://127.0.0.1:9391/api/v1/query?query=cosched_agent_vms>0' | grep -o '"state":"[^"]*"[^]]*"[0-9]*"' | tr '\n' ' ')"
}
alert_raised() { case $(fail_closed_alert) in pending|firing) return 0 ;; esac; return 1; }
alert_gone() { [ "$(fail_closed_alert)" = none ]; }
t0=$(lab_ms_now)
lab_wait_secs 120 alert_raised ||
  lab_fail "CoschedVMsFailClosed is not raised while md-bad runs fail-closed: $(fail_closed_alert); $(prometheus_view)"
raised_ms=$(( $(lab_ms_now) - t0 ))
csctl tag 00000000-0000-4000-8000-00000000c004 --tenant acme >/dev/null || lab_fail "csctl tag md-bad"
lab_wait_enforced_secs md-bad 120
t0=$(lab_ms_now)
lab_wait_secs 120 alert_gone || lab_fail "CoschedVMsFailClosed stays $(fail_closed_alert) after md-bad is tagged and enforced; $(prometheus_view)"
lab_result "prometheus" "CoschedVMsFailClosed raised $raised_ms ms after prometheus started (md-bad fail-closed), gone $(( $(lab_ms_now) - t0 )) ms after md-bad was enforced"
kill "$prom_pid" 2>/dev/null
for d in md-1 md-2 md-3 md-bad; do lab_domain_destroy "$d"; done
lab_stop_agent
