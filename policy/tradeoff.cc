// The trade-off engine: the groups and levels each tenant allows
// (ChooseGroups, PlanLayout), dedicated cores and pinning candidates, and
// PlanHost, which predicts and chooses among them. Predicting a layout and
// a proposal (with the screen) is in layout_prediction.cc.
#include "policy/tradeoff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "policy/replan_gate.h"
#include "policy/trust_group.h"
#include "policy/tradeoff_internal.h"

namespace cosched::policy {

using internal::CookiesOf;
using internal::LeastBudget;

namespace {

std::map<std::string, v1::TenantPolicy> TenantPolicies(const Scenario& s) {
  std::map<std::string, v1::TenantPolicy> out;
  for (const TenantSpec& t : s.tenants) out[t.policy.tenant_id()] = t.policy;
  return out;
}

// Whether the simulator sees two layouts alike: the same VMs share a
// group and the same VMs are dedicated (pins alike).
bool SameGrouping(const std::vector<VmDecision>& a, const std::vector<VmDecision>& b) {
  std::vector<std::string> groups_a, groups_b;
  for (size_t v = 0; v < a.size(); ++v) {
    if ((a[v].isolation == v1::ISOLATION_LEVEL_DEDICATED) !=
        (b[v].isolation == v1::ISOLATION_LEVEL_DEDICATED)) {
      return false;
    }
    groups_a.push_back(a[v].trust_group);
    groups_b.push_back(b[v].trust_group);
  }
  return CookiesOf(groups_a) == CookiesOf(groups_b);
}

}  // namespace

namespace internal {

std::vector<int> CookiesOf(const std::vector<std::string>& groups) {
  std::map<std::string, int> ids;
  std::vector<int> out;
  for (const std::string& g : groups) {
    if (g.empty()) {
      out.push_back(0);
    } else {
      out.push_back(ids.emplace(g, ids.size() + 1).first->second);
    }
  }
  return out;
}

std::optional<double> LeastBudget(const Scenario& scenario, const std::vector<VmInstance>& vms) {
  std::optional<double> budget = scenario.forced_idle_budget_pct;
  std::set<std::string> tenants_here;
  for (const VmInstance& vm : vms) tenants_here.insert(vm.tenant);
  for (const TenantSpec& t : scenario.tenants) {
    if (t.forced_idle_budget_pct.has_value() &&
        tenants_here.count(t.policy.tenant_id()) != 0) {
      budget = std::min(budget.value_or(100.0), *t.forced_idle_budget_pct);
    }
  }
  return budget;
}

}  // namespace internal

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kSmt: return "smt";
    case Mode::kNoSmt: return "nosmt";
    case Mode::kVm: return "vm";
    case Mode::kTenant: return "tenant";
    case Mode::kPolicy: return "policy";
  }
  return "smt";
}

absl::StatusOr<Mode> ParseMode(absl::string_view field, absl::string_view name) {
  for (Mode m : {Mode::kSmt, Mode::kNoSmt, Mode::kVm, Mode::kTenant, Mode::kPolicy}) {
    if (name == ModeName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " '", name.substr(0, 32),
                   "' must be one of smt, nosmt, vm, tenant, policy"));
}

SimConfig ModeConfig(const Scenario& scenario, Mode mode) {
  SimConfig config;
  switch (mode) {
    case Mode::kSmt:
      config.mode = SmtMode::kSmt;
      break;
    case Mode::kNoSmt:
      config.mode = SmtMode::kNoSmt;
      break;
    case Mode::kVm:
    case Mode::kPolicy:
      config.mode = SmtMode::kCoreSched;
      break;
    case Mode::kTenant: {
      config.mode = SmtMode::kCoreSched;
      std::vector<std::string> groups;
      for (const VmInstance& vm : ExpandInstances(scenario)) {
        groups.push_back(absl::StrCat(vm.tenant, "/tenant/",
                                      absl::StrJoin(vm.classes, "+")));
      }
      config.cookie = CookiesOf(groups);
      break;
    }
  }
  return config;
}

