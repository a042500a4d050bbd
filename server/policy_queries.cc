// DesiredState's read-only policy questions: Place (where would a new VM go)
// and ExplainVm (what would the policy engine do on a VM's host). Kept apart
// from desired_state.cc, which holds the writes.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "policy/scenario.h"
#include "policy/tradeoff.h"
#include "policy/trust_group.h"
#include "server/desired_state.h"
#include "server/desired_state_internal.h"

namespace cosched::server {
namespace {

using internal::PolicyOf;

// More vCPUs than any host csd accepts a topology of could sensibly run.
constexpr int kMaxPlaceVcpus = 1024;
// The id the view places a new VM under; it never reaches the store.
constexpr char kNewVmId[] = "new-vm";
// Explain reads a VM's load from this much recent stats.
constexpr int64_t kLoadWindowSeconds = 300;
// The engine's simulator needs some demand from every VM.
constexpr double kMinLoad = 0.01;
// The largest host the engine plans (as for scenario files), and the most
// vCPUs per hardware thread it simulates: beyond, a plan would take minutes.
constexpr int kMaxExplainCores = 1024;
constexpr int kMaxExplainVcpusPerThread = 8;

std::string AllowedLevels(const v1::TenantPolicy& p) {
  if (p.allowed_isolation().empty()) return "all";
  std::vector<std::string> names;
  for (int level : p.allowed_isolation()) {
    names.push_back(IsolationName(static_cast<v1::IsolationLevel>(level)));
  }
  return absl::StrJoin(names, ", ");
}

// Everything ExplainVm reads, from one consistent view of the store.
struct HostState {
  v1::VM vm;
  v1::Host host;
  std::vector<PlacedVm> vms;  // on the host, by vm_id
  std::map<std::string, v1::TenantPolicy> policies;
};

absl::StatusOr<HostState> ReadHostState(store::Store& store,
                                        const std::string& vm_id) {
  HostState state;
  RETURN_IF_ERROR(store.Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto vm, txn.GetVm(vm_id));
    if (!vm) return absl::NotFoundError(absl::StrCat("vm '", vm_id, "' is not tagged"));
    state.vm = *std::move(vm);
    const std::string& host_id = state.vm.host_id();
    if (host_id.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "vm '", vm_id, "' is on no host yet: no agent has reported it"));
    }
    ASSIGN_OR_RETURN(auto host, txn.GetHost(host_id));
    if (!host) {
      return absl::FailedPreconditionError(
          absl::StrCat("host '", host_id, "' of vm '", vm_id, "' is not registered"));
    }
    state.host = *std::move(host);
    store::VmFilter filter;
    filter.host_id = host_id;
    store::Page page;
    page.limit = 1000;
    while (true) {
      ASSIGN_OR_RETURN(auto batch, txn.ListVms(filter, page));
      for (const v1::VM& v : batch) {
        ASSIGN_OR_RETURN(PlacedVm placed, PlacedVmOf(txn, v));
        state.vms.push_back(std::move(placed));
        if (state.policies.count(v.tenant_id()) == 0) {
          ASSIGN_OR_RETURN(state.policies[v.tenant_id()], PolicyOf(txn, v.tenant_id()));
        }
      }
      if (static_cast<int>(batch.size()) < page.limit) break;
      page.after = batch.back().vm_id();
    }
    return absl::OkStatus();
  }));
  return state;
}

}  // namespace

