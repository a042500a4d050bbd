# Level dedicated: a VM's vCPUs get a whole core (both siblings) that no
# other VM's thread may use, and its own cookie keeps host tasks off the
# sibling while its vCPUs run.
. /lab/lib.sh
set -u
trap lab_keep_logs EXIT
lab_check_topology
allowed() { awk '/^Cpus_allowed_list/ {print $2}' "/proc/$1/task/$2/status"; }

lab_start_vm vm-d -smp 2
vmd=$LAB_PID
lab_start_vm vm-o -smp 2
vmo=$LAB_PID
lab_crosscheck_begin
lab_start_csd
lab_start_agent
lab_wait_host
csctl tag vm-d --tenant acme --isolation dedicated || lab_fail "tag vm-d"
csctl tag vm-o --tenant globex || lab_fail "tag vm-o"
lab_wait_enforced vm-d
lab_wait_enforced vm-o
csctl get vm-d | grep -E 'isolation|dedicated|enforcement' | sed 's/^/  /'

vcpu_cpus=""
for tid in $(lab_cookies "$vmd" | awk '$4 == "CPU" {print $2}'); do
  vcpu_cpus="$vcpu_cpus $(allowed "$vmd" "$tid")"
done
vcpu_cpus=$(echo $vcpu_cpus | tr ' ' '\n' | sort -u)
[ "$(echo "$vcpu_cpus" | wc -l)" = 1 ] || lab_fail "vm-d's vCPUs have different CPU sets: $(echo $vcpu_cpus)"
case "$vcpu_cpus" in
  0-1|2-3) ;;
  *) lab_fail "vm-d's vCPUs are not confined to one whole core: CPUs $vcpu_cpus" ;;
esac
lab_result "dedicated vm-d vCPUs" "CPUs $vcpu_cpus (one whole core)"

others=""
for tid in $(lab_cookies "$vmo" | awk '{print $2}'); do others="$others $(allowed "$vmo" "$tid")"; done
for tid in $(lab_cookies "$vmd" | awk '$4 != "CPU" {print $2}'); do others="$others $(allowed "$vmd" "$tid")"; done
others=$(echo $others | tr ' ' '\n' | sort -u | tr '\n' ' ')
for set in $others; do
  [ "$set" != "$vcpu_cpus" ] && [ "$set" != 0-3 ] || lab_fail "a thread outside vm-d's vCPUs may run on CPUs $set"
done
lab_result "other VM threads" "confined to CPUs $others"

# An independent check: nothing of vm-o runs on vm-d's core.
lab_trace_setup
lab_trace_record 2 /tmp/trace.txt
core_cpus=$(echo "$vcpu_cpus" | tr '-' ' ')
vmo_tids=$(lab_cookies "$vmo" | awk '{print $2}' | tr '\n' '|' | sed 's/|$//')
ran=$(grep -cE "next_pid=($vmo_tids)( |\$)" /tmp/trace.txt)
[ "$ran" -gt 0 ] || lab_fail "the trace shows no switch to vm-o at all"
on_core=$(grep -E "next_pid=($vmo_tids)( |\$)" /tmp/trace.txt |
  awk -v a="${core_cpus% *}" -v b="${core_cpus#* }" '{
    if (!match($0, /\[[0-9]+\]/)) next; c = substr($0, RSTART + 1, RLENGTH - 2) + 0;
    if (c == a || c == b) n++ } END { print n + 0 }')
[ "$on_core" = 0 ] || lab_fail "vm-o ran $on_core times on vm-d's core"
lab_result "trace" "vm-o's threads were switched in $ran times in 2 s, never on CPUs $vcpu_cpus"

csctl tag vm-d --tenant acme --isolation vm || lab_fail "retag vm-d"
lab_wait_for 10 sh -c "for t in \$(lab_cookies $vmo | awk '{print \$2}'); do
  grep -q '^Cpus_allowed_list:.0-3\$' /proc/$vmo/task/\$t/status || exit 1; done" ||
  lab_fail "vm-o did not get all CPUs back when vm-d stopped being dedicated"
lab_result "undone" "vm-d at level vm: vm-o's threads have CPUs 0-3 again"
# The collector's figures over the run agree with the lab's own trace.
lab_crosscheck_end vm-d="$vmd" vm-o="$vmo"
lab_stop_vm "$vmd"
lab_stop_vm "$vmo"