namespace {

// Step 1 of PlanHost: each VM's level and trust group, the most relaxed
// level its tenant allows (never `none` unless that is all it allows), with
// the reasons.
absl::Status DecideGroups(const Scenario& scenario, const std::vector<VmInstance>& vms,
                          HostPlan& plan) {
  const auto policies = TenantPolicies(scenario);
  std::map<std::string, int> group_sizes;
  for (const VmInstance& vm : vms) {
    auto it = policies.find(vm.tenant);
    v1::TenantPolicy policy =
        it != policies.end() ? it->second : DefaultTenantPolicy(vm.tenant);
    VmDecision d;
    d.vm = vm.name;
    d.tenant = vm.tenant;
    v1::IsolationLevel level;
    if (policy.default_isolation() == v1::ISOLATION_LEVEL_DEDICATED) {
      level = v1::ISOLATION_LEVEL_DEDICATED;
      d.reasons.push_back(absl::StrCat("tenant '", vm.tenant,
                                       "' asks for dedicated cores"));
    } else if (IsAllowed(policy, v1::ISOLATION_LEVEL_TENANT)) {
      level = v1::ISOLATION_LEVEL_TENANT;
    } else if (IsAllowed(policy, v1::ISOLATION_LEVEL_VM)) {
      level = v1::ISOLATION_LEVEL_VM;
      d.reasons.push_back(absl::StrCat("tenant '", vm.tenant,
                                       "' does not allow `tenant`: a cookie "
                                       "of its own"));
    } else {
      level = v1::ISOLATION_LEVEL_NONE;
      d.reasons.push_back(absl::StrCat(
          "tenant '", vm.tenant,
          "' allows only `none`: untagged (cookie 0), shares cores with "
          "every untagged task"));
    }
    auto decision = DecideTrustGroup(vm.name, level, vm.classes, policy);
    if (!decision.ok()) return decision.status();
    d.isolation = decision->isolation;
    d.trust_group = decision->trust_group;
    ++group_sizes[d.trust_group];
    plan.vms.push_back(std::move(d));
  }
  std::set<std::string> conflicting;
  for (const auto& [a, b] : scenario.conflicts) {
    conflicting.insert(a);
    conflicting.insert(b);
  }
  for (size_t v = 0; v < vms.size(); ++v) {
    VmDecision& d = plan.vms[v];
    if (d.isolation == v1::ISOLATION_LEVEL_TENANT) {
      int others = group_sizes[d.trust_group] - 1;
      d.reasons.insert(
          d.reasons.begin(),
          absl::StrCat("tenant '", d.tenant, "' allows `tenant`: group '",
                       d.trust_group, "' with ", others, " other VM",
                       others == 1 ? "" : "s",
                       " of the same tenant and class set; never with "
                       "another tenant"));
    }
    for (const std::string& c : vms[v].classes) {
      if (conflicting.count(c) != 0) {
        d.reasons.push_back(absl::StrCat(
            "class '", c,
            "' must never share a core with its conflicting class: its group "
            "holds only VMs with exactly the classes {",
            absl::StrJoin(vms[v].classes, ", "), "}"));
        break;
      }
    }
  }
  std::vector<std::string> groups;
  for (const VmDecision& d : plan.vms) groups.push_back(d.trust_group);
  plan.config.mode = SmtMode::kCoreSched;
  plan.config.cookie = CookiesOf(groups);
  return absl::OkStatus();
}

// PlanHost stops after this many moves tried: far more than a host's few
// moves need to settle (each pinning is one move, and a move is tried again
// only after every other).
constexpr int kMaxPlanMoves = 64;

// The gate of one of PlanHost's moves, as csd's engine judges it on a host
// whose measured forced idle is within budget, except that a layout
// predicted over the budget stands for a breached one: a move predicted
// within it then needs no gain.
GateVerdict JudgeMove(const LayoutProposal& move, const PlanOptions& options) {
  HysteresisOptions hysteresis;
  hysteresis.min_gain = options.level_min_gain;
  if (move.now.within_budget && !move.next.within_budget) {
    return {false, "refused: predicted over the forced-idle budget, the layout it would replace "
                   "within it"};
  }
  const ChangeKind kind = !move.now.within_budget && move.next.within_budget
                              ? ChangeKind::kBudget
                              : ChangeKind::kGain;
  // Pinnings are taken only while they improve, so that the moves settle
  // whatever level_min_gain (below 0, it relaxes levels at any cost).
  if (kind == ChangeKind::kGain && move.move != "groups" && !(move.gain > 0)) {
    return {false, absl::StrFormat("refused: predicted gain %+.1f%% is none", 100 * move.gain)};
  }
  return ReplanGate(hysteresis).Consider(std::chrono::steady_clock::time_point(), kind,
                                         move.gain);
}

// The last sentences of each VM's reasons in the plan: its dedicated
// cores, or where it runs and what the layout is predicted to give it.
void ExplainPlacement(const std::vector<VmInstance>& vms, const internal::BaseLayout& base,
                      const SimResult& predicted, int cores, std::vector<VmDecision>& layout) {
  for (size_t v = 0; v < layout.size(); ++v) {
    VmDecision& d = layout[v];
    const VmSimResult& r = predicted.vms[v];
    if (base.dedicated_first[v] >= 0) {
      // In cores, as DescribePin says pins: the CPU ids here are the
      // simulator's (core c is CPUs c and c + cores), which need not be
      // the host's; the host's are in the VM's pin.
      const int first = base.dedicated_first[v];
      const int count = static_cast<int>(d.pin_cpus.size()) / 2;
      d.reasons.push_back(absl::StrCat(
          "dedicated: ",
          count == 1 ? absl::StrCat("whole core ", first)
                     : absl::StrCat("whole cores ", first, "-", first + count - 1),
          ", used by no other VM"));
      continue;
    }
    d.reasons.push_back(absl::StrFormat(
        "%s; predicted %.2f core-equivalents, sibling %.0f%% same / %.0f%% idle / %.0f%% foreign",
        vms[v].pin_cpus.empty()
            ? internal::DescribePin(d.pin_cpus, cores)
            : internal::DescribePin(d.pin_cpus, cores) + " as the scenario asks",
        r.throughput, r.same_pct, r.idle_pct, r.foreign_pct));
  }
}

}  // namespace

