// The trade-off between isolation and throughput on one host: which trust
// groups and which pinning lose least while every tenant gets at least the
// isolation its policy demands. The engine never puts VMs of different
// tenants in one group, keeps conflicting interference classes in different
// groups, respects a forced-idle budget, and explains every decision. It
// predicts with the simulator (simulator.h). Pure and deterministic;
// thread-compatible.
#ifndef COSCHED_POLICY_TRADEOFF_H_
#define COSCHED_POLICY_TRADEOFF_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/types.pb.h"
#include "policy/scenario.h"
#include "policy/simulator.h"

namespace cosched::policy {

// The ways `csctl simulate` runs a scenario.
enum class Mode {
  kSmt,     // SMT on, nothing tagged
  kNoSmt,   // SMT off
  kVm,      // core scheduling, one cookie per VM
  kTenant,  // core scheduling, one cookie per tenant and class set
  kPolicy,  // what the engine would do (PlanHost)
};

// "smt", "nosmt", "vm", "tenant", "policy".
const char* ModeName(Mode mode);
// INVALID_ARGUMENT naming `field` for anything else.
absl::StatusOr<Mode> ParseMode(absl::string_view field, absl::string_view name);

// The engine's decision for one VM.
struct VmDecision {
  std::string vm;
  std::string tenant;
  v1::IsolationLevel isolation = v1::ISOLATION_LEVEL_VM;
  // Empty for `none` (cookie 0).
  std::string trust_group;
  // CPUs its vCPUs are pinned to; empty: not pinned.
  std::vector<int> pin_cpus;
  // Why, one sentence each, for `csctl explain`.
  std::vector<std::string> reasons;
};

// One layout the engine predicted.
struct CandidateScore {
  std::string name;
  double predicted_throughput = 0;
  double predicted_forced_idle_pct = 0;
  double predicted_cross_tenant_pct = 0;
  // Run time beside a sibling of another group or a host task.
  double predicted_foreign_pct = 0;
  bool within_budget = true;
  // Measured time of the prediction (after warm-up): shorter than the
  // run's when a screen settled it.
  double simulated_s = 0;
};

struct HostPlan {
  std::vector<VmDecision> vms;  // ExpandInstances order
  // The chosen candidate and all that were predicted.
  std::string chosen;
  std::vector<CandidateScore> candidates;
  // Host-level reasons (budget, chosen layout).
  std::vector<std::string> reasons;
  // Percent of host CPU time; the least of the host's and its tenants'.
  std::optional<double> forced_idle_budget_pct;
  // What the simulator runs for mode `policy`.
  SimConfig config;
};

struct PlanOptions {
  // Predictions run this long (capped by the scenario's duration) with the
  // scenario's seed + 1, so that the plan is not fitted to the run that
  // measures it.
  double predict_s = 5;
  // Another layout replaces the simplest only when it is predicted to give
  // this much more total throughput (fraction).
  double min_gain = 0.01;
  // PlanHost takes the tenants' relaxed levels (ChooseGroups) over the
  // layout TagVM gives only when they are predicted to gain this much, as
  // csd's engine does on a host it has not changed yet (engine.min_gain's
  // default, replan_gate.h).
  double level_min_gain = 0.03;
  // PredictProposal's screen: both layouts first run screen_s simulated
  // seconds (warm-up included), and the rest of predict_s only when that
  // leaves the answer open: the gain within screen_gain_margin of
  // level_min_gain, or a layout's forced idle within
  // screen_forced_idle_margin_pct points of the budget. Both margins widen
  // as 1/sqrt(work) when the screen simulated less than 5 core-seconds of
  // work, since a small host's short prediction is noisy. Each task's
  // demand is the same in both layouts (simulator.h), which keeps the early
  // gain's error small on hosts of some size (docs/benchmarks.md). 0, or at
  // least predict_s, turns the screen off.
  double screen_s = 0.5;
  double screen_gain_margin = 0.02;
  double screen_forced_idle_margin_pct = 1.0;
};

// Chooses levels, groups and pinning for the scenario's VMs as csd's engine
// settles them on a host it has not changed yet: from the layout TagVM
// gives (DefaultLayout), it takes the engine's moves (EngineMoves) in the
// order csd's engine tries them, one at a time, each when predicted to gain
// at least level_min_gain over the layout before it, until a whole round of
// moves gains nothing. Every VM is the engine's; VMs the scenario pins keep
// their pinning, and none is pinned when policy_may_pin is false.
// FAILED_PRECONDITION when a tenant's policy cannot be met (a `dedicated`
// VM without enough free whole cores).
absl::StatusOr<HostPlan> PlanHost(const Scenario& scenario,
                                  const SimParams& params = SimParams(),
                                  const PlanOptions& options = PlanOptions());

// Each VM's most relaxed level and its trust group (`dedicated` where that
// is the tenant's default), with the reasons, in ExpandInstances order. No
// pinning, no prediction: what ProposeLayout proposes for managed VMs.
absl::StatusOr<std::vector<VmDecision>> ChooseGroups(const Scenario& scenario);

// Predicts `layout` (one decision per VM of ExpandInstances(scenario), its
// level and trust group) as agents enforce it: dedicated VMs on whole cores
// of their own from the top, as PlanHost gives them, the other VMs on the
// remaining cores, nothing else pinned. Sets each decision's pin_cpus to
// that, so that CheckLayout can judge it. within_budget is against the
// least budget of the scenario and the tenants on the host.
// FAILED_PRECONDITION when the dedicated VMs do not fit.
absl::StatusOr<CandidateScore> PredictLayout(const Scenario& scenario,
                                             std::vector<VmDecision>& layout,
                                             const SimParams& params = SimParams(),
                                             const PlanOptions& options = PlanOptions());

// Sets each decision's pin_cpus as PredictLayout does, without predicting:
// dedicated VMs on whole cores of their own from the top; the others where
// the scenario pins them, else where the decision pins them, within the
// remaining cores. FAILED_PRECONDITION when the dedicated VMs do not fit.
absl::Status PinLayout(const Scenario& scenario, std::vector<VmDecision>& layout);

// A pinning of a layout's VMs (ExpandInstances order): the CPUs each VM's
// vCPUs may run on, empty for anywhere.
struct Pinning {
  std::string name;
  // What it does, one sentence.
  std::string why;
  std::vector<std::vector<int>> pins;
};

// The pinnings the engine tries for `layout` (levels and groups set, each
// decision's pin_cpus where it is pinned now), in this order:
//   "unpinned": no VM pinned beyond the dedicated cores;
//   "busy-whole-cores-x1.00", "-x1.25", "-x1.50": busy VMs (2 vCPUs or
//     more, load 0.5 or more) on whole cores of their own from core 0,
//     scale x their vCPUs / 2 cores each, the other VMs on the remaining
//     cores (when some VM is not busy and one core stays);
//   "one-thread-per-core": every VM on the first thread of each core.
// Only VMs with may_pin[v] move, never a dedicated VM nor one the scenario
// pins; the others keep where they are. Pinnings alike to an earlier one
// are left out. Errors as PinLayout's; INVALID_ARGUMENT when the sizes do
// not match the scenario's VMs.
absl::StatusOr<std::vector<Pinning>> PinningCandidates(const Scenario& scenario,
                                                       const std::vector<VmDecision>& layout,
                                                       const std::vector<bool>& may_pin);

// The layout TagVM gives the scenario's VMs (ExpandInstances order): each
// at its tenant's default level, in the group that level gives.
absl::StatusOr<std::vector<VmDecision>> DefaultLayout(const Scenario& scenario);

// What the engine proposes for a host whose VMs hold `current` (levels and
// groups, ExpandInstances order): each VM with managed[v] at its
// ChooseGroups level and group (with the reasons), the others as they are.
struct LayoutProposal {
  std::vector<VmDecision> planned;
  // Some VM's level, group or pinning differs from `current`.
  bool changes = false;
  // The two split the VMs into the same groups with the same dedicated
  // VMs (only names differ): the simulator cannot tell them apart, so
  // nothing is predicted and the gain is 0.
  bool same_grouping = false;
  // Set when `changes` and not `same_grouping`: both layouts predicted
  // (PredictLayout, which also sets the decisions' pin_cpus) and the gain
  // of `planned` over `current`, a fraction of predicted throughput.
  CandidateScore now;
  CandidateScore next;
  double gain = 0;
  // The screen settled it (PlanOptions::screen_s): now and next are the
  // screen's figures.
  bool screened = false;
  // The move that `planned` makes (EngineMoves): "groups", or a pinning's
  // name (PinningCandidates).
  std::string move;
};
// Whether to apply it is the caller's: csd's engine asks its ReplanGate
// (min_gain, min_dwell, hourly cap) and budget watch, PlanHost a fresh
// gate. INVALID_ARGUMENT when `current` or `managed` do not match the
// scenario's VMs; FAILED_PRECONDITION as PredictLayout.
absl::StatusOr<LayoutProposal> ProposeLayout(const Scenario& scenario,
                                             const std::vector<VmDecision>& current,
                                             const std::vector<bool>& managed,
                                             const SimParams& params = SimParams(),
                                             const PlanOptions& options = PlanOptions());
// ProposeLayout in two steps, for a caller that may already hold the
// predictions (csd's engine, between passes): PlanLayout sets planned,
// changes and same_grouping; PredictProposal then sets now, next, gain,
// screened and planned's pin_cpus, judging the screen against
// options.level_min_gain (csd's engine passes engine.min_gain). Errors as
// ProposeLayout's.
absl::StatusOr<LayoutProposal> PlanLayout(const Scenario& scenario,
                                          const std::vector<VmDecision>& current,
                                          const std::vector<bool>& managed);
absl::Status PredictProposal(const Scenario& scenario, const std::vector<VmDecision>& current,
                             LayoutProposal& proposal, const SimParams& params = SimParams(),
                             const PlanOptions& options = PlanOptions());

// The engine's moves from `current` (levels, groups and pins,
// ExpandInstances order), each a LayoutProposal with `changes` set and
// nothing predicted: first "groups" (PlanLayout's, when it changes more
// than names), then each pinning of PinningCandidates (the managed VMs may
// move) that pins otherwise than `current`, with a reason for every VM it
// moves. csd's engine tries one move per host and re-plan, in turn;
// PlanHost tries them in the same order. Errors as PlanLayout's and
// PinningCandidates'.
absl::StatusOr<std::vector<LayoutProposal>> EngineMoves(const Scenario& scenario,
                                                        const std::vector<VmDecision>& current,
                                                        const std::vector<bool>& managed);

// The simulator configuration of a fixed mode (not kPolicy).
SimConfig ModeConfig(const Scenario& scenario, Mode mode);

struct ModeResult {
  Mode mode = Mode::kSmt;
  SimResult result;
  std::optional<HostPlan> plan;  // kPolicy only
};

// Runs the scenario in `mode` with its own seed and duration.
absl::StatusOr<ModeResult> RunMode(const Scenario& scenario, Mode mode,
                                   const SimParams& params = SimParams());

}  // namespace cosched::policy

#endif  // COSCHED_POLICY_TRADEOFF_H_
