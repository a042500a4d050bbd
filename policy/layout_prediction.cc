// The policy engine's predictions of a layout: PredictLayout (one layout,
// whole) and PredictProposal (the current and the planned layout, with the
// screen that ends both early when the answer is already clear). The rest of
// the trade-off engine is in tradeoff.cc.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "policy/simulator.h"
#include "policy/tradeoff.h"
#include "policy/tradeoff_internal.h"

namespace cosched::policy {

using internal::CookiesOf;
using internal::LeastBudget;

namespace {

// Core-seconds of simulated work (the lesser of the two layouts') at and
// above which the screen's margins apply as set; below, they widen with the
// square root of the shortfall.
constexpr double kScreenReferenceWork = 5.0;

// A layout's prediction, started: the layout pinned as agents enforce it,
// the simulation ready to run.
struct LayoutPrediction {
  std::unique_ptr<Simulation> simulation;
  std::optional<double> budget;

  CandidateScore RunTo(double simulated_s) {
    const SimResult result = simulation->RunTo(simulated_s);
    CandidateScore score;
    score.name = "groups";
    score.predicted_throughput = result.total_throughput;
    score.predicted_forced_idle_pct = result.forced_idle_pct;
    score.predicted_cross_tenant_pct = result.cross_tenant_pct;
    score.predicted_foreign_pct = result.foreign_pct;
    score.within_budget = !budget.has_value() || result.forced_idle_pct <= *budget;
    score.simulated_s = result.simulated_s;
    return score;
  }
};

absl::StatusOr<LayoutPrediction> StartPrediction(const Scenario& scenario,
                                                 std::vector<VmDecision>& layout,
                                                 const SimParams& params,
                                                 const PlanOptions& options) {
  RETURN_IF_ERROR(PinLayout(scenario, layout));
  std::vector<std::string> groups;
  for (const VmDecision& d : layout) groups.push_back(d.trust_group);
  SimConfig config;
  config.mode = SmtMode::kCoreSched;
  config.cookie = CookiesOf(groups);
  for (const VmDecision& d : layout) config.pin_cpus.push_back(d.pin_cpus);
  SimRun run;
  run.seed = scenario.seed + 1;
  run.duration_s = std::min(scenario.duration_s, options.predict_s);
  LayoutPrediction prediction;
  ASSIGN_OR_RETURN(prediction.simulation, Simulation::Create(scenario, config, params, run));
  prediction.budget = LeastBudget(scenario, ExpandInstances(scenario));
  return prediction;
}

double Gain(const CandidateScore& now, const CandidateScore& next) {
  return now.predicted_throughput > 0
             ? next.predicted_throughput / now.predicted_throughput - 1
             : 0;
}

// Whether the screen's figures settle what the caller decides: the gain is
// well clear of level_min_gain and each layout's forced idle well clear of
// the budget, so that the rest of the prediction could not move them across.
// "Well clear" widens as the screen measured less work: a prediction's
// sampling error shrinks with the square root of the work it simulated, and
// a small host's screen (2 cores, 5 VMs: a quarter of a core-second) is far
// noisier than a large one's (32 cores: several core-seconds).
bool ScreenSettles(const LayoutProposal& proposal, const std::optional<double>& budget,
                   const PlanOptions& options) {
  const double work = std::min(proposal.now.predicted_throughput,
                               proposal.next.predicted_throughput) *
                      proposal.now.simulated_s;
  if (!(work > 0)) return false;
  const double widen = std::max(1.0, std::sqrt(kScreenReferenceWork / work));
  if (std::abs(proposal.gain - options.level_min_gain) < options.screen_gain_margin * widen) {
    return false;
  }
  if (!budget.has_value()) return true;
  for (const CandidateScore* score : {&proposal.now, &proposal.next}) {
    if (std::abs(score->predicted_forced_idle_pct - *budget) <
        options.screen_forced_idle_margin_pct * widen) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<CandidateScore> PredictLayout(const Scenario& scenario,
                                             std::vector<VmDecision>& layout,
                                             const SimParams& params,
                                             const PlanOptions& options) {
  ASSIGN_OR_RETURN(LayoutPrediction prediction,
                   StartPrediction(scenario, layout, params, options));
  return prediction.RunTo(prediction.simulation->duration_s());
}

absl::Status PredictProposal(const Scenario& scenario, const std::vector<VmDecision>& current,
                             LayoutProposal& proposal, const SimParams& params,
                             const PlanOptions& options) {
  std::vector<VmDecision> now_layout = current;
  ASSIGN_OR_RETURN(LayoutPrediction now, StartPrediction(scenario, now_layout, params, options));
  ASSIGN_OR_RETURN(LayoutPrediction next,
                   StartPrediction(scenario, proposal.planned, params, options));
  auto run_to = [&](double simulated_s) {
    proposal.now = now.RunTo(simulated_s);
    proposal.next = next.RunTo(simulated_s);
    proposal.gain = Gain(proposal.now, proposal.next);
  };
  const double duration_s = now.simulation->duration_s();
  proposal.screened = false;
  if (options.screen_s > 0 && options.screen_s < duration_s) {
    run_to(options.screen_s);
    if (ScreenSettles(proposal, now.budget, options)) {
      proposal.screened = true;
      return absl::OkStatus();
    }
  }
  run_to(duration_s);
  return absl::OkStatus();
}

}  // namespace cosched::policy
