#include "server/engine/host_scenario.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "policy/simulator.h"
#include "server/state/write_support.h"

namespace cosched::server {
namespace {

// The engine's simulator needs some demand from every VM.
constexpr double kMinLoad = 0.01;
// The largest host the engine plans (as for scenario files), and the most
// vCPUs per hardware thread it simulates: beyond, a plan would take minutes.
constexpr int kMaxPlanCores = 1024;
constexpr int kMaxPlanVcpusPerThread = 8;

}  // namespace

absl::StatusOr<HostState> ReadHostState(store::Transaction& txn, const std::string& host_id) {
  HostState state;
  ASSIGN_OR_RETURN(auto host, txn.GetHost(host_id));
  if (!host) {
    return absl::FailedPreconditionError(absl::StrCat("host '", host_id, "' is not registered"));
  }
  state.host = *std::move(host);
  store::VmFilter filter;
  filter.host_id = host_id;
  ASSIGN_OR_RETURN(state.vms, store::ListAllVms(txn, filter));
  for (const v1::VM& vm : state.vms) {
    ASSIGN_OR_RETURN(PlacedVm placed, PlacedVmOf(txn, vm));
    state.placed.push_back(std::move(placed));
    if (state.policies.count(vm.tenant_id()) == 0) {
      ASSIGN_OR_RETURN(state.policies[vm.tenant_id()], internal::PolicyOf(txn, vm.tenant_id()));
    }
  }
  return state;
}

absl::StatusOr<policy::Scenario> HostScenario(
    const HostState& state, const std::vector<std::pair<std::string, std::string>>& conflicts,
    const StatsSource& stats, double predict_s) {
  const v1::Topology& topology = state.host.topology();
  const std::string& host_id = state.host.host_id();
  if (topology.cores().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("host '", host_id, "' registered no topology"));
  }
  if (topology.cores_size() > kMaxPlanCores) {
    return absl::FailedPreconditionError(
        absl::StrCat("host '", host_id, "' has ", topology.cores_size(),
                     " cores; the policy engine plans hosts of at most ", kMaxPlanCores));
  }
  int64_t host_vcpus = 0;
  for (const PlacedVm& vm : state.placed) host_vcpus += std::max(vm.vcpus, 1);
  if (host_vcpus > int64_t{kMaxPlanVcpusPerThread} * 2 * topology.cores_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "host '", host_id, "' runs ", host_vcpus, " vCPUs on ", 2 * topology.cores_size(),
        " threads; the policy engine simulates at most ", kMaxPlanVcpusPerThread,
        " per thread"));
  }
  for (const v1::Core& core : topology.cores()) {
    if (core.cpus_size() != 2) {
      return absl::FailedPreconditionError(
          absl::StrCat("host '", host_id, "' has cores with ", core.cpus_size(),
                       " threads; the policy engine models 2 SMT siblings per core"));
    }
  }

  policy::Scenario scenario;
  scenario.name = host_id;
  scenario.duration_s = predict_s;
  scenario.cores = topology.cores_size();
  scenario.threads_per_core = 2;
  scenario.conflicts = conflicts;
  for (const PlacedVm& vm : state.placed) {
    policy::VmSpec spec;
    spec.name = vm.vm_id;
    spec.vcpus = std::max(vm.vcpus, 1);
    spec.tenant = vm.tenant_id;
    spec.classes = vm.classes;
    // Where others pin it: predicted there, and never pinned by the engine.
    if (!vm.vcpu_affinity.empty()) spec.pin_cpus = ScenarioCpusOf(topology, vm.vcpu_affinity);
    spec.workload.kind = policy::WorkloadKind::kCpu;
    // Measured load when the agent reported stats for it, else busy.
    v1::GetStatsResponse measured = stats.QueryVms({vm.vm_id}, kLoadWindowSeconds);
    double util = 1.0;
    const int64_t span = measured.end_unix_ns() - measured.start_unix_ns();
    if (measured.windows() > 0 && span > 0) {
      util = static_cast<double>(measured.total().run_ns()) / span / spec.vcpus;
    }
    spec.workload.util = std::clamp(util, kMinLoad, 1.0);
    scenario.vms.push_back(std::move(spec));
  }
  for (const auto& [tenant, p] : state.policies) {
    policy::TenantSpec spec;
    spec.policy = p;
    if (p.has_forced_idle_budget_pct()) spec.forced_idle_budget_pct = p.forced_idle_budget_pct();
    scenario.tenants.push_back(std::move(spec));
  }
  return scenario;
}

