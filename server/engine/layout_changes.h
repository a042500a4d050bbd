// What a re-plan of one host changes, in the terms the engine writes and
// explains (EngineLoop, engine_loop.h): the host's layout as assigned now,
// the pins the engine itself sets, each VM a planned layout changes, and
// the words and figures of a move.
#ifndef COSCHED_SERVER_ENGINE_LAYOUT_CHANGES_H_
#define COSCHED_SERVER_ENGINE_LAYOUT_CHANGES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cosched/v1/control_plane.pb.h"
#include "cosched/v1/types.pb.h"
#include "policy/tradeoff.h"
#include "server/engine/host_scenario.h"

namespace cosched::server {

// The prediction of a scored layout, as VM records keep it.
v1::PredictedLayout Predicted(const policy::CandidateScore& score, double gain);

// The least forced-idle budget of the tenants on the host; none: no budget.
std::optional<double> LeastBudget(const HostState& state);

// The host's VMs as they are assigned now, in state.vms' order.
std::vector<policy::VmDecision> CurrentLayout(const HostState& state);

// The engine's pins as written: none for a VM that runs where it would
// unpinned (a dedicated VM, one others pin, or one on all shared CPUs).
class EnginePins {
 public:
  static absl::StatusOr<EnginePins> Make(const policy::Scenario& scenario,
                                         const v1::Topology& topology,
                                         const std::vector<policy::VmDecision>& planned);
  // The host CPUs the engine pins VM `v` of `layout` to; empty: none.
  std::vector<int> Of(const std::vector<policy::VmDecision>& layout, size_t v) const;

 private:
  explicit EnginePins(const v1::Topology& topology) : topology_(topology) {}
  const v1::Topology& topology_;
  std::vector<policy::VmDecision> unpinned_;
};

// Adds to `plan` each VM whose level, group or pins `planned` changes;
// answers their indexes.
std::vector<size_t> AddChanges(const HostState& state,
                               const std::vector<policy::VmDecision>& current,
                               const std::vector<policy::VmDecision>& planned,
                               const EnginePins& pins, v1::HostLayoutPlan& plan);

// The plan's reason for a move: what it is predicted to do against now.
std::string MoveSummary(const policy::LayoutProposal& chosen);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_ENGINE_LAYOUT_CHANGES_H_
