// EngineLoop's dry-run answers (csctl plan): what the engine would do on
// every host it manages, and how its past decisions measured up. They read
// and propose as a pass does, host by host, and write nothing.
#include <algorithm>
#include <chrono>
#include <iterator>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "common/validation.h"
#include "server/engine/engine_loop.h"
#include "server/engine/host_scenario.h"
#include "server/engine/plan_report.h"
#include "server/state/write_support.h"
#include "store/store.h"

namespace cosched::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A host's state for a dry run, as recent as what the caller's Read of the
// fleet saw (Store::ReadRecent); nullopt for a host removed since it was
// named.
absl::StatusOr<std::optional<HostState>> ReadHost(store::Store& store,
                                                  const std::string& host_id) {
  HostState state;
  absl::Status read = store.ReadRecent([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(state, ReadHostState(txn, host_id));
    return absl::OkStatus();
  });
  if (read.code() == absl::StatusCode::kFailedPrecondition) return std::nullopt;
  RETURN_IF_ERROR(read);
  return std::optional<HostState>(std::move(state));
}

}  // namespace

absl::StatusOr<v1::PlanResponse> EngineLoop::Plan(const v1::PlanRequest& request) {
  if (!request.tenant_id().empty()) RETURN_IF_ERROR(ValidateId("tenant_id", request.tenant_id()));
  if (request.report()) return Report(request.tenant_id());
  ASSIGN_OR_RETURN(std::set<std::string> hosts, ManagedHosts(true, request.tenant_id()));
  v1::PlanResponse response;
  const SteadyClock::time_point now = hooks_.clock ? hooks_.clock() : SteadyClock::now();
  for (const std::string& host_id : hosts) {
    // The engine's lock a host at a time: a fleet-wide Plan must not hold
    // off the engine's passes and triggers for its whole run (issue #32).
    std::lock_guard<std::mutex> lock(pass_mu_);
    // At least what ManagedHosts' Read saw: the Plan is as of the request.
    ASSIGN_OR_RETURN(std::optional<HostState> read, ReadHost(store_, host_id));
    if (!read) continue;
    const HostState& state = *read;
    auto proposal = Propose(state, ControlOf(state, now), true, now);
    if (!proposal.ok()) {
      v1::HostLayoutPlan* failed = response.add_hosts();
      failed->set_host_id(host_id);
      failed->add_reasons(absl::StrCat("cannot plan: ", proposal.status().message()));
      continue;
    }
    if (*proposal) *response.add_hosts() = std::move((*proposal)->plan);
  }
  return response;
}

absl::StatusOr<v1::PlanResponse> EngineLoop::Report(const std::string& tenant) {
  // Every host where a VM carries an engine decision, also of tenants that
  // left mode auto since: their layouts are still the engine's.
  std::set<std::string> hosts;
  RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
    hosts.clear();
    std::set<std::string> of_tenant;
    ASSIGN_OR_RETURN(auto vms, store::ListAllVms(txn, store::VmFilter()));
    for (const v1::VM& vm : vms) {
      if (vm.host_id().empty()) continue;
      if (vm.decision().decided_by() == v1::DECIDED_BY_ENGINE) hosts.insert(vm.host_id());
      if (vm.tenant_id() == tenant) of_tenant.insert(vm.host_id());
    }
    if (!tenant.empty()) {
      std::set<std::string> both;
      std::set_intersection(hosts.begin(), hosts.end(), of_tenant.begin(), of_tenant.end(),
                            std::inserter(both, both.end()));
      hosts = std::move(both);
    }
    return absl::OkStatus();
  }));
  std::vector<v1::HostPlanReport> reports;
  for (const std::string& host_id : hosts) {
    // At least what the Read of the hosts saw.
    ASSIGN_OR_RETURN(std::optional<HostState> state, ReadHost(store_, host_id));
    if (!state) continue;
    if (auto report = ReportHost(*state, stats_)) reports.push_back(*std::move(report));
  }
  v1::PlanResponse response;
  *response.mutable_summary() = Summarize(reports);
  for (v1::HostPlanReport& r : reports) *response.add_reports() = std::move(r);
  return response;
}

}  // namespace cosched::server
