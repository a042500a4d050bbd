#include "cli/output.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/cpu_list.h"
#include "common/labels.h"
#include "common/names.h"
#include "google/protobuf/util/time_util.h"

namespace cosched::cli {
namespace {

using nlohmann::json;

// Assignments carry the effective scope; older or partial answers may only
// have the requested one.
v1::ThreadScope EffectiveScope(const v1::VM& vm) {
  v1::ThreadScope scope = vm.assignment().thread_scope();
  return scope == v1::THREAD_SCOPE_UNSPECIFIED ? vm.thread_scope() : scope;
}

json TimeJson(bool present, const google::protobuf::Timestamp& ts) {
  if (!present) return nullptr;
  return google::protobuf::util::TimeUtil::ToString(ts);
}

std::string TimeText(bool present, const google::protobuf::Timestamp& ts) {
  if (!present) return "-";
  return google::protobuf::util::TimeUtil::ToString(ts);
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

std::string YesNo(bool b) { return b ? "yes" : "no"; }

std::string Classes(const v1::VM& vm) {
  return OrDash(absl::StrJoin(vm.interference_classes(), ","));
}

std::string AllowedText(const v1::TenantPolicy& policy) {
  if (policy.allowed_isolation().empty()) return "all";
  std::vector<std::string> names;
  for (int level : policy.allowed_isolation()) {
    names.push_back(IsolationName(static_cast<v1::IsolationLevel>(level)));
  }
  return absl::StrJoin(names, ",");
}

// "fixed" or "auto" (unset reads as fixed).
std::string ModeText(const v1::TenantPolicy& policy) {
  return policy.mode() == v1::POLICY_MODE_AUTO ? "auto" : "fixed";
}

// "none" when the tenant sets no forced-idle budget.
std::string BudgetText(const v1::TenantPolicy& policy) {
  if (!policy.has_forced_idle_budget_pct()) return "none";
  return absl::StrFormat("%g%%", policy.forced_idle_budget_pct());
}

int CpuCount(const v1::Topology& topology) {
  int cpus = 0;
  for (const v1::Core& core : topology.cores()) cpus += core.cpus_size();
  return cpus;
}

std::string EnforcementText(const v1::VM& vm) {
  if (!vm.has_enforcement()) return "-";
  const v1::VMEnforcement& e = vm.enforcement();
  if (e.state() == v1::ENFORCEMENT_STATE_OBSERVED) {
    // The counts are those enforcing would reach.
    return absl::StrCat("observed (enforcing would make it ",
                        EnforcementStateName(e.observed_state()), ": ", e.threads_tagged(), "/",
                        e.threads_found(), " threads tagged)");
  }
  return absl::StrCat(EnforcementStateName(e.state()), " (",
                      e.threads_tagged(), "/", e.threads_found(),
                      " threads tagged)");
}

std::string Printable(std::string s) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return s;
}

std::string RunStateName(v1::VMRunState state) {
  switch (state) {
    case v1::VM_RUN_STATE_RUNNING: return "running";
    case v1::VM_RUN_STATE_MIGRATING_IN: return "migrating-in";
    case v1::VM_RUN_STATE_MIGRATING_OUT: return "migrating-out";
    case v1::VM_RUN_STATE_PAUSED: return "paused";
    case v1::VM_RUN_STATE_SHUT_OFF: return "shut-off";
    default: return "unknown";
  }
}

// "hv-a (running, owner), hv-b (migrating-in)".
std::string PresenceText(const v1::VM& vm) {
  std::vector<std::string> parts;
  for (const v1::VMPresence& p : vm.presence()) {
    parts.push_back(absl::StrCat(p.host_id(), " (", RunStateName(p.run_state()),
                                 p.host_id() == vm.host_id() ? ", owner" : "", ")"));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

// "yes", or why Place would not choose the host.
std::string PlaceableText(const v1::Host& host) {
  return host.unplaceable_reason().empty() ? "yes" : absl::StrCat("no: ", host.unplaceable_reason());
}

// "none", or each process posing as a VM: "pid 123 claims vm-9 (why)".
std::string ImpostorsText(const v1::Host& host) {
  if (host.impostor_count() == 0) return "none";
  std::vector<std::string> parts;
  for (const v1::ImpostorProcess& p : host.impostors()) {
    parts.push_back(absl::StrCat(
        "pid ", p.pid(), " claims '", p.claimed_vm_id().empty() ? p.claimed_uuid() : p.claimed_vm_id(),
        "' (", p.reason(), ")"));
  }
  if (host.impostor_count() > host.impostors_size()) {
    parts.push_back(absl::StrCat("and ", host.impostor_count() - host.impostors_size(), " more"));
  }
  return absl::StrCat(host.impostor_count(), ": ", absl::StrJoin(parts, "; "));
}

}  // namespace

json VmToJson(const v1::VM& vm) {
  const v1::Assignment& a = vm.assignment();
  json enforcement = nullptr;
  if (vm.has_enforcement()) {
    const v1::VMEnforcement& e = vm.enforcement();
    enforcement = {
        {"state", EnforcementStateName(e.state())},
        {"observed_state", e.state() == v1::ENFORCEMENT_STATE_OBSERVED
                               ? json(EnforcementStateName(e.observed_state()))
                               : json(nullptr)},
        {"applied_trust_group", e.applied_trust_group()},
        {"threads_found", e.threads_found()},
        {"threads_tagged", e.threads_tagged()},
        {"threads_wrong", e.threads_wrong()},
        {"threads_untaggable", e.threads_untaggable()},
        {"last_error", e.last_error()},
        {"report_time", TimeJson(e.has_report_time(), e.report_time())},
        {"vcpus", e.vcpus()},
        {"vcpu_affinity", std::vector<int>(e.vcpu_affinity().begin(), e.vcpu_affinity().end())},
        {"pinned_cpus", std::vector<int>(e.pinned_cpus().begin(), e.pinned_cpus().end())},
    };
  }
  json pin = nullptr;
  if (a.has_pin()) {
    pin = {{"host_id", a.pin().host_id()},
           {"cpus", std::vector<int>(a.pin().cpus().begin(), a.pin().cpus().end())}};
  }
  json presence = json::array();
  for (const v1::VMPresence& p : vm.presence()) {
    presence.push_back({{"host_id", p.host_id()},
                        {"run_state", RunStateName(p.run_state())},
                        {"uuid", p.uuid()},
                        {"since", TimeJson(p.has_since(), p.since())}});
  }
  return {
      {"vm_id", vm.vm_id()},
      {"domain_name", vm.domain_name()},
      {"tenant_id", vm.tenant_id()},
      {"isolation", IsolationName(a.isolation())},
      {"requested_isolation", IsolationName(vm.requested_isolation())},
      {"trust_group", a.trust_group()},
      {"revision", a.revision()},
      {"dedicated_cores", a.dedicated_cores()},
      {"pin", pin},
      {"interference_classes",
       json(std::vector<std::string>(vm.interference_classes().begin(),
                                     vm.interference_classes().end()))},
      {"thread_scope", ThreadScopeName(EffectiveScope(vm))},
      {"host_id", vm.host_id()},
      {"presence", presence},
      {"conflict", vm.conflict()},
      {"tagged_from", vm.metadata_host().empty() ? "tag" : "metadata"},
      {"metadata_host", vm.metadata_host()},
      {"enforcement", enforcement},
      {"create_time", TimeJson(vm.has_create_time(), vm.create_time())},
      {"update_time", TimeJson(vm.has_update_time(), vm.update_time())},
  };
}

json TenantPolicyToJson(const v1::TenantPolicy& policy) {
  json allowed = json::array();
  for (int level : policy.allowed_isolation()) {
    allowed.push_back(IsolationName(static_cast<v1::IsolationLevel>(level)));
  }
  return {
      {"tenant_id", policy.tenant_id()},
      {"default_isolation", IsolationName(policy.default_isolation())},
      {"allowed_isolation", allowed},
      {"explicitly_set", policy.explicitly_set()},
      {"mode", ModeText(policy)},
      {"apply", !policy.has_apply() || policy.apply()},
      {"forced_idle_budget_pct", policy.has_forced_idle_budget_pct()
                                     ? json(policy.forced_idle_budget_pct())
                                     : json(nullptr)},
      {"revision", policy.revision()},
      {"update_time",
       TimeJson(policy.has_update_time(), policy.update_time())},
  };
}

// "safe", "unsafe: <hazard>, ..." (the agent tags nothing), with the
// hazards an operator allowed.
std::string SafetyText(const v1::HostPreflight& p) {
  auto names = [](const auto& hazards) {
    std::vector<std::string> out;
    for (const v1::Hazard& h : hazards) out.push_back(h.name());
    return absl::StrJoin(out, ",");
  };
  std::string text = p.hazards_size() > 0 ? absl::StrCat("unsafe: ", names(p.hazards())) : "safe";
  if (p.allowed_hazards_size() > 0) {
    absl::StrAppend(&text, " (allowed: ", names(p.allowed_hazards()), ")");
  }
  return text;
}

absl::string_view EnablementName(const v1::HostEnablement& e) {
  switch (e.state()) {
    case v1::HostEnablement::STATE_WAIVED: return "waived";
    case v1::HostEnablement::STATE_NOT_ENABLED: return "not-enabled";
    case v1::HostEnablement::STATE_OFF: return "off";
    default: return "enforce";
  }
}

// "enforce", or "waived (why)", "not-enabled (why)".
std::string EnablementText(const v1::HostEnablement& e) {
  if (e.reason().empty()) return std::string(EnablementName(e));
  return absl::StrCat(EnablementName(e), " (", e.reason(), ")");
}

// What a host's agent does with cookies, for the table: csd's enablement,
// and "observe" where the agent only observes (enforce: observe) whatever
// csd enables.
std::string CookiesColumn(const v1::Host& host) {
  if (!host.agent_observes()) return std::string(EnablementName(host.enablement()));
  if (host.enablement().state() == v1::HostEnablement::STATE_ENFORCE ||
      host.enablement().state() == v1::HostEnablement::STATE_UNSPECIFIED) {
    return "observe";
  }
  return absl::StrCat(EnablementName(host.enablement()), "+observe");
}

json PreflightToJson(const v1::HostPreflight& p) {
  auto hazards = [](const auto& list) {
    json out = json::array();
    for (const v1::Hazard& h : list) out.push_back({{"name", h.name()}, {"detail", h.detail()}});
    return out;
  };
  json vulnerabilities = json::array();
  for (const v1::CpuVulnerability& v : p.vulnerabilities()) {
    vulnerabilities.push_back({{"name", v.name()},
                               {"status", v.status()},
                               {"affected", v.affected()},
                               {"smt_relevant", v.smt_relevant()}});
  }
  return {{"safe", p.hazards_size() == 0},
          {"hazards", hazards(p.hazards())},
          {"allowed_hazards", hazards(p.allowed_hazards())},
          {"kernel_release", p.kernel_release()},
          {"kernel_version", p.kernel_version()},
          {"smt_control", p.smt_control()},
          {"sched_ext_state", p.sched_ext_state()},
          {"sched_ext_ops", p.sched_ext_ops()},
          {"nested", p.nested()},
          {"nested_detail", p.nested_detail()},
          {"cgroup_forced_idle", p.cgroup_forced_idle()},
          {"libvirt_sched_core", p.libvirt_sched_core()},
          {"vulnerabilities", vulnerabilities}};
}

json HostToJson(const v1::Host& host) {
  json cores = json::array();
  for (const v1::Core& core : host.topology().cores()) {
    cores.push_back({{"package_id", core.package_id()},
                     {"core_id", core.core_id()},
                     {"cpus", json(std::vector<int>(core.cpus().begin(),
                                                    core.cpus().end()))}});
  }
  const v1::HostCapabilities& caps = host.capabilities();
  return {
      {"host_id", host.host_id()},
      {"agent_version", host.agent_version()},
      {"connected", host.connected()},
      {"connected_replica", host.connected_replica()},
      {"draining", host.draining()},
      {"unplaceable_reason", host.unplaceable_reason()},
      {"budget_unmet", host.budget_unmet()},
      {"cookies", std::string(EnablementName(host.enablement()))},
      {"cookies_reason", host.enablement().reason()},
      {"enforcement_off", host.enforcement_off()},
      {"waits_for_rollout", host.waits_for_rollout()},
      {"enabled_by_rollout", host.enabled_by_rollout()},
      {"agent_observes", host.agent_observes()},
      {"labels", std::map<std::string, std::string>(host.labels().begin(), host.labels().end())},
      {"vm_count", host.vm_count()},
      {"impostor_count", host.impostor_count()},
      {"impostors", [&] {
         json list = json::array();
         for (const v1::ImpostorProcess& p : host.impostors()) {
           list.push_back({{"pid", p.pid()},
                           {"claimed_vm_id", p.claimed_vm_id()},
                           {"claimed_uuid", p.claimed_uuid()},
                           {"reason", p.reason()}});
         }
         return list;
       }()},
      {"applied_revision", host.applied_revision()},
      {"registered_time",
       TimeJson(host.has_registered_time(), host.registered_time())},
      {"last_seen_time",
       TimeJson(host.has_last_seen_time(), host.last_seen_time())},
      {"capabilities",
       {{"smt_active", caps.smt_active()},
        {"core_sched", CoreSchedSupportName(caps.core_sched())},
        {"core_sched_detail", caps.core_sched_detail()},
        {"schedstats_enabled", caps.schedstats_enabled()},
        {"telemetry_active", caps.telemetry_active()},
        {"telemetry_detail", caps.telemetry_detail()},
        {"preflight", PreflightToJson(caps.preflight())}}},
      {"topology", {{"cores", cores}}},
  };
}

void PrintJson(const json& value, std::ostream& out) {
  out << value.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
}

TextTable::TextTable(std::vector<std::string> header) {
  rows_.push_back(std::move(header));
}

void TextTable::AddRow(std::vector<std::string> row) {
  row.resize(rows_[0].size());
  for (std::string& cell : row) cell = Printable(std::move(cell));
  rows_.push_back(std::move(row));
}

void TextTable::Print(std::ostream& out) const {
  std::vector<size_t> widths(rows_[0].size(), 0);
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  }
}

void PrintFields(const Fields& fields, std::ostream& out) {
  size_t width = 0;
  for (const auto& [key, value] : fields) width = std::max(width, key.size());
  for (const auto& [key, value] : fields) {
    out << key << ":" << std::string(width - key.size() + 1, ' ')
        << Printable(value) << "\n";
  }
}

void PrintVm(const v1::VM& vm, std::ostream& out) {
  const v1::Assignment& a = vm.assignment();
  Fields fields = {
      {"vm", vm.vm_id()},
      {"tenant", vm.tenant_id()},
      {"isolation", absl::StrCat(IsolationName(a.isolation()), " (requested: ",
                                 IsolationName(vm.requested_isolation()),
                                 ")")},
      {"trust group", OrDash(a.trust_group())},
      {"dedicated cores", YesNo(a.dedicated_cores())},
      {"pinned", a.has_pin() ? absl::StrCat("CPUs ", FormatCpuList({a.pin().cpus().begin(),
                                                                    a.pin().cpus().end()}),
                                            " of host ", a.pin().host_id(), " (the engine's)")
                             : std::string("no")},
      {"interference classes", Classes(vm)},
      {"thread scope", ThreadScopeName(EffectiveScope(vm))},
      {"revision", absl::StrCat(a.revision())},
      {"host", vm.host_id().empty() ? "- (no agent has reported it yet)"
                                    : vm.host_id()},
      {"on hosts", PresenceText(vm)},
      {"enforcement", EnforcementText(vm)},
  };
  // Tagged under its UUID: the name its host runs it under.
  if (!vm.domain_name().empty()) fields.insert(fields.begin() + 1, {"domain name", vm.domain_name()});
  if (!vm.conflict().empty()) fields.push_back({"conflict", vm.conflict()});
  fields.push_back({"tagged from", vm.metadata_host().empty()
                                       ? "TagVM"
                                       : absl::StrCat("domain metadata on host ",
                                                      vm.metadata_host())});
  if (vm.has_enforcement() && !vm.enforcement().vcpu_affinity().empty()) {
    const auto& cpus = vm.enforcement().vcpu_affinity();
    fields.push_back({"vCPU affinity", absl::StrCat(FormatCpuList({cpus.begin(), cpus.end()}),
                                                    " (set by others: libvirt, taskset)")});
  }
  if (vm.has_enforcement() && !vm.enforcement().last_error().empty()) {
    fields.push_back({"last error", vm.enforcement().last_error()});
  }
  fields.push_back({"created", TimeText(vm.has_create_time(), vm.create_time())});
  fields.push_back({"updated", TimeText(vm.has_update_time(), vm.update_time())});
  PrintFields(fields, out);
}

void PrintVmTable(const std::vector<v1::VM>& vms, std::ostream& out) {
  TextTable table({"VM", "NAME", "TENANT", "ISOLATION", "TRUST GROUP", "REVISION",
                   "HOST", "ENFORCEMENT"});
  for (const v1::VM& vm : vms) {
    table.AddRow({vm.vm_id(), OrDash(vm.domain_name()), vm.tenant_id(),
                  IsolationName(vm.assignment().isolation()),
                  OrDash(vm.assignment().trust_group()),
                  absl::StrCat(vm.assignment().revision()),
                  OrDash(vm.host_id()),
                  vm.has_enforcement()
                      ? EnforcementStateName(vm.enforcement().state())
                      : "-"});
  }
  table.Print(out);
}

void PrintTenantPolicy(const v1::TenantPolicy& policy, std::ostream& out) {
  PrintFields(
      {
          {"tenant", policy.tenant_id()},
          {"default isolation", IsolationName(policy.default_isolation())},
          {"allowed isolation", AllowedText(policy)},
          {"explicit",
           policy.explicitly_set() ? "yes" : "no (built-in default policy)"},
          {"idle budget", BudgetText(policy)},
          {"mode", policy.mode() != v1::POLICY_MODE_AUTO ? "fixed"
                   : policy.has_apply() && !policy.apply()
                       ? "auto, dry run (the engine plans and changes nothing)"
                       : "auto (the engine decides VMs tagged without a level)"},
          {"revision", absl::StrCat(policy.revision())},
          {"updated",
           TimeText(policy.has_update_time(), policy.update_time())},
      },
      out);
}

void PrintTenantPolicyTable(const std::vector<v1::TenantPolicy>& policies,
                            std::ostream& out) {
  TextTable table(
      {"TENANT", "DEFAULT", "ALLOWED", "EXPLICIT", "IDLE-BUDGET", "MODE", "REVISION"});
  for (const v1::TenantPolicy& p : policies) {
    table.AddRow({p.tenant_id(), IsolationName(p.default_isolation()),
                  AllowedText(p), YesNo(p.explicitly_set()), BudgetText(p),
                  ModeText(p) + (p.has_apply() && !p.apply() ? " (dry run)" : ""),
                  absl::StrCat(p.revision())});
  }
  table.Print(out);
}

void PrintHost(const v1::Host& host, std::ostream& out) {
  const v1::HostCapabilities& caps = host.capabilities();
  std::string core_sched = CoreSchedSupportName(caps.core_sched());
  if (!caps.core_sched_detail().empty()) {
    absl::StrAppend(&core_sched, " (", caps.core_sched_detail(), ")");
  }
  PrintFields(
      {
          {"host", host.host_id()},
          {"connected", host.connected_replica().empty()
                            ? YesNo(host.connected())
                            : absl::StrCat(YesNo(host.connected()), " (to replica ",
                                           host.connected_replica(), ")")},
          {"draining", YesNo(host.draining())},
          {"placeable", PlaceableText(host)},
          {"safety", SafetyText(caps.preflight())},
          {"cookies", host.agent_observes()
                          ? absl::StrCat(EnablementText(host.enablement()),
                                         "; the agent only observes (enforce: observe): it "
                                         "sets no cookie")
                          : EnablementText(host.enablement())},
          {"rollout", !host.waits_for_rollout()
                          ? std::string("-")
                          : host.enabled_by_rollout().empty()
                                ? std::string("waits for one")
                                : absl::StrCat("enabled by ", host.enabled_by_rollout())},
          {"labels", host.labels().empty() ? "-" : LabelsText(host.labels())},
          {"budget", host.budget_unmet().empty() ? "-" : host.budget_unmet()},
          {"agent version", OrDash(host.agent_version())},
          {"kernel", OrDash(caps.preflight().kernel_release())},
          {"sched_ext", OrDash(caps.preflight().sched_ext_state())},
          {"nested", caps.preflight().nested()
                         ? absl::StrCat("yes (", caps.preflight().nested_detail(), ")")
                         : "no"},
          {"smt cpu issues", [&] {
             std::vector<std::string> affected;
             for (const v1::CpuVulnerability& v : caps.preflight().vulnerabilities()) {
               if (v.smt_relevant() && v.affected()) affected.push_back(v.name());
             }
             return affected.empty() ? std::string("none affected")
                                     : absl::StrJoin(affected, ", ");
           }()},
          {"core scheduling", core_sched},
          {"libvirt", caps.preflight().libvirt_sched_core().empty()
                          ? "-"
                          : absl::StrCat("sched_core ", caps.preflight().libvirt_sched_core())},
          {"smt active", YesNo(caps.smt_active())},
          {"schedstats", YesNo(caps.schedstats_enabled())},
          {"telemetry", caps.telemetry_detail().empty()
                            ? YesNo(caps.telemetry_active())
                            : absl::StrCat(YesNo(caps.telemetry_active()), " (",
                                           caps.telemetry_detail(), ")")},
          {"cores", absl::StrCat(host.topology().cores_size())},
          {"cpus", absl::StrCat(CpuCount(host.topology()))},
          {"vms", absl::StrCat(host.vm_count())},
          {"impostors", ImpostorsText(host)},
          {"applied revision", absl::StrCat(host.applied_revision())},
          {"registered",
           TimeText(host.has_registered_time(), host.registered_time())},
          {"last seen",
           TimeText(host.has_last_seen_time(), host.last_seen_time())},
      },
      out);
}

void PrintHostTable(const std::vector<v1::Host>& hosts, std::ostream& out) {
  TextTable table({"HOST", "CONNECTED", "DRAINING", "CORE SCHED", "SAFETY", "COOKIES", "BUDGET",
                   "SMT", "CORES", "CPUS", "VMS", "APPLIED REV", "LAST SEEN", "AGENT"});
  for (const v1::Host& h : hosts) {
    table.AddRow({h.host_id(), YesNo(h.connected()), YesNo(h.draining()),
                  CoreSchedSupportName(h.capabilities().core_sched()),
                  SafetyText(h.capabilities().preflight()),
                  CookiesColumn(h),
                  h.budget_unmet().empty() ? "-" : "unmet",
                  h.capabilities().smt_active() ? "on" : "off",
                  absl::StrCat(h.topology().cores_size()),
                  absl::StrCat(CpuCount(h.topology())),
                  absl::StrCat(h.vm_count()),
                  absl::StrCat(h.applied_revision()),
                  TimeText(h.has_last_seen_time(), h.last_seen_time()),
                  OrDash(h.agent_version())});
  }
  table.Print(out);
}

namespace {

json RecordJson(const std::string& text) {
  if (text.empty()) return nullptr;
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? json(text) : parsed;
}

std::string UnixNanosText(int64_t ns) {
  return google::protobuf::util::TimeUtil::ToString(
      google::protobuf::util::TimeUtil::NanosecondsToTimestamp(ns));
}

}  // namespace

json AuditRecordToJson(const v1::AuditRecord& record) {
  return {{"sequence", record.sequence()},
          {"time", UnixNanosText(record.time_unix_ns())},
          {"who", record.who()},
          {"role", record.role()},
          {"method", record.method()},
          {"subject", record.subject()},
          {"revision", record.revision()},
          {"reason", record.reason()},
          {"before", RecordJson(record.before())},
          {"after", RecordJson(record.after())}};
}

void PrintAuditTable(const std::vector<v1::AuditRecord>& records,
                     std::ostream& out) {
  TextTable table({"TIME", "WHO", "ROLE", "METHOD", "SUBJECT", "REVISION", "REASON"});
  for (const v1::AuditRecord& r : records) {
    table.AddRow({UnixNanosText(r.time_unix_ns()), r.who(), r.role(), r.method(),
                  r.subject(), absl::StrCat(r.revision()), r.reason().empty() ? "-" : r.reason()});
  }
  table.Print(out);
}

}  // namespace cosched::cli
