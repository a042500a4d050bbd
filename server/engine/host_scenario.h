// A host as the policy engine sees it: csd's records of the host, the VMs
// it owns and their tenants' policies, read in one transaction, and the
// policy::Scenario built from them with each VM's measured load. Shared by
// ExplainVM (policy_queries.cc) and the engine's loop (engine_loop.cc), so
// that both predict the same host the same way.
#ifndef COSCHED_SERVER_ENGINE_HOST_SCENARIO_H_
#define COSCHED_SERVER_ENGINE_HOST_SCENARIO_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosched/v1/control_plane.pb.h"
#include "cosched/v1/types.pb.h"
#include "policy/scenario.h"
#include "server/state/placement_view.h"
#include "server/stats/stats_aggregator.h"
#include "store/store.h"

namespace cosched::server {

struct HostState {
  v1::Host host;
  // The VMs the host owns (VM.host_id), by vm_id; placed[i] is vms[i].
  std::vector<v1::VM> vms;
  std::vector<PlacedVm> placed;
  std::map<std::string, v1::TenantPolicy> policies;
};

// FAILED_PRECONDITION when the host is not registered; the store's error.
absl::StatusOr<HostState> ReadHostState(store::Transaction& txn, const std::string& host_id);

// Load per vCPU is measured from this much recent stats.
inline constexpr int64_t kLoadWindowSeconds = 300;

// The scenario of the host, VMs in `state.vms` order, each a CPU-bound
// workload at its load measured over the last kLoadWindowSeconds (1 when
// not reported), pinned where its agent found others pin it
// (PlacedVm::vcpu_affinity), predicted for `predict_s` simulated seconds.
// FAILED_PRECONDITION for hosts the engine cannot plan in reasonable time
// (no topology, over 1024 cores, over 8 vCPUs per hardware thread) or
// whose cores are not 2 SMT siblings each.
absl::StatusOr<policy::Scenario> HostScenario(
    const HostState& state, const std::vector<std::pair<std::string, std::string>>& conflicts,
    const StatsSource& stats, double predict_s);

// The scenario names a host's CPUs as the simulator does: CPU c is thread
// c / cores of core c % cores (HostScenario's cores are the topology's, in
// its order; a core's threads in ascending CPU id). These turn a list of
// them into the host's Linux CPU ids and back, ascending; ids the topology
// does not have are left out.
std::vector<int> HostCpusOf(const v1::Topology& topology, const std::vector<int>& scenario_cpus);
std::vector<int> ScenarioCpusOf(const v1::Topology& topology, const std::vector<int>& host_cpus);

// What the host's agent measured over the last `span_seconds`: forced idle
// in percent of the host's CPU time (`cpus` of them; unset when no window
// had it: schedstats off), foreign share of its VMs' run time and the
// throughput proxy (MeasuredLayout.throughput). windows == 0: nothing
// reported.
v1::MeasuredLayout MeasuredOnHost(const StatsSource& stats, const std::string& host_id,
                                  int cpus, int64_t span_seconds);
// The same over the windows that began at or after `since`, at most the
// last hour (StatsAggregator::QueryHostSince).
v1::MeasuredLayout MeasuredOnHostSince(const StatsSource& stats, const std::string& host_id,
                                       int cpus, absl::Time since);
// The figures of a host's stats (QueryHost's answer) on `cpus` CPUs.
v1::MeasuredLayout MeasuredFrom(const v1::GetStatsResponse& host, int cpus);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_ENGINE_HOST_SCENARIO_H_