absl::StatusOr<HostPlan> PlanHost(const Scenario& scenario, const SimParams& params,
                                  const PlanOptions& options) {
  const std::vector<VmInstance> vms = ExpandInstances(scenario);
  HostPlan plan;
  plan.forced_idle_budget_pct = LeastBudget(scenario, vms);
  ASSIGN_OR_RETURN(std::vector<VmDecision> layout, DefaultLayout(scenario));
  RETURN_IF_ERROR(PinLayout(scenario, layout));
  const std::vector<bool> managed(layout.size(), true);
  // Each VM's reasons for its level, and for its pinning when a move set it.
  std::vector<std::vector<std::string>> level_reasons;
  for (const VmDecision& d : layout) level_reasons.push_back(d.reasons);
  std::vector<std::string> pin_reasons(layout.size());
  std::optional<GateVerdict> groups_refused;
  plan.chosen = "default";
  std::vector<std::string> taken;
  size_t cursor = 0;
  size_t without_change = 0;
  for (int tried = 0; tried < kMaxPlanMoves; ++tried) {
    ASSIGN_OR_RETURN(std::vector<LayoutProposal> moves, EngineMoves(scenario, layout, managed));
    if (!scenario.policy_may_pin) {
      std::erase_if(moves, [](const LayoutProposal& m) { return m.move != "groups"; });
    }
    if (moves.empty() || without_change >= moves.size()) break;
    LayoutProposal& move = moves[cursor++ % moves.size()];
    RETURN_IF_ERROR(PredictProposal(scenario, layout, move, params, options));
    CandidateScore score = move.next;
    score.name = move.move;
    plan.candidates.push_back(score);
    const GateVerdict verdict = JudgeMove(move, options);
    if (move.move == "groups") groups_refused.reset();
    if (!verdict.allowed) {
      if (move.move == "groups") groups_refused = verdict;
      ++without_change;
      continue;
    }
    without_change = 0;
    for (size_t v = 0; v < layout.size(); ++v) {
      if (move.move == "groups") {
        level_reasons[v] = move.planned[v].reasons;
      } else if (move.planned[v].pin_cpus != layout[v].pin_cpus) {
        pin_reasons[v] = move.planned[v].reasons.back();
      }
    }
    layout = std::move(move.planned);
    plan.chosen = move.move;
    taken.push_back(absl::StrFormat("'%s' (predicted gain %+.1f%%)", move.move, 100 * move.gain));
  }
  // Where the groups move did not pay (or would only rename groups), the
  // VMs it would have changed say so.
  ASSIGN_OR_RETURN(LayoutProposal groups, PlanLayout(scenario, layout, managed));
  if (groups.changes && (groups_refused || groups.same_grouping)) {
    const std::string why =
        groups.same_grouping ? std::string("it is predicted to gain nothing") : groups_refused->reason;
    for (size_t v = 0; v < layout.size(); ++v) {
      const VmDecision& would = groups.planned[v];
      if (would.isolation == layout[v].isolation && would.trust_group == layout[v].trust_group) {
        continue;
      }
      level_reasons[v] = {absl::StrCat(
          "keeps its tenant's default level `", IsolationName(layout[v].isolation), "` (group '",
          layout[v].trust_group, "') over `", IsolationName(would.isolation), "`: ",
          why, groups.same_grouping ? " (the groups would hold the same VMs)" : "")};
    }
  }

  std::vector<std::string> group_names;
  for (const VmDecision& d : layout) group_names.push_back(d.trust_group);
  plan.config.mode = SmtMode::kCoreSched;
  plan.config.cookie = CookiesOf(group_names);
  for (const VmDecision& d : layout) plan.config.pin_cpus.push_back(d.pin_cpus);
  SimRun run;
  run.seed = scenario.seed + 1;
  run.duration_s = std::min(scenario.duration_s, options.predict_s);
  ASSIGN_OR_RETURN(const SimResult predicted, Simulate(scenario, plan.config, params, run));
  ASSIGN_OR_RETURN(const internal::BaseLayout base, internal::PinBase(scenario, vms, layout));
  for (size_t v = 0; v < layout.size(); ++v) {
    layout[v].reasons = level_reasons[v];
    if (!pin_reasons[v].empty()) layout[v].reasons.push_back(pin_reasons[v]);
  }
  ExplainPlacement(vms, base, predicted, scenario.cores, layout);
  plan.vms = std::move(layout);

  const std::optional<double>& budget = plan.forced_idle_budget_pct;
  const bool within = !budget.has_value() || predicted.forced_idle_pct <= *budget;
  plan.reasons.push_back(absl::StrFormat(
      "chose '%s' after %d moves tried%s: predicted throughput %.2f core-equivalents, forced "
      "idle %.1f%%",
      plan.chosen, plan.candidates.size(),
      taken.empty() ? std::string(", none taken")
                    : absl::StrCat(", took ", absl::StrJoin(taken, " then ")),
      predicted.total_throughput, predicted.forced_idle_pct));
  if (budget.has_value()) {
    plan.reasons.push_back(
        within ? absl::StrFormat("forced-idle budget %.1f%% of host CPU time: met", *budget)
               : absl::StrFormat("forced-idle budget %.1f%%: no move the engine tries meets it",
                                 *budget));
  }
  return plan;
}

