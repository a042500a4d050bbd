// How csctl shows csd's answers to Place and ExplainVM: JSON objects with
// the response's fields, or "key: value" blocks and tables for people.
#ifndef COSCHED_CLI_POLICY_OUTPUT_H_
#define COSCHED_CLI_POLICY_OUTPUT_H_

#include <ostream>

#include "cosched/v1/control_plane.pb.h"
#include "nlohmann/json.hpp"

namespace cosched::cli {

// host_id, cores, cpus, predicted_cost, reason, isolation, candidates
// (host_id, predicted_cost, reason).
nlohmann::json PlaceToJson(const v1::PlaceResponse& response);
void PrintPlace(const v1::PlaceResponse& response, std::ostream& out);

// vm_id, tenant_id, host_id; what the engine would decide now: isolation,
// trust_group, pin_cpus, proposed_reasons; vcpus, load, host_vms,
// chosen_layout, layouts, host_reasons, forced_idle_budget_pct (null when
// none), current (isolation, trust_group), recommended_host; the decision
// in force (issue #15's keys): decided_by, decided_at, reasons, predicted,
// measured; host_plan.
nlohmann::json ExplainToJson(const v1::ExplainVMResponse& response);
void PrintExplain(const v1::ExplainVMResponse& response, std::ostream& out);

// csctl plan --dry-run: one entry per host the engine manages VMs on.
nlohmann::json PlanToJson(const v1::PlanResponse& response);
void PrintPlan(const v1::PlanResponse& response, std::ostream& out);

// csctl plan --report: {"hosts": [...], "summary": {...}}. Each host:
// host_id, decided_at, vms, predicted (throughput, forced_idle_pct,
// cross_tenant_pct, foreign_pct, gain), before and since (MeasuredToJson),
// measured_gain, throughput_error, forced_idle_error_pct,
// foreign_error_pct (null when unknown).
nlohmann::json HostPlanReportToJson(const v1::HostPlanReport& report);
nlohmann::json PlanReportToJson(const v1::PlanResponse& response);
void PrintPlanReport(const v1::PlanResponse& response, std::ostream& out);

}  // namespace cosched::cli

#endif  // COSCHED_CLI_POLICY_OUTPUT_H_
