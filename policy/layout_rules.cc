#include "policy/layout_rules.h"

#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/core_budget.h"
#include "common/names.h"
#include "policy/trust_group.h"

namespace cosched::policy {
namespace {

absl::Status Broken(absl::string_view what) {
  return absl::FailedPreconditionError(what);
}

const v1::TenantPolicy& PolicyOf(const Scenario& scenario, const std::string& tenant,
                                 std::map<std::string, v1::TenantPolicy>& defaults) {
  for (const TenantSpec& t : scenario.tenants) {
    if (t.policy.tenant_id() == tenant) return t.policy;
  }
  auto [it, inserted] = defaults.try_emplace(tenant, DefaultTenantPolicy(tenant));
  return it->second;
}

// Rules 1 and 2, VM by VM.
absl::Status CheckTenants(const Scenario& scenario, const std::vector<VmInstance>& vms,
                          const std::vector<VmDecision>& layout) {
  std::map<std::string, v1::TenantPolicy> defaults;
  std::map<std::string, std::string> tenant_of_group;
  for (size_t v = 0; v < vms.size(); ++v) {
    const VmDecision& d = layout[v];
    const v1::TenantPolicy& policy = PolicyOf(scenario, vms[v].tenant, defaults);
    if (!IsAllowed(policy, d.isolation)) {
      return Broken(absl::StrCat("VM '", d.vm, "' is at level ", IsolationName(d.isolation),
                                 ", which tenant '", vms[v].tenant, "' does not allow"));
    }
    if (d.isolation == v1::ISOLATION_LEVEL_NONE) {
      if (!d.trust_group.empty()) {
        return Broken(absl::StrCat("VM '", d.vm, "' is at level none but in group '",
                                   d.trust_group, "'"));
      }
      continue;
    }
    if (!absl::StartsWith(d.trust_group, absl::StrCat(vms[v].tenant, "/"))) {
      return Broken(absl::StrCat("VM '", d.vm, "' of tenant '", vms[v].tenant,
                                 "' is in group '", d.trust_group,
                                 "', which is not that tenant's"));
    }
    auto [it, inserted] = tenant_of_group.try_emplace(d.trust_group, vms[v].tenant);
    if (it->second != vms[v].tenant) {
      return Broken(absl::StrCat("group '", d.trust_group, "' holds VMs of tenants '",
                                 it->second, "' and '", vms[v].tenant, "'"));
    }
  }
  return absl::OkStatus();
}

// Rule 3: the classes of each group, against every conflicting pair.
absl::Status CheckClasses(const Scenario& scenario, const std::vector<VmInstance>& vms,
                          const std::vector<VmDecision>& layout) {
  std::map<std::string, std::map<std::string, std::string>> classes_of_group;  // class -> a VM
  for (size_t v = 0; v < vms.size(); ++v) {
    if (layout[v].trust_group.empty()) continue;
    for (const std::string& c : vms[v].classes) {
      classes_of_group[layout[v].trust_group].try_emplace(c, layout[v].vm);
    }
  }
  for (const auto& [group, classes] : classes_of_group) {
    for (const auto& [a, b] : scenario.conflicts) {
      auto with_a = classes.find(a), with_b = classes.find(b);
      if (with_a != classes.end() && with_b != classes.end()) {
        return Broken(absl::StrCat("group '", group, "' holds class '", a, "' (VM '",
                                   with_a->second, "') and the conflicting class '", b,
                                   "' (VM '", with_b->second, "')"));
      }
    }
  }
  return absl::OkStatus();
}

// Rule 4. CPU c is on core c % cores (Linux's numbering on x86).
absl::Status CheckDedicated(const Scenario& scenario, const std::vector<VmInstance>& vms,
                            const std::vector<VmDecision>& layout) {
  const int cores = scenario.cores, tpc = scenario.threads_per_core;
  std::map<int, std::string> owner;  // dedicated core -> its VM
  int held = 0;
  for (size_t v = 0; v < vms.size(); ++v) {
    const VmDecision& d = layout[v];
    if (d.isolation != v1::ISOLATION_LEVEL_DEDICATED) continue;
    const int need = CoresFor(vms[v].vcpus, tpc);
    std::set<int> its_cores;
    for (int cpu : d.pin_cpus) its_cores.insert(cpu % cores);
    // All of each core's threads, or only its first ones (a layout that
    // trades SMT away): either way the cores are the VM's alone.
    if (static_cast<int>(its_cores.size()) != need) {
      return Broken(absl::StrCat("dedicated VM '", d.vm, "' of ", vms[v].vcpus,
                                 " vCPUs must hold exactly ", need, " whole cores; it is pinned to ",
                                 its_cores.size()));
    }
    for (int core : its_cores) {
      auto [it, inserted] = owner.try_emplace(core, d.vm);
      if (!inserted) {
        return Broken(absl::StrCat("dedicated VMs '", it->second, "' and '", d.vm,
                                   "' both hold core ", core));
      }
    }
    held += need;
  }
  if (owner.empty()) return absl::OkStatus();
  if (held > GiveableCores(cores)) {
    return Broken(absl::StrCat("dedicated VMs hold ", held, " of ", cores, " cores; at most ",
                               GiveableCores(cores), " may be given away (",
                               kSharedCoresKept, " stays shared)"));
  }
  for (size_t v = 0; v < vms.size(); ++v) {
    const VmDecision& d = layout[v];
    if (d.isolation == v1::ISOLATION_LEVEL_DEDICATED) continue;
    if (d.pin_cpus.empty()) {
      return Broken(absl::StrCat("VM '", d.vm,
                                 "' is not pinned, so it may run on the cores of dedicated VM '",
                                 owner.begin()->second, "'"));
    }
    for (int cpu : d.pin_cpus) {
      auto it = owner.find(cpu % cores);
      if (it != owner.end()) {
        return Broken(absl::StrCat("VM '", d.vm, "' may run on CPU ", cpu, ", on core ",
                                   it->first, " of dedicated VM '", it->second, "'"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLayout(const Scenario& scenario, const std::vector<VmDecision>& layout) {
  const std::vector<VmInstance> vms = ExpandInstances(scenario);
  if (layout.size() != vms.size()) {
    return absl::InvalidArgumentError(absl::StrCat("layout has ", layout.size(),
                                                   " VMs; the host has ", vms.size()));
  }
  for (size_t v = 0; v < vms.size(); ++v) {
    if (layout[v].vm != vms[v].name) {
      return absl::InvalidArgumentError(absl::StrCat("layout[", v, "] is VM '", layout[v].vm,
                                                     "'; the host's VM there is '",
                                                     vms[v].name, "'"));
    }
  }
  if (absl::Status s = CheckTenants(scenario, vms, layout); !s.ok()) return s;
  if (absl::Status s = CheckClasses(scenario, vms, layout); !s.ok()) return s;
  return CheckDedicated(scenario, vms, layout);
}

}  // namespace cosched::policy
