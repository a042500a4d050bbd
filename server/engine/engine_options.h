// The settings of csd's policy engine (csd.yaml's `engine:` block), apart
// from the loop that uses them so that csd's options can carry them.
#ifndef COSCHED_SERVER_ENGINE_ENGINE_OPTIONS_H_
#define COSCHED_SERVER_ENGINE_ENGINE_OPTIONS_H_

#include <chrono>

#include "absl/status/status.h"
#include "cosched/v1/config.pb.h"
#include "policy/budget_watch.h"
#include "policy/replan_gate.h"

namespace cosched::server {

struct EngineOptions {
  // Every host with VMs the engine manages is re-planned this often, with
  // the stats reported since; changes on a host re-plan it at once.
  std::chrono::seconds replan_interval{60};
  policy::HysteresisOptions hysteresis;
  // Re-plan intervals of measured forced idle over budget before the
  // engine acts on the measurement.
  policy::BudgetWatchOptions budget;
  // Simulated seconds of each prediction: long enough to average bursts
  // out, short enough that a host plans in milliseconds.
  double predict_s = 1;
  // Simulated seconds of the screen that ends a prediction early when the
  // answer is clear (policy::PlanOptions::screen_s); 0: off. Both defaults
  // are measured in docs/benchmarks.md ("Re-planning a fleet").
  double screen_s = 0.35;
  // Hosts planned at once in a pass. 1 unless set: csd.yaml's default is
  // DefaultPlannerThreads().
  int planner_threads = 1;
  // A host's predictions stand while its VMs' loads stay near those they
  // were made at: no VM's load per vCPU moved more than
  // reuse_vm_load_move, and all of them together (each VM's vCPUs times
  // its move) at most reuse_host_load_share of the host's CPUs. 0 and 0:
  // predicted again whenever a load moved at all. Not in csd.yaml: what
  // the defaults cost in decisions is measured against 0 and 0 by
  // engine_pass_bench --compare-fresh (docs/benchmarks.md).
  double reuse_vm_load_move = 0.1;
  double reuse_host_load_share = 0.02;
  bool operator==(const EngineOptions&) const = default;
};

// The CPUs this process may run on (its affinity), 1 to 16.
int DefaultPlannerThreads();

// Unset fields keep EngineOptions' defaults.
EngineOptions EngineOptionsFromConfig(const v1::EngineConfig& config);

// INVALID_ARGUMENT naming engine.<field> and its rule: replan_interval_s
// 10 to 86400, min_gain 0 to 1, min_dwell_s 0 to 86400,
// max_changes_per_hour 1 to 60, budget_windows 1 to 100, planner_threads 1
// to 64, predict_s 0.25 to 10, screen_s 0 or 0.25 to 10; the reuse bounds
// 0 to 1.
absl::Status ValidateEngineOptions(const EngineOptions& options);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_ENGINE_ENGINE_OPTIONS_H_
