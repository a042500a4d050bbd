#include "policy/scenario.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cpu_list.h"
#include "common/status_macros.h"
#include "common/names.h"
#include "common/validation.h"
#include "policy/trust_group.h"
#include "yaml-cpp/yaml.h"

namespace cosched::policy {
namespace {

constexpr int kMaxCores = 1024;
constexpr int kMaxInstances = 20000;
constexpr double kMaxDurationS = 3600;

absl::Status Invalid(absl::string_view field, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", rule));
}

std::string Line(const YAML::Node& node) {
  return absl::StrCat(" (line ", node.Mark().line + 1, ")");
}

// Fails on keys of `node` outside `known`.
absl::Status CheckKeys(const YAML::Node& node, absl::string_view field,
                       const std::set<std::string>& known) {
  if (!node.IsMap()) return Invalid(field, "must be a map");
  for (const auto& entry : node) {
    std::string key = entry.first.as<std::string>();
    if (known.count(key) == 0) {
      std::string names;
      for (const auto& k : known) absl::StrAppend(&names, names.empty() ? "" : ", ", k);
      return absl::InvalidArgumentError(
          absl::StrCat(field.empty() ? "" : absl::StrCat(field, "."), key,
                       " is not a known key (known: ", names, ")",
                       Line(entry.first)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GetString(const YAML::Node& node,
                                      absl::string_view field) {
  if (!node.IsScalar()) return Invalid(field, "must be a string" + Line(node));
  return node.Scalar();
}

absl::StatusOr<double> GetNumber(const YAML::Node& node,
                                 absl::string_view field, double low,
                                 bool low_open, double high) {
  double value = 0;
  if (!node.IsScalar() || !absl::SimpleAtod(node.Scalar(), &value) ||
      !std::isfinite(value) || value < low || (low_open && value == low) ||
      value > high) {
    return Invalid(field, absl::StrCat("must be a number in ",
                                       low_open ? "(" : "[", low, ", ", high,
                                       "]", Line(node)));
  }
  return value;
}

absl::StatusOr<int64_t> GetInt(const YAML::Node& node, absl::string_view field,
                               int64_t low, int64_t high) {
  int64_t value = 0;
  if (!node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &value) ||
      value < low || value > high) {
    return Invalid(field, absl::StrCat("must be an integer in [", low, ", ",
                                       high, "]", Line(node)));
  }
  return value;
}

absl::StatusOr<bool> GetBool(const YAML::Node& node, absl::string_view field) {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    return Invalid(field, "must be true or false" + Line(node));
  }
  return value;
}

absl::StatusOr<std::vector<std::string>> GetIdList(const YAML::Node& node,
                                                   absl::string_view field) {
  if (!node.IsSequence()) return Invalid(field, "must be a list" + Line(node));
  std::vector<std::string> out;
  for (size_t i = 0; i < node.size(); ++i) {
    std::string item_field = absl::StrCat(field, "[", i, "]");
    auto value = GetString(node[i], item_field);
    if (!value.ok()) return value.status();
    absl::Status valid = ValidateId(item_field, *value);
    if (!valid.ok()) return valid;
    out.push_back(*value);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::StatusOr<Workload> ParseWorkload(const YAML::Node& node,
                                       const std::string& field) {
  if (!node.IsMap()) return Invalid(field, "must be a map" + Line(node));
  if (!node["kind"]) return Invalid(field + ".kind", "is required");
  std::string kind;
  ASSIGN_OR_RETURN(kind, GetString(node["kind"], field + ".kind"));
  Workload w;
  std::set<std::string> keys = {"kind"};
  if (kind == "cpu" || kind == "avx") {
    w.kind = kind == "cpu" ? WorkloadKind::kCpu : WorkloadKind::kAvx;
    keys.insert({"util", "burst_ms"});
  } else if (kind == "periodic") {
    w.kind = WorkloadKind::kPeriodic;
    keys.insert({"period_ms", "burst_ms", "jitter"});
    w.burst_ms = 1;
  } else if (kind == "interactive") {
    w.kind = WorkloadKind::kInteractive;
    keys.insert({"think_ms", "work_ms"});
  } else {
    return Invalid(field + ".kind",
                   "must be one of cpu, periodic, interactive, avx" +
                       Line(node["kind"]));
  }
  absl::Status keys_ok = CheckKeys(node, field, keys);
  if (!keys_ok.ok()) return keys_ok;
  if (node["util"]) {
    ASSIGN_OR_RETURN(w.util,
                             GetNumber(node["util"], field + ".util", 0, true, 1));
  }
  if (node["burst_ms"]) {
    ASSIGN_OR_RETURN(
        w.burst_ms, GetNumber(node["burst_ms"], field + ".burst_ms", 0, true, 1e6));
  }
  if (node["period_ms"]) {
    ASSIGN_OR_RETURN(
        w.period_ms,
        GetNumber(node["period_ms"], field + ".period_ms", 0, true, 1e7));
  }
  if (node["jitter"]) {
    ASSIGN_OR_RETURN(
        w.jitter, GetNumber(node["jitter"], field + ".jitter", 0, false, 1));
  }
  if (node["think_ms"]) {
    ASSIGN_OR_RETURN(
        w.think_ms, GetNumber(node["think_ms"], field + ".think_ms", 0, false, 1e7));
  }
  if (node["work_ms"]) {
    ASSIGN_OR_RETURN(
        w.work_ms, GetNumber(node["work_ms"], field + ".work_ms", 0, true, 1e6));
  }
  if (w.kind == WorkloadKind::kPeriodic && w.burst_ms > w.period_ms) {
    return Invalid(field + ".burst_ms", "must not exceed period_ms");
  }
  return w;
}

absl::StatusOr<std::vector<int>> ParsePin(const YAML::Node& node,
                                          const std::string& field, int cores) {
  if (node.IsScalar() && node.Scalar() == "none") return std::vector<int>{};
  if (!node.IsMap() || node.size() != 1) {
    return Invalid(field, "must be none, {cores: LIST} or {cpus: LIST}" + Line(node));
  }
  absl::Status keys = CheckKeys(node, field, {"cores", "cpus"});
  if (!keys.ok()) return keys;
  bool by_core = static_cast<bool>(node["cores"]);
  std::string sub = field + (by_core ? ".cores" : ".cpus");
  std::string list;
  ASSIGN_OR_RETURN(list, GetString(node[by_core ? "cores" : "cpus"], sub));
  std::vector<int> ids;
  ASSIGN_OR_RETURN(ids, ParseCpuList(sub, list));
  int limit = by_core ? cores : 2 * cores;
  for (int id : ids) {
    if (id >= limit) {
      return Invalid(sub, absl::StrCat("names ", id, ", but the host has ", limit,
                                       by_core ? " cores" : " CPUs"));
    }
  }
  if (!by_core) return ids;
  std::vector<int> cpus;
  for (int core : ids) {
    cpus.push_back(core);
    cpus.push_back(core + cores);
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

absl::StatusOr<VmSpec> ParseVm(const YAML::Node& node, const std::string& field,
                               int cores) {
  absl::Status keys = CheckKeys(node, field,
                                {"name", "count", "vcpus", "tenant", "classes",
                                 "workload", "pin", "measure", "coupled"});
  if (!keys.ok()) return keys;
  VmSpec vm;
  for (const char* required : {"name", "vcpus", "tenant", "workload"}) {
    if (!node[required]) return Invalid(field + "." + required, "is required");
  }
  ASSIGN_OR_RETURN(vm.name, GetString(node["name"], field + ".name"));
  absl::Status id = ValidateId(field + ".name", vm.name);
  if (!id.ok()) return id;
  if (node["count"]) {
    ASSIGN_OR_RETURN(vm.count, GetInt(node["count"], field + ".count", 1,
                                              kMaxInstances));
  }
  ASSIGN_OR_RETURN(vm.vcpus,
                           GetInt(node["vcpus"], field + ".vcpus", 1, 4096));
  ASSIGN_OR_RETURN(vm.tenant, GetString(node["tenant"], field + ".tenant"));
  if (vm.tenant != kPerVmTenant) {
    id = ValidateId(field + ".tenant", vm.tenant);
    if (!id.ok()) return id;
  }
  if (node["classes"]) {
    ASSIGN_OR_RETURN(vm.classes,
                             GetIdList(node["classes"], field + ".classes"));
  }
  ASSIGN_OR_RETURN(vm.workload,
                           ParseWorkload(node["workload"], field + ".workload"));
  if (node["pin"]) {
    ASSIGN_OR_RETURN(vm.pin_cpus,
                             ParsePin(node["pin"], field + ".pin", cores));
  }
  if (node["measure"]) {
    ASSIGN_OR_RETURN(vm.measure, GetBool(node["measure"], field + ".measure"));
  }
  if (node["coupled"]) {
    ASSIGN_OR_RETURN(vm.coupled, GetBool(node["coupled"], field + ".coupled"));
  }
  return vm;
}

absl::StatusOr<TenantSpec> ParseTenant(const YAML::Node& node,
                                       const std::string& field) {
  absl::Status keys = CheckKeys(
      node, field, {"name", "isolation", "allow", "forced_idle_budget_pct"});
  if (!keys.ok()) return keys;
  if (!node["name"]) return Invalid(field + ".name", "is required");
  TenantSpec tenant;
  std::string name;
  ASSIGN_OR_RETURN(name, GetString(node["name"], field + ".name"));
  tenant.policy = DefaultTenantPolicy(name);
  // A scenario's tenant has a policy of its own: every level unless it
  // says which (`allow`).
  tenant.policy.clear_allowed_isolation();
  tenant.policy.set_explicitly_set(true);
  if (node["isolation"]) {
    std::string level;
    ASSIGN_OR_RETURN(level,
                             GetString(node["isolation"], field + ".isolation"));
    v1::IsolationLevel parsed;
    ASSIGN_OR_RETURN(parsed, ParseIsolation(field + ".isolation", level));
    tenant.policy.set_default_isolation(parsed);
  }
  if (node["allow"]) {
    const YAML::Node& allow = node["allow"];
    if (!allow.IsSequence()) return Invalid(field + ".allow", "must be a list");
    for (size_t i = 0; i < allow.size(); ++i) {
      std::string item = absl::StrCat(field, ".allow[", i, "]");
      std::string level;
      ASSIGN_OR_RETURN(level, GetString(allow[i], item));
      v1::IsolationLevel parsed;
      ASSIGN_OR_RETURN(parsed, ParseIsolation(item, level));
      tenant.policy.add_allowed_isolation(parsed);
    }
  }
  absl::Status valid = ValidateTenantPolicy(tenant.policy);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", valid.message()));
  }
  if (node["forced_idle_budget_pct"]) {
    ASSIGN_OR_RETURN(
        tenant.forced_idle_budget_pct,
        GetNumber(node["forced_idle_budget_pct"],
                  field + ".forced_idle_budget_pct", 0, false, 100));
  }
  return tenant;
}

absl::StatusOr<Scenario> ParseRoot(const YAML::Node& root) {
  if (!root.IsMap()) return Invalid("the scenario", "must be a YAML map");
  absl::Status keys = CheckKeys(root, "",
                                {"name", "description", "seed", "duration_s",
                                 "host", "vms", "tenants", "conflicts",
                                 "forced_idle_budget_pct", "policy"});
  if (!keys.ok()) return keys;
  for (const char* required : {"name", "seed", "duration_s", "host", "vms"}) {
    if (!root[required]) return Invalid(required, "is required");
  }
  Scenario s;
  ASSIGN_OR_RETURN(s.name, GetString(root["name"], "name"));
  absl::Status id = ValidateId("name", s.name);
  if (!id.ok()) return id;
  if (root["description"]) {
    ASSIGN_OR_RETURN(s.description,
                             GetString(root["description"], "description"));
  }
  int64_t seed = 0;
  ASSIGN_OR_RETURN(seed, GetInt(root["seed"], "seed", 0, INT64_MAX));
  s.seed = static_cast<uint64_t>(seed);
  ASSIGN_OR_RETURN(
      s.duration_s, GetNumber(root["duration_s"], "duration_s", 0, true, kMaxDurationS));

  const YAML::Node& host = root["host"];
  keys = CheckKeys(host, "host", {"cores", "threads_per_core"});
  if (!keys.ok()) return keys;
  if (!host["cores"]) return Invalid("host.cores", "is required");
  ASSIGN_OR_RETURN(s.cores, GetInt(host["cores"], "host.cores", 1, kMaxCores));
  if (host["threads_per_core"]) {
    ASSIGN_OR_RETURN(
        s.threads_per_core,
        GetInt(host["threads_per_core"], "host.threads_per_core", 2, 2));
  }

  const YAML::Node& vms = root["vms"];
  if (!vms.IsSequence() || vms.size() == 0) {
    return Invalid("vms", "must be a non-empty list" + Line(vms));
  }
  int instances = 0;
  for (size_t i = 0; i < vms.size(); ++i) {
    VmSpec vm;
    ASSIGN_OR_RETURN(vm, ParseVm(vms[i], absl::StrCat("vms[", i, "]"), s.cores));
    instances += vm.count;
    if (instances > kMaxInstances) {
      return Invalid("vms", absl::StrCat("must describe at most ", kMaxInstances,
                                         " VMs in all"));
    }
    s.vms.push_back(std::move(vm));
  }
  std::set<std::string> names;
  for (const VmInstance& vm : ExpandInstances(s)) {
    if (!names.insert(vm.name).second) {
      return Invalid("vms", absl::StrCat("give two VMs the name '", vm.name,
                                         "' (names must be unique after "
                                         "expanding count)"));
    }
  }

  if (root["tenants"]) {
    const YAML::Node& tenants = root["tenants"];
    if (!tenants.IsSequence()) return Invalid("tenants", "must be a list");
    std::set<std::string> seen;
    for (size_t i = 0; i < tenants.size(); ++i) {
      TenantSpec tenant;
      std::string field = absl::StrCat("tenants[", i, "]");
      ASSIGN_OR_RETURN(tenant, ParseTenant(tenants[i], field));
      if (!seen.insert(tenant.policy.tenant_id()).second) {
        return Invalid(field + ".name", "repeats an earlier tenant");
      }
      s.tenants.push_back(std::move(tenant));
    }
  }
  if (root["conflicts"]) {
    const YAML::Node& conflicts = root["conflicts"];
    if (!conflicts.IsSequence()) return Invalid("conflicts", "must be a list");
    for (size_t i = 0; i < conflicts.size(); ++i) {
      std::string field = absl::StrCat("conflicts[", i, "]");
      std::vector<std::string> pair;
      ASSIGN_OR_RETURN(pair, GetIdList(conflicts[i], field));
      if (pair.size() != 2 || conflicts[i].size() != 2) {
        return Invalid(field, "must be a list of two different classes");
      }
      s.conflicts.emplace_back(pair[0], pair[1]);
    }
  }
  if (root["forced_idle_budget_pct"]) {
    ASSIGN_OR_RETURN(
        s.forced_idle_budget_pct,
        GetNumber(root["forced_idle_budget_pct"], "forced_idle_budget_pct", 0,
                  false, 100));
  }
  if (root["policy"]) {
    keys = CheckKeys(root["policy"], "policy", {"pin"});
    if (!keys.ok()) return keys;
    if (root["policy"]["pin"]) {
      ASSIGN_OR_RETURN(s.policy_may_pin,
                               GetBool(root["policy"]["pin"], "policy.pin"));
    }
  }
  return s;
}

}  // namespace

const char* WorkloadKindName(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kCpu: return "cpu";
    case WorkloadKind::kPeriodic: return "periodic";
    case WorkloadKind::kInteractive: return "interactive";
    case WorkloadKind::kAvx: return "avx";
  }
  return "cpu";
}

double Workload::DeclaredLoad() const {
  switch (kind) {
    case WorkloadKind::kCpu:
    case WorkloadKind::kAvx:
      return util;
    case WorkloadKind::kPeriodic:
      return std::min(1.0, burst_ms / period_ms);
    case WorkloadKind::kInteractive:
      return work_ms / (work_ms + think_ms);
  }
  return 1.0;
}

std::vector<VmInstance> ExpandInstances(const Scenario& scenario) {
  std::vector<VmInstance> out;
  for (size_t s = 0; s < scenario.vms.size(); ++s) {
    const VmSpec& spec = scenario.vms[s];
    for (int i = 0; i < spec.count; ++i) {
      VmInstance vm;
      vm.name = spec.count == 1 ? spec.name : absl::StrCat(spec.name, "-", i);
      vm.tenant = spec.tenant == kPerVmTenant ? vm.name : spec.tenant;
      vm.spec = static_cast<int>(s);
      vm.vcpus = spec.vcpus;
      vm.classes = spec.classes;
      vm.workload = spec.workload;
      vm.pin_cpus = spec.pin_cpus;
      vm.measure = spec.measure;
      vm.coupled = spec.coupled;
      out.push_back(std::move(vm));
    }
  }
  return out;
}

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view field,
                                              absl::string_view list) {
  absl::StatusOr<std::vector<int>> ids = cosched::ParseCpuList(list);
  if (!ids.ok()) {
    return Invalid(field, absl::StrCat("must be a list like 0-3,8 (", ids.status().message(), ")"));
  }
  if (ids->empty()) return Invalid(field, "must name at least one CPU, like 0-3,8");
  return ids;
}

absl::StatusOr<Scenario> ParseScenarioYaml(absl::string_view yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("the scenario is not valid YAML: ", e.what()));
  }
  try {
    return ParseRoot(root);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("the scenario has an unexpected shape: ", e.what()));
  }
}

}  // namespace cosched::policy
