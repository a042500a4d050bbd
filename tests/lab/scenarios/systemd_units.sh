# The packages under real systemd (run_lab.sh --systemd): the build
# machine's root read-only over 9p, systemd as PID 1, the Debian packages'
# files installed (guest/init_systemd.sh), csd.service and cs-agent.service
# started by systemd with their packaged configs. Shows:
#  - csd serves through its unit, as the system user cosched;
#  - cs-agent runs inside its sandbox (the unit's capabilities only,
#    no_new_privs, a seccomp filter, a read-only /usr), tags a fake QEMU of
#    another user (uid 107, as under libvirt), and its trace instance works
#    (telemetry is on in the packaged config: stats reach csd);
#  - `systemctl kill -s KILL cs-agent`: systemd restarts it, and no cookie
#    changes (read back before, while down, and after);
#  - `systemctl reload cs-agent`: a new label reaches csd without a
#    restart, a bad file is refused and logged, no cookie changes;
#  - `systemctl reload csd`: a change applied and audited, same pid; a
#    restart-only one refused and logged;
#  - both daemons' logs are in the journal.
. "$LAB_GUEST/lib.sh"
set -u
# csctl as root goes through csd's Unix socket (admin), as an operator's
# would; loopback TCP is viewer only.
unset CSCTL_SERVER

QEMU_UID=107
SETPRIV=/usr/bin/setpriv

main_pid() { systemctl show -p MainPID --value "$1"; }
status_field() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }

lab_wait_for 60 systemctl is-active -q csd.service ||
  lab_fail "csd.service is not active: $(systemctl status csd.service --no-pager 2>&1 | tail -5)"
lab_wait_for 60 systemctl is-active -q cs-agent.service ||
  lab_fail "cs-agent.service is not active: $(systemctl status cs-agent.service --no-pager 2>&1 | tail -5)"
csd=$(main_pid csd.service)
agent=$(main_pid cs-agent.service)
csd_uid=$(status_field "$csd" Uid)
[ "$csd_uid" = "$(id -u cosched)" ] || lab_fail "csd runs as uid $csd_uid, not the system user cosched"
lab_result "csd.service" "pid $csd, user $(id -un "$csd_uid"), capabilities $(status_field "$csd" CapEff)"
[ -S /run/cosched/csd.sock ] || lab_fail "csd.service serves no socket at /run/cosched/csd.sock"

# The agent's sandbox, as the kernel sees it.
want=$(printf '%016x' $(((1 << 19) | (1 << 23) | (1 << 12))))  # SYS_PTRACE, SYS_NICE, NET_ADMIN
eff=$(status_field "$agent" CapEff)
bnd=$(status_field "$agent" CapBnd)
nnp=$(status_field "$agent" NoNewPrivs)
seccomp=$(status_field "$agent" Seccomp)
lab_result "cs-agent.service" "pid $agent, effective $eff, bounding $bnd, no_new_privs $nnp, seccomp mode $seccomp"
[ "$eff" = "$want" ] && [ "$bnd" = "$want" ] || lab_fail "cs-agent does not run with exactly the unit's capabilities ($want)"
[ "$nnp" = 1 ] || lab_fail "cs-agent runs without no_new_privs"
[ "$seccomp" = 2 ] || lab_fail "cs-agent runs without its seccomp filter"
# ProtectSystem=strict: the file system is read-only in the agent's mount
# namespace. The 9p root is read-only anyway, so the check writes where the
# guest can: /usr/sbin and /etc are tmpfs copies (init_systemd.sh), writable
# outside the unit.
for dir in /usr/sbin /etc; do
  probe=$dir/.cosched-write-check
  touch "$probe" || lab_fail "$dir is not writable outside the unit: the check would prove nothing"
  rm -f "$probe"
  if nsenter -t "$agent" -m touch "$probe" 2>/dev/null; then
    rm -f "$probe"
    lab_fail "$dir is writable in cs-agent's mount namespace (ProtectSystem=strict)"
  fi
done

