// The policy's read-only questions: Place (where would a new VM go) and
// ExplainVM (what would the policy engine do on a VM's host).
#ifndef COSCHED_SERVER_ENGINE_POLICY_QUERIES_H_
#define COSCHED_SERVER_ENGINE_POLICY_QUERIES_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cosched/v1/control_plane.pb.h"
#include "server/state/host_status.h"
#include "server/state/placement_view.h"
#include "server/stats/stats_source.h"
#include "store/store.h"

namespace cosched::server {

// Thread-safe.
class PolicyQueries {
 public:
  // `conflicts`: csd.yaml class_conflicts (the pairs of interference
  // classes that must not share a core); `stats`: what the engine reads.
  PolicyQueries(store::Store& store, const PlacementView& placement, const HostStatus& hosts,
                const StatsSource& stats, std::vector<std::pair<std::string, std::string>> conflicts)
      : store_(store), placement_(placement), hosts_(hosts), stats_(stats),
        conflicts_(std::move(conflicts)) {}

  // Ranks hosts for a new VM (ControlPlane.Place): validates every field,
  // takes the tenant's default level when none is asked, and answers from
  // the placement view. Creates nothing.
  absl::StatusOr<v1::PlaceResponse> Place(const v1::PlaceRequest& request);
  // The policy engine's decision for a VM on its host (ControlPlane.ExplainVM).
  // Runs the simulator: tens of milliseconds to seconds on big hosts.
  // FAILED_PRECONDITION also for hosts the engine cannot plan in reasonable
  // time (over 1024 cores, or over 8 vCPUs per hardware thread).
  absl::StatusOr<v1::ExplainVMResponse> ExplainVm(const v1::ExplainVMRequest& request);
  // Simulated seconds each ExplainVm prediction runs (default 5); the
  // fuzzer shortens it. Set before serving.
  void set_explain_predict_seconds(double seconds) { explain_predict_s_ = seconds; }

 private:
  // ExplainVm's recommendation for a VM on a host whose budget no layout
  // meets: Place's choice among the other hosts, into `response`.
  void RecommendHost(const v1::VM& vm, int vcpus, double load,
                     v1::ExplainVMResponse& response) const;

  store::Store& store_;
  const PlacementView& placement_;
  const HostStatus& hosts_;
  const StatsSource& stats_;
  const std::vector<std::pair<std::string, std::string>> conflicts_;
  double explain_predict_s_ = 5;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_ENGINE_POLICY_QUERIES_H_