namespace {

// The CPU ids of each core, ascending.
std::vector<std::vector<int>> SortedCores(const v1::Topology& topology) {
  std::vector<std::vector<int>> cores;
  for (const v1::Core& core : topology.cores()) {
    cores.emplace_back(core.cpus().begin(), core.cpus().end());
    std::sort(cores.back().begin(), cores.back().end());
  }
  return cores;
}

}  // namespace

std::vector<int> HostCpusOf(const v1::Topology& topology, const std::vector<int>& scenario_cpus) {
  const std::vector<std::vector<int>> cores = SortedCores(topology);
  std::vector<int> out;
  if (cores.empty()) return out;
  const int n = static_cast<int>(cores.size());
  for (int c : scenario_cpus) {
    if (c < 0) continue;
    const std::vector<int>& threads = cores[c % n];
    if (c / n < static_cast<int>(threads.size())) out.push_back(threads[c / n]);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> ScenarioCpusOf(const v1::Topology& topology, const std::vector<int>& host_cpus) {
  const std::vector<std::vector<int>> cores = SortedCores(topology);
  const int n = static_cast<int>(cores.size());
  std::map<int, int> scenario_of;
  for (int core = 0; core < n; ++core) {
    for (int t = 0; t < static_cast<int>(cores[core].size()); ++t) {
      scenario_of[cores[core][t]] = t * n + core;
    }
  }
  std::vector<int> out;
  for (int cpu : host_cpus) {
    if (auto it = scenario_of.find(cpu); it != scenario_of.end()) out.push_back(it->second);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

v1::MeasuredLayout MeasuredFrom(const v1::GetStatsResponse& host, int cpus) {
  v1::MeasuredLayout measured;
  measured.set_windows(host.windows());
  const int64_t span = host.end_unix_ns() - host.start_unix_ns();
  if (host.windows() == 0 || span <= 0 || cpus <= 0) return measured;
  const v1::SiblingShare& total = host.total();
  if (total.forced_idle_known()) {
    measured.set_forced_idle_pct(100.0 * static_cast<double>(total.forced_idle_ns()) /
                                 (static_cast<double>(span) * cpus));
  }
  if (total.run_ns() > 0) {
    measured.set_foreign_pct(100.0 * static_cast<double>(total.foreign_ns()) /
                             static_cast<double>(total.run_ns()));
    // As the simulator counts a CPU-bound thread: full speed alone (or
    // beside an unknown sibling), the paired share beside a busy one.
    const double paired = static_cast<double>(total.same_ns()) + total.foreign_ns();
    const double work = static_cast<double>(total.run_ns()) -
                        (1 - policy::SimParams().smt_share_cpu) * paired;
    measured.set_throughput(std::max(0.0, work) / static_cast<double>(span));
  }
  return measured;
}

v1::MeasuredLayout MeasuredOnHost(const StatsSource& stats, const std::string& host_id,
                                  int cpus, int64_t span_seconds) {
  return MeasuredFrom(stats.QueryHost(host_id, span_seconds), cpus);
}

v1::MeasuredLayout MeasuredOnHostSince(const StatsSource& stats, const std::string& host_id,
                                       int cpus, absl::Time since) {
  return MeasuredFrom(stats.QueryHostSince(host_id, absl::ToUnixNanos(since)), cpus);
}

}  // namespace cosched::server