lab_wait_host
chmod 1777 /tmp
rm -f /tmp/vm-sd.pid
$SETPRIV --reuid=$QEMU_UID --regid=$QEMU_UID --clear-groups \
  qemu-system-x86_64 -name guest=vm-sd,debug-threads=on -pidfile /tmp/vm-sd.pid -smp 2 --duty 30 \
  2>/tmp/vm-sd.err &
vm=$!
lab_wait_for 10 test -s /tmp/vm-sd.pid || lab_fail "the fake QEMU did not start as uid $QEMU_UID: $(cat /tmp/vm-sd.err)"
csctl tag vm-sd --tenant acme || lab_fail "csctl tag vm-sd (through csd.service)"
lab_wait_enforced vm-sd 60
cookie=$(lab_one_cookie "$vm")
lab_result "tagged by cs-agent.service" "vm-sd (uid $QEMU_UID): every thread on cookie $cookie"

# The audit trail outside the store: the unit's LogsDirectory holds the
# file, written by csd as its own user, with the tag on record.
lab_wait_for 10 sh -c 'grep -q "\"subject\":\"vm-sd\"" /var/log/cosched/audit.jsonl' ||
  lab_fail "the tag of vm-sd is not in /var/log/cosched/audit.jsonl: $(ls -l /var/log/cosched 2>&1)"
[ "$(stat -c %U:%a /var/log/cosched/audit.jsonl)" = "cosched:640" ] ||
  lab_fail "audit file: $(stat -c %U:%a /var/log/cosched/audit.jsonl), wanted cosched:640"
lab_result "audit file" "$(wc -l </var/log/cosched/audit.jsonl) records in /var/log/cosched/audit.jsonl, vm-sd's tag among them"

# Telemetry: the agent's trace instance exists and its windows reach csd
# (the packaged config reports every 10 s).
[ -d "$LAB_TRACEFS/instances/cs-agent" ] ||
  lab_fail "no trace instance cs-agent under $LAB_TRACEFS/instances (tracefs: $(findmnt -n -o FSTYPE,OPTIONS "$LAB_TRACEFS"); in cs-agent's namespace: $(findmnt -N "$(main_pid cs-agent.service)" -n -o FSTYPE,OPTIONS "$LAB_TRACEFS"))"
lab_wait_for 60 sh -c 'csctl stats vm-sd --window 300 -o json | grep -q "\"windows\": [1-9]"' ||
  { csctl stats vm-sd --window 300; lab_fail "no stats windows of vm-sd reached csd"; }
lab_result "telemetry" "trace instance $LAB_TRACEFS/instances/cs-agent; vm-sd's windows reach csd"

# systemd restarts a killed agent; the cookies hold throughout.
lab_cookies "$vm" | sort >/tmp/before.txt
# The main process only: cs-agent has no other, and killing "all" makes
# systemd walk the unit's cgroup while the main process's threads exit,
# which failed once on the 9p root (EIO) with the agent killed all the same.
systemctl kill --kill-whom=main -s KILL cs-agent.service ||
  lab_fail "systemctl kill --kill-whom=main -s KILL cs-agent.service"
lab_wait_for 10 sh -c "! kill -0 $agent" || lab_fail "cs-agent ($agent) survived SIGKILL"
lab_cookies "$vm" | sort >/tmp/while-down.txt
lab_wait_for 30 sh -c "p=\$(systemctl show -p MainPID --value cs-agent.service); [ \"\$p\" != 0 ] && [ \"\$p\" != $agent ]" ||
  lab_fail "systemd did not restart cs-agent: $(systemctl status cs-agent.service --no-pager 2>&1 | tail -5)"
restarted=$(main_pid cs-agent.service)
lab_wait_for 30 sh -c "journalctl -u cs-agent.service _PID=$restarted --no-pager | grep -q 'reconcile pass:'" ||
  lab_fail "the restarted agent logged no reconcile pass"
pass=$(journalctl -u cs-agent.service _PID="$restarted" --no-pager | grep 'reconcile pass:' | head -1 | sed 's/.*reconcile pass: //')
lab_cookies "$vm" | sort >/tmp/after.txt
cmp -s /tmp/before.txt /tmp/while-down.txt || { diff /tmp/before.txt /tmp/while-down.txt; lab_fail "cookies changed while cs-agent was down"; }
cmp -s /tmp/before.txt /tmp/after.txt || { diff /tmp/before.txt /tmp/after.txt; lab_fail "cookies changed across cs-agent's restart"; }
echo "$pass" | grep -q ' 0 prctl writes' || lab_fail "the restarted agent rewrote cookies: $pass"
lab_result "systemctl kill -s KILL cs-agent" "restarted as pid $restarted (was $agent); $(wc -l </tmp/after.txt) threads, every cookie the same; first pass: $pass"

