// What the policy engine keeps of each host between re-plans
// (server/engine/engine_loop.h): its hysteresis gate, its budget watch, and
// the predictions of its moves it may reuse.
#ifndef COSCHED_SERVER_ENGINE_HOST_CONTROL_H_
#define COSCHED_SERVER_ENGINE_HOST_CONTROL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "policy/budget_watch.h"
#include "policy/replan_gate.h"
#include "policy/tradeoff.h"
#include "server/engine/engine_options.h"

namespace cosched::server {

// The predictions of one of a host's moves and what they were made
// from. A host whose moves min_gain refused is proposed the same moves
// round after round: their predictions are reused while its VMs, their
// classes, vCPUs and pinning, both layouts and the tenants' budgets are
// the same and the VMs' measured loads stayed near the loads they were
// predicted at (LoadsNear in engine_loop.cc).
struct PredictionMemo {
  std::vector<double> loads;
  policy::CandidateScore now;
  policy::CandidateScore next;
  double gain = 0;
  bool screened = false;
  // HostControl::predicts when it was last used.
  uint64_t used_at = 0;
};

// What the engine keeps of each host between re-plans.
struct HostControl {
  explicit HostControl(const EngineOptions& options)
      : gate(options.hysteresis), watch(options.budget) {}
  policy::ReplanGate gate;
  policy::BudgetWatch watch;
  // By a hash of everything a move's prediction depends on but the loads;
  // at most kMaxMemos, the least recently used dropped first.
  std::map<uint64_t, PredictionMemo> memos;
  uint64_t predicts = 0;
  // The host's moves are tried one per re-plan, in turn
  // (policy::EngineMoves): the next one's index, modulo their number. A
  // triggered re-plan starts again at 0.
  size_t next_move = 0;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_ENGINE_HOST_CONTROL_H_
