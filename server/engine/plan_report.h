// Prediction against measurement (issue #15): the newest plan the policy
// engine applied on a host, as its VMs' decisions record it (what it
// predicted, what was measured before it), against what the host's agent
// measured since. Shared by ControlPlane.Plan's report, ExplainVM and the
// engine's per-host error metric, so that all three say the same. Pure
// over its inputs; thread-safe.
#ifndef COSCHED_SERVER_ENGINE_PLAN_REPORT_H_
#define COSCHED_SERVER_ENGINE_PLAN_REPORT_H_

#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "cosched/v1/control_plane.pb.h"
#include "server/engine/host_scenario.h"
#include "server/stats/stats_aggregator.h"

namespace cosched::server {

// The newest engine decision with a prediction among the host's VMs (the
// plan in force), with decided_at, vms, predicted and before set; nullopt
// when the engine applied none there.
std::optional<v1::HostPlanReport> NewestPlan(const HostState& state);

// Sets `report.since` to `since` and the gain and errors that follow from
// it (each left unset when a figure it needs is unknown).
void CompareWithMeasured(const v1::MeasuredLayout& since, v1::HostPlanReport& report);

// NewestPlan compared with the host's windows that began after it (at most
// the last hour); nullopt as NewestPlan.
std::optional<v1::HostPlanReport> ReportHost(const HostState& state,
                                             const StatsSource& stats);

// The fleet's figures over `reports`, and `reports` sorted by predicted
// gain, highest first, then by host id.
v1::PlanReportSummary Summarize(std::vector<v1::HostPlanReport>& reports);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_ENGINE_PLAN_REPORT_H_