absl::StatusOr<std::vector<VmDecision>> ChooseGroups(const Scenario& scenario) {
  HostPlan plan;
  RETURN_IF_ERROR(DecideGroups(scenario, ExpandInstances(scenario), plan));
  return std::move(plan.vms);
}

absl::StatusOr<std::vector<VmDecision>> DefaultLayout(const Scenario& scenario) {
  const auto policies = TenantPolicies(scenario);
  std::vector<VmDecision> layout;
  for (const VmInstance& vm : ExpandInstances(scenario)) {
    auto it = policies.find(vm.tenant);
    const v1::TenantPolicy policy =
        it != policies.end() ? it->second : DefaultTenantPolicy(vm.tenant);
    ASSIGN_OR_RETURN(TrustDecision decision,
                     DecideTrustGroup(vm.name, v1::ISOLATION_LEVEL_UNSPECIFIED, vm.classes,
                                      policy));
    VmDecision d;
    d.vm = vm.name;
    d.tenant = vm.tenant;
    d.isolation = decision.isolation;
    d.trust_group = decision.trust_group;
    d.reasons.push_back(absl::StrCat("the default level of tenant '", vm.tenant, "'"));
    layout.push_back(std::move(d));
  }
  return layout;
}

absl::StatusOr<LayoutProposal> PlanLayout(const Scenario& scenario,
                                          const std::vector<VmDecision>& current,
                                          const std::vector<bool>& managed) {
  ASSIGN_OR_RETURN(std::vector<VmDecision> relaxed, ChooseGroups(scenario));
  if (current.size() != relaxed.size() || managed.size() != relaxed.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout has ", current.size(), " VMs and ", managed.size(),
        " managed flags; the scenario has ", relaxed.size(), " VMs"));
  }
  LayoutProposal proposal;
  proposal.planned = current;
  for (size_t v = 0; v < current.size(); ++v) {
    if (!managed[v]) continue;
    VmDecision& d = proposal.planned[v];
    d.isolation = relaxed[v].isolation;
    d.trust_group = relaxed[v].trust_group;
    d.reasons = std::move(relaxed[v].reasons);
    proposal.changes = proposal.changes || d.isolation != current[v].isolation ||
                       d.trust_group != current[v].trust_group;
  }
  if (!proposal.changes) return proposal;
  proposal.same_grouping = SameGrouping(current, proposal.planned);
  return proposal;
}

absl::StatusOr<LayoutProposal> ProposeLayout(const Scenario& scenario,
                                             const std::vector<VmDecision>& current,
                                             const std::vector<bool>& managed,
                                             const SimParams& params,
                                             const PlanOptions& options) {
  ASSIGN_OR_RETURN(LayoutProposal proposal, PlanLayout(scenario, current, managed));
  if (proposal.changes && !proposal.same_grouping) {
    RETURN_IF_ERROR(PredictProposal(scenario, current, proposal, params, options));
  }
  return proposal;
}

absl::StatusOr<ModeResult> RunMode(const Scenario& scenario, Mode mode,
                                   const SimParams& params) {
  ModeResult out;
  out.mode = mode;
  SimConfig config = ModeConfig(scenario, mode);
  if (mode == Mode::kPolicy) {
    auto plan = PlanHost(scenario, params);
    if (!plan.ok()) return plan.status();
    config = plan->config;
    out.plan = *std::move(plan);
  }
  auto result = Simulate(scenario, config, params);
  if (!result.ok()) return result.status();
  out.result = *std::move(result);
  return out;
}

}  // namespace cosched::policy