# systemctl reload (the unit's ExecReload=, SIGHUP): the agent reads its
# file again without a restart; a new label reaches csd (the agent
# registers again) and no cookie changes. A bad file is refused whole:
# logged, counted, and the agent runs on.
cp /etc/cosched/cs-agent.yaml /tmp/cs-agent.yaml.orig
printf 'labels: {rack: r7}\n' >>/etc/cosched/cs-agent.yaml
systemctl reload cs-agent.service || lab_fail "systemctl reload cs-agent.service"
lab_wait_for 30 sh -c 'csctl hosts get lab -o json | grep -q "\"rack\": \"r7\""' ||
  { csctl hosts get lab; lab_fail "the reloaded label did not reach csd"; }
[ "$(main_pid cs-agent.service)" = "$restarted" ] || lab_fail "systemctl reload restarted cs-agent"
printf 'report_interval_s: -1\n' >>/etc/cosched/cs-agent.yaml
systemctl reload cs-agent.service || lab_fail "systemctl reload cs-agent.service (a bad file)"
lab_wait_for 30 sh -c "journalctl -u cs-agent.service _PID=$restarted --no-pager | grep -q 'refused: .*report_interval_s'" ||
  lab_fail "the agent did not log the refused reload"
cp /tmp/cs-agent.yaml.orig /etc/cosched/cs-agent.yaml
lab_cookies "$vm" | sort >/tmp/after-reload.txt
cmp -s /tmp/before.txt /tmp/after-reload.txt || { diff /tmp/before.txt /tmp/after-reload.txt; lab_fail "cookies changed across the reloads"; }
lab_result "systemctl reload cs-agent" "label rack=r7 at csd, same pid $restarted; a bad file refused and logged; every cookie the same"

# systemctl reload csd: csd.yaml read again without a restart, the change
# on record (ReloadConfig by csd:reload); a bad file refused and logged.
sed -i 's/^host_stale_after_s: 60$/host_stale_after_s: 120/' /etc/cosched/csd.yaml
grep -q '^host_stale_after_s: 120$' /etc/cosched/csd.yaml || lab_fail "the packaged csd.yaml has no host_stale_after_s: 60 to change"
systemctl reload csd.service || lab_fail "systemctl reload csd.service"
lab_wait_for 30 sh -c 'csctl audit --who csd:reload -o json | grep -q "changed host_stale_after_s"' ||
  { csctl audit --limit 5; lab_fail "csd's reload is not on record"; }
[ "$(main_pid csd.service)" = "$csd" ] || lab_fail "systemctl reload restarted csd"
sed -i 's/^audit_retention_days: 365$/audit_retention_days: 30/' /etc/cosched/csd.yaml
systemctl reload csd.service || lab_fail "systemctl reload csd.service (a restart-only change)"
lab_wait_for 30 sh -c "journalctl -u csd.service _PID=$csd --no-pager | grep -q 'refused: the file changes audit_retention_days'" ||
  lab_fail "csd did not log the refused reload"
lab_result "systemctl reload csd" "host_stale_after_s 60 -> 120 audited as ReloadConfig, same pid $csd; a restart-only change refused and logged"

# The journal has both daemons' logs.
csd_lines=$(journalctl -u csd.service --no-pager -q | wc -l)
agent_lines=$(journalctl -u cs-agent.service --no-pager -q | wc -l)
lab_result "journal" "csd.service $csd_lines lines, cs-agent.service $agent_lines lines"
[ "$csd_lines" -gt 0 ] || lab_fail "no csd.service lines in the journal"
journalctl -u cs-agent.service --no-pager -q | grep -q 'reconcile pass:' || lab_fail "no cs-agent reconcile pass in the journal"
lab_stop_vm "$vm"