absl::StatusOr<v1::PlaceResponse> DesiredState::Place(const v1::PlaceRequest& request) {
  if (!request.tenant_id().empty()) {
    RETURN_IF_ERROR(ValidateId("tenant_id", request.tenant_id()));
  }
  if (request.vcpus() < 1 || request.vcpus() > kMaxPlaceVcpus) {
    return absl::InvalidArgumentError(
        absl::StrCat("vcpus must be between 1 and ", kMaxPlaceVcpus));
  }
  std::vector<std::string> classes;
  RETURN_IF_ERROR(ValidateClasses("interference_classes",
                                  request.interference_classes(), &classes));
  if (!v1::IsolationLevel_IsValid(request.isolation())) {
    return absl::InvalidArgumentError(
        "isolation must be one of vm, tenant, none, dedicated (or unset)");
  }
  if (request.has_load() && !(request.load() >= 0 && request.load() <= 1)) {
    return absl::InvalidArgumentError(
        "load must be between 0 and 1 (share of a thread per vCPU), or unset for 1");
  }
  const std::string tenant =
      request.tenant_id().empty() ? policy::kDefaultTenant : request.tenant_id();
  v1::TenantPolicy tenant_policy;
  RETURN_IF_ERROR(store_->Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(tenant_policy, PolicyOf(txn, tenant));
    return absl::OkStatus();
  }));
  const v1::IsolationLevel level = request.isolation() == v1::ISOLATION_LEVEL_UNSPECIFIED
                                       ? tenant_policy.default_isolation()
                                       : request.isolation();
  if (!policy::IsAllowed(tenant_policy, level)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "isolation '", IsolationName(level), "' is not allowed by the policy of tenant '",
        tenant, "' (allowed: ", AllowedLevels(tenant_policy), ")"));
  }

  policy::PlacementRequest r;
  r.vm_id = kNewVmId;
  r.tenant = tenant;
  r.vcpus = request.vcpus();
  // `none` shares cookie 0 with strangers: placement treats it as `vm`.
  r.isolation = level == v1::ISOLATION_LEVEL_NONE ? v1::ISOLATION_LEVEL_VM : level;
  r.classes = std::move(classes);
  r.load = request.has_load() ? request.load() : 1.0;
  r.pinning = !request.has_pin() || request.pin();
  // `none` relies on nobody: any live, undrained host will do.
  const bool needs_isolation = level != v1::ISOLATION_LEVEL_NONE;
  ASSIGN_OR_RETURN(PlacementView::Answer answer,
                   placement_.Place(r, [this, needs_isolation](const v1::Host& host) {
                     return UnplaceableReason(host, needs_isolation);
                   }));

  v1::PlaceResponse response;
  response.set_host_id(answer.decision.host_id);
  for (int core : answer.decision.cores) response.add_cores(core);
  for (int cpu : answer.cpus) response.add_cpus(cpu);
  response.set_predicted_cost(answer.decision.predicted_cost);
  response.set_reason(answer.decision.reason);
  for (const policy::HostCandidate& c : answer.decision.ranked) {
    v1::PlacementCandidate* out = response.add_candidates();
    out->set_host_id(c.host_id);
    out->set_predicted_cost(c.predicted_cost);
    out->set_reason(c.reason);
  }
  response.set_isolation(level);
  return response;
}

