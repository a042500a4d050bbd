// Place and ExplainVM: the policy's read-only questions.
#include "server/engine/policy_queries.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "policy/scenario.h"
#include "policy/tradeoff.h"
#include "policy/trust_group.h"
#include "server/engine/host_scenario.h"
#include "server/engine/plan_report.h"

namespace cosched::server {
namespace {

// More vCPUs than any host csd accepts a topology of could sensibly run.
constexpr int kMaxPlaceVcpus = 1024;
// The id the view places a new VM under; it never reaches the store.
constexpr char kNewVmId[] = "new-vm";

std::string AllowedLevels(const v1::TenantPolicy& p) {
  if (p.allowed_isolation().empty()) return "all";
  std::vector<std::string> names;
  for (int level : p.allowed_isolation()) {
    names.push_back(IsolationName(static_cast<v1::IsolationLevel>(level)));
  }
  return absl::StrJoin(names, ", ");
}

// Everything ExplainVm reads, from one consistent view of the store.
struct ExplainState {
  v1::VM vm;
  HostState host;
};

absl::StatusOr<ExplainState> ReadExplainState(store::Store& store, const std::string& vm_id) {
  ExplainState state;
  RETURN_IF_ERROR(store.Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto vm, txn.GetVm(vm_id));
    if (!vm) return absl::NotFoundError(absl::StrCat("vm '", vm_id, "' is not tagged"));
    state.vm = *std::move(vm);
    const std::string& host_id = state.vm.host_id();
    if (host_id.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "vm '", vm_id, "' is on no host yet: no agent has reported it"));
    }
    auto host = ReadHostState(txn, host_id);
    if (!host.ok() && host.status().code() == absl::StatusCode::kFailedPrecondition) {
      return absl::FailedPreconditionError(
          absl::StrCat("host '", host_id, "' of vm '", vm_id, "' is not registered"));
    }
    if (!host.ok()) return host.status();
    state.host = *std::move(host);
    return absl::OkStatus();
  }));
  return state;
}

}  // namespace

absl::StatusOr<v1::PlaceResponse> PolicyQueries::Place(const v1::PlaceRequest& request) {
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
  // From the view, as the hosts and VMs are: Place answers while the store
  // cannot be reached.
  const v1::TenantPolicy tenant_policy = placement_.PolicyOf(tenant);
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
                     return hosts_.UnplaceableReason(host, needs_isolation);
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

void PolicyQueries::RecommendHost(const v1::VM& vm, int vcpus, double load,
                                  v1::ExplainVMResponse& response) const {
  policy::PlacementRequest r;
  r.vm_id = kNewVmId;
  r.tenant = vm.tenant_id();
  r.vcpus = vcpus;
  const v1::IsolationLevel level = vm.assignment().isolation();
  r.isolation = level == v1::ISOLATION_LEVEL_NONE ? v1::ISOLATION_LEVEL_VM : level;
  r.classes.assign(vm.interference_classes().begin(), vm.interference_classes().end());
  r.load = load;
  // Only dedicated VMs are pinned where csd decides layouts.
  r.pinning = level == v1::ISOLATION_LEVEL_DEDICATED;
  const std::string& own = vm.host_id();
  auto answer = placement_.Place(r, [this, &own](const v1::Host& host) {
    return host.host_id() == own ? std::string("the VM's own host") : hosts_.UnplaceableReason(host, true);
  });
  if (!answer.ok()) {
    response.add_host_reasons(absl::StrCat("the host is over its forced-idle budget and no other "
                                           "host can take this VM: ",
                                           answer.status().message()));
    return;
  }
  response.set_recommended_host(answer->decision.host_id);
  response.add_host_reasons(absl::StrFormat(
      "the host is over its forced-idle budget with every allowed layout: Place would choose "
      "host '%s' for this VM (predicted cost %.3f); csd never migrates VMs",
      answer->decision.host_id, answer->decision.predicted_cost));
}

absl::StatusOr<v1::ExplainVMResponse> PolicyQueries::ExplainVm(
    const v1::ExplainVMRequest& request) {
  RETURN_IF_ERROR(ValidateId("vm_id", request.vm_id()));
  ASSIGN_OR_RETURN(ExplainState explain, ReadExplainState(store_, request.vm_id()));
  const HostState& state = explain.host;
  const v1::Topology& topology = state.host.topology();
  ASSIGN_OR_RETURN(policy::Scenario scenario,
                   HostScenario(state, conflicts_, stats_, explain_predict_s_));
  int vcpus = 1;
  double load = 1.0;
  for (const policy::VmSpec& spec : scenario.vms) {
    if (spec.name == explain.vm.vm_id()) {
      vcpus = spec.vcpus;
      load = spec.workload.util;
    }
  }
  policy::PlanOptions options;
  options.predict_s = explain_predict_s_;
  ASSIGN_OR_RETURN(policy::HostPlan plan,
                   policy::PlanHost(scenario, policy::SimParams(), options));
  auto decision = std::find_if(plan.vms.begin(), plan.vms.end(),
                               [&](const policy::VmDecision& d) {
                                 return d.vm == explain.vm.vm_id();
                               });
  if (decision == plan.vms.end()) {
    return absl::InternalError(
        absl::StrCat("the policy engine made no decision for vm '", explain.vm.vm_id(), "'"));
  }

  v1::ExplainVMResponse response;
  response.set_vm_id(explain.vm.vm_id());
  response.set_tenant_id(explain.vm.tenant_id());
  response.set_host_id(state.host.host_id());
  response.set_isolation(decision->isolation);
  response.set_trust_group(decision->trust_group);
  // The engine numbers CPUs like Linux on x86 (core c: c and c + cores);
  // the host's own ids come from its topology.
  std::vector<int> cpus;
  for (int cpu : decision->pin_cpus) {
    if (cpu < 0 || cpu >= scenario.cpus()) {
      return absl::InternalError(absl::StrCat("the policy engine pinned vm '",
                                              explain.vm.vm_id(), "' to CPU ", cpu,
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
  *response.mutable_current() = explain.vm.assignment();
  *response.mutable_decision() = explain.vm.decision();
  v1::MeasuredLayout measured = MeasuredOnHost(stats_, state.host.host_id(), scenario.cpus(),
                                               kLoadWindowSeconds);
  if (explain.vm.decision().has_predicted() && measured.has_forced_idle_pct()) {
    measured.set_forced_idle_error_pct(measured.forced_idle_pct() -
                                       explain.vm.decision().predicted().forced_idle_pct());
  }
  *response.mutable_measured() = std::move(measured);
  if (auto report = ReportHost(state, stats_)) *response.mutable_host_plan() = *std::move(report);
  if (!state.host.budget_unmet().empty()) RecommendHost(explain.vm, vcpus, load, response);
  return response;
}

}  // namespace cosched::server