absl::StatusOr<v1::ExplainVMResponse> DesiredState::ExplainVm(
    const v1::ExplainVMRequest& request) {
  RETURN_IF_ERROR(ValidateId("vm_id", request.vm_id()));
  ASSIGN_OR_RETURN(HostState state, ReadHostState(*store_, request.vm_id()));
  const v1::Topology& topology = state.host.topology();
  if (topology.cores().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "host '", state.host.host_id(), "' registered no topology"));
  }
  if (topology.cores_size() > kMaxExplainCores) {
    return absl::FailedPreconditionError(absl::StrCat(
        "host '", state.host.host_id(), "' has ", topology.cores_size(),
        " cores; the policy engine plans hosts of at most ", kMaxExplainCores));
  }
  int64_t host_vcpus = 0;
  for (const PlacedVm& vm : state.vms) host_vcpus += std::max(vm.vcpus, 1);
  if (host_vcpus > int64_t{kMaxExplainVcpusPerThread} * 2 * topology.cores_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "host '", state.host.host_id(), "' runs ", host_vcpus, " vCPUs on ",
        2 * topology.cores_size(), " threads; the policy engine simulates at most ",
        kMaxExplainVcpusPerThread, " per thread"));
  }
  for (const v1::Core& core : topology.cores()) {
    if (core.cpus_size() != 2) {
      return absl::FailedPreconditionError(absl::StrCat(
          "host '", state.host.host_id(), "' has cores with ", core.cpus_size(),
          " threads; the policy engine models 2 SMT siblings per core"));
    }
  }

  policy::Scenario scenario;
  scenario.name = state.host.host_id();
  scenario.duration_s = explain_predict_s_;
  scenario.cores = topology.cores_size();
  scenario.threads_per_core = 2;
  scenario.conflicts = conflicts_;
  int vcpus = 1;
  double load = 1.0;
  for (const PlacedVm& vm : state.vms) {
    policy::VmSpec spec;
    spec.name = vm.vm_id;
    spec.vcpus = std::max(vm.vcpus, 1);
    spec.tenant = vm.tenant_id;
    spec.classes = vm.classes;
    spec.workload.kind = policy::WorkloadKind::kCpu;
    // Measured load when the agent reported stats for it, else busy.
    v1::GetStatsResponse stats = stats_.QueryVms({vm.vm_id}, kLoadWindowSeconds);
    double util = 1.0;
    const int64_t span = stats.end_unix_ns() - stats.start_unix_ns();
    if (stats.windows() > 0 && span > 0) {
      util = static_cast<double>(stats.total().run_ns()) / span / spec.vcpus;
    }
    spec.workload.util = std::clamp(util, kMinLoad, 1.0);
    if (vm.vm_id == state.vm.vm_id()) {
      vcpus = spec.vcpus;
      load = spec.workload.util;
    }
    scenario.vms.push_back(std::move(spec));
  }
  for (const auto& [tenant, p] : state.policies) {
    policy::TenantSpec spec;
    spec.policy = p;
    if (p.has_forced_idle_budget_pct()) spec.forced_idle_budget_pct = p.forced_idle_budget_pct();
    scenario.tenants.push_back(std::move(spec));
  }
  policy::PlanOptions options;
  options.predict_s = explain_predict_s_;
  ASSIGN_OR_RETURN(policy::HostPlan plan,
                   policy::PlanHost(scenario, policy::SimParams(), options));
  auto decision = std::find_if(plan.vms.begin(), plan.vms.end(),
                               [&](const policy::VmDecision& d) {
                                 return d.vm == state.vm.vm_id();
                               });
  if (decision == plan.vms.end()) {
    return absl::InternalError(
        absl::StrCat("the policy engine made no decision for vm '", state.vm.vm_id(), "'"));
  }

  v1::ExplainVMResponse response;
  response.set_vm_id(state.vm.vm_id());
  response.set_tenant_id(state.vm.tenant_id());
  response.set_host_id(state.host.host_id());
  response.set_isolation(decision->isolation);
  response.set_trust_group(decision->trust_group);
  // The engine numbers CPUs like Linux on x86 (core c: c and c + cores);
  // the host's own ids come from its topology.
  std::vector<int> cpus;
  for (int cpu : decision->pin_cpus) {
    if (cpu < 0 || cpu >= scenario.cpus()) {
      return absl::InternalError(absl::StrCat("the policy engine pinned vm '",
                                              state.vm.vm_id(), "' to CPU ", cpu,
                                              " of a ", scenario.cpus(), "-CPU host"));
    }
    const v1::Core& core = topology.cores(cpu % scenario.cores);
    cpus.push_back(core.cpus(cpu / scenario.cores));
  }
  std::sort(cpus.begin(), cpus.end());
  for (int cpu : cpus) response.add_pin_cpus(cpu);
  for (const std::string& reason : decision->reasons) response.add_reasons(reason);
  response.set_chosen_layout(plan.chosen);
  for (const policy::CandidateScore& c : plan.candidates) {
    v1::LayoutCandidate* out = response.add_layouts();
    out->set_name(c.name);
    out->set_predicted_throughput(c.predicted_throughput);
    out->set_predicted_forced_idle_pct(c.predicted_forced_idle_pct);
    out->set_predicted_cross_tenant_pct(c.predicted_cross_tenant_pct);
    out->set_within_budget(c.within_budget);
  }
  for (const std::string& reason : plan.reasons) response.add_host_reasons(reason);
  if (plan.forced_idle_budget_pct.has_value()) {
    response.set_forced_idle_budget_pct(*plan.forced_idle_budget_pct);
  }
  response.set_host_vms(static_cast<int>(state.vms.size()));
  response.set_vcpus(vcpus);
  response.set_load(load);
  *response.mutable_current() = state.vm.assignment();
  return response;
}

}  // namespace cosched::server
