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

// A VM is "busy" when it has this many vCPUs and declares at least this
// load per vCPU: worth whole cores of its own.
constexpr int kBusyMinVcpus = 2;
constexpr double kBusyMinLoad = 0.5;

std::map<std::string, v1::TenantPolicy> TenantPolicies(const Scenario& s) {
  std::map<std::string, v1::TenantPolicy> out;
  for (const TenantSpec& t : s.tenants) out[t.policy.tenant_id()] = t.policy;
  return out;
}


std::vector<int> CoreCpus(int first_core, int count, int cores) {
  std::vector<int> cpus;
  for (int c = first_core; c < first_core + count; ++c) cpus.push_back(c);
  for (int c = first_core; c < first_core + count; ++c) cpus.push_back(c + cores);
  return cpus;
}

std::string CpuListString(const std::vector<int>& cpus) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(cpus[i])
                           : absl::StrCat(cpus[i], "-", cpus[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

std::vector<int> Intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(),
                        std::back_inserter(out));
  return out;
}

// Whether the simulator sees two layouts alike: the same VMs share a
// group and the same VMs are dedicated.
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

struct Candidate {
  std::string name;
  std::vector<std::vector<int>> pins;
  std::string why;  // host-level sentence when chosen
};

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

// Step 1b: the relaxed levels replace the ones TagVM gives only when a
// fresh ReplanGate lets them (csd's engine on a host it has not changed):
// isolation is given up only where it pays.
absl::Status GateLevels(const Scenario& scenario, const SimParams& params,
                        const PlanOptions& options, HostPlan& plan) {
  ASSIGN_OR_RETURN(std::vector<VmDecision> defaults, DefaultLayout(scenario));
  ASSIGN_OR_RETURN(LayoutProposal proposal,
                   ProposeLayout(scenario, defaults, std::vector<bool>(defaults.size(), true),
                                 params, options));
  if (!proposal.changes) return absl::OkStatus();
  HysteresisOptions hysteresis;
  hysteresis.min_gain = options.level_min_gain;
  const GateVerdict verdict = ReplanGate(hysteresis).Consider(
      std::chrono::steady_clock::time_point(), ChangeKind::kGain, proposal.gain);
  if (verdict.allowed) return absl::OkStatus();
  std::vector<std::string> groups;
  for (size_t v = 0; v < plan.vms.size(); ++v) {
    VmDecision& d = plan.vms[v];
    if (d.isolation != defaults[v].isolation || d.trust_group != defaults[v].trust_group) {
      d.reasons = {absl::StrCat(
          "keeps its tenant's default level `", IsolationName(defaults[v].isolation),
          "` (group '", defaults[v].trust_group, "') over `", IsolationName(d.isolation),
          "`: ", verdict.reason,
          proposal.same_grouping ? " (the groups would hold the same VMs)" : "")};
      d.isolation = defaults[v].isolation;
      d.trust_group = defaults[v].trust_group;
    }
    groups.push_back(d.trust_group);
  }
  plan.config.cookie = CookiesOf(groups);
  return absl::OkStatus();
}

// Where each VM may run before any layout is tried.
struct BaseLayout {
  std::vector<int> all_cpus;
  // Cores [top, cores) are given to dedicated VMs; the CPUs of the others.
  int top = 0;
  std::vector<int> shared_cpus;
  std::vector<std::vector<int>> pins;
};

// Step 2: dedicated VMs get whole cores from the top, which nobody else
// uses; the others keep what they asked for, within the shared cores.
absl::StatusOr<BaseLayout> GiveDedicatedCores(const Scenario& scenario,
                                              const std::vector<VmInstance>& vms,
                                              HostPlan& plan) {
  const int cores = scenario.cores;
  BaseLayout base;
  std::vector<int>& all_cpus = base.all_cpus;
  for (int c = 0; c < 2 * cores; ++c) all_cpus.push_back(c);
  std::vector<std::vector<int>>& base_pins = base.pins;
  base_pins.resize(vms.size());
  int& top = base.top;
  top = cores;
  for (size_t v = 0; v < vms.size(); ++v) {
    if (plan.vms[v].isolation != v1::ISOLATION_LEVEL_DEDICATED) continue;
    int need = (vms[v].vcpus + 1) / 2;
    if (top - need < 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "VM '", vms[v].name, "' needs ", need,
          " whole free cores for `dedicated`; the host has ", top - 1,
          " left"));
    }
    top -= need;
    base_pins[v] = CoreCpus(top, need, cores);
    plan.vms[v].reasons.push_back(absl::StrCat(
        "dedicated: whole cores ", top, "-", top + need - 1, " (CPUs ",
        CpuListString(base_pins[v]), "), used by no other VM"));
  }
  base.shared_cpus = [&] {
    std::vector<int> cpus;
    for (int c = 0; c < 2 * cores; ++c) {
      if (c % cores < top) cpus.push_back(c);
    }
    return cpus;
  }();
  for (size_t v = 0; v < vms.size(); ++v) {
    if (plan.vms[v].isolation == v1::ISOLATION_LEVEL_DEDICATED) continue;
    if (top == cores) {
      base_pins[v] = vms[v].pin_cpus;
      continue;
    }
    base_pins[v] = Intersect(vms[v].pin_cpus.empty() ? all_cpus : vms[v].pin_cpus,
                             base.shared_cpus);
    if (base_pins[v].empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "VM '", vms[v].name, "' is pinned only to cores given to dedicated VMs"));
    }
  }

  return base;
}

// Step 3: the layouts to predict. `busy` gets the VMs that a whole-core
// layout pins, largest first.
std::vector<Candidate> CandidateLayouts(const Scenario& scenario,
                                        const std::vector<VmInstance>& vms,
                                        const HostPlan& plan, const BaseLayout& base,
                                        std::vector<size_t>& busy) {
  const int cores = scenario.cores;
  const std::vector<std::vector<int>>& base_pins = base.pins;
  const std::vector<int>& all_cpus = base.all_cpus;
  const std::vector<int>& shared_cpus = base.shared_cpus;
  const int top = base.top;
  std::vector<Candidate> candidates;
  candidates.push_back({"groups", base_pins,
                        "groups only: no pinning beyond what was asked"});
  for (size_t v = 0; v < vms.size(); ++v) {
    if (!vms[v].pin_cpus.empty() ||
        plan.vms[v].isolation == v1::ISOLATION_LEVEL_DEDICATED) {
      continue;
    }
    if (vms[v].vcpus >= kBusyMinVcpus &&
        vms[v].workload.DeclaredLoad() >= kBusyMinLoad) {
      busy.push_back(v);
    }
  }
  std::stable_sort(busy.begin(), busy.end(), [&](size_t a, size_t b) {
    return vms[a].vcpus > vms[b].vcpus;
  });
  const bool others_share = busy.size() < vms.size();
  if (scenario.policy_may_pin && !busy.empty() && others_share) {
    for (double scale : {1.0, 1.25, 1.5}) {
      Candidate cand{absl::StrFormat("busy-whole-cores-x%.2f", scale), base_pins, ""};
      int next = 0;
      bool fits = true;
      std::vector<std::string> placed;
      for (size_t v : busy) {
        int need = static_cast<int>(std::ceil(scale * vms[v].vcpus / 2.0));
        if (next + need >= top) {
          fits = false;
          break;
        }
        cand.pins[v] = CoreCpus(next, need, cores);
        placed.push_back(absl::StrCat(vms[v].name, " on cores ", next, "-",
                                      next + need - 1));
        next += need;
      }
      if (!fits) continue;
      std::vector<int> rest;
      for (int c : shared_cpus) {
        if (c % cores >= next) rest.push_back(c);
      }
      for (size_t v = 0; v < vms.size(); ++v) {
        if (std::find(busy.begin(), busy.end(), v) != busy.end()) continue;
        if (plan.vms[v].isolation == v1::ISOLATION_LEVEL_DEDICATED) continue;
        if (!vms[v].pin_cpus.empty()) continue;  // asked for: kept
        cand.pins[v] = rest;
      }
      cand.why = absl::StrCat("busy VMs pinned to whole cores of their own (",
                              absl::StrJoin(placed, ", "),
                              "), the others to the remaining cores");
      candidates.push_back(std::move(cand));
    }
  }
  {
    Candidate cand{"one-thread-per-core", base_pins,
                   "every VM on the first thread of each core (the cost of "
                   "nosmt, without a reboot)"};
    for (size_t v = 0; v < vms.size(); ++v) {
      std::vector<int> first;
      for (int c : cand.pins[v].empty() ? all_cpus : cand.pins[v]) {
        first.push_back(c % cores);
      }
      std::sort(first.begin(), first.end());
      first.erase(std::unique(first.begin(), first.end()), first.end());
      cand.pins[v] = first;
    }
    candidates.push_back(std::move(cand));
  }

  return candidates;
}


// Step 4: predicts each layout and chooses: the best throughput within the
// tenants' forced-idle budget (by at least min_gain over the simplest),
// else the least forced idle. Returns each layout's prediction.
absl::StatusOr<std::vector<SimResult>> PredictAndChoose(
    const Scenario& scenario, const SimParams& params, const PlanOptions& options,
    const std::vector<VmInstance>& vms, const std::vector<Candidate>& candidates,
    HostPlan& plan, size_t& chosen) {
  const std::optional<double> budget = LeastBudget(scenario, vms);
  plan.forced_idle_budget_pct = budget;
  SimRun run;
  run.seed = scenario.seed + 1;
  run.duration_s = std::min(scenario.duration_s, options.predict_s);
  std::vector<SimResult> predicted;
  for (const Candidate& cand : candidates) {
    SimConfig config = plan.config;
    config.pin_cpus = cand.pins;
    auto result = Simulate(scenario, config, params, run);
    if (!result.ok()) return result.status();
    CandidateScore score;
    score.name = cand.name;
    score.predicted_throughput = result->total_throughput;
    score.predicted_forced_idle_pct = result->forced_idle_pct;
    score.predicted_cross_tenant_pct = result->cross_tenant_pct;
    score.predicted_foreign_pct = result->foreign_pct;
    score.within_budget =
        !budget.has_value() || result->forced_idle_pct <= *budget;
    plan.candidates.push_back(score);
    predicted.push_back(*std::move(result));
  }
  chosen = 0;
  bool any_within = false;
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    any_within = any_within || plan.candidates[i].within_budget;
  }
  for (size_t i = 1; i < plan.candidates.size(); ++i) {
    const CandidateScore& c = plan.candidates[i];
    const CandidateScore& best = plan.candidates[chosen];
    if (any_within) {
      if (!c.within_budget) continue;
      if (!best.within_budget ||
          c.predicted_throughput >
              best.predicted_throughput * (1 + options.min_gain)) {
        chosen = i;
      }
    } else if (c.predicted_forced_idle_pct < best.predicted_forced_idle_pct) {
      chosen = i;
    }
  }
  plan.chosen = candidates[chosen].name;
  plan.config.pin_cpus = candidates[chosen].pins;
  const CandidateScore& won = plan.candidates[chosen];
  const CandidateScore& simplest = plan.candidates[0];
  plan.reasons.push_back(absl::StrFormat(
      "chose '%s' (%s): predicted throughput %.2f core-equivalents, forced "
      "idle %.1f%% (simplest layout: %.2f, %.1f%%)",
      won.name, candidates[chosen].why, won.predicted_throughput,
      won.predicted_forced_idle_pct, simplest.predicted_throughput,
      simplest.predicted_forced_idle_pct));
  if (budget.has_value()) {
    plan.reasons.push_back(
        any_within
            ? absl::StrFormat("forced-idle budget %.1f%% of host CPU time: met",
                              *budget)
            : absl::StrFormat("forced-idle budget %.1f%%: no layout meets it; "
                              "chose the one with the least forced idle",
                              *budget));
  }
  return predicted;
}

// Why each VM is pinned where the chosen layout puts it.
void ExplainPins(const std::vector<VmInstance>& vms, const BaseLayout& base,
                 const std::vector<size_t>& busy, const std::vector<SimResult>& predicted,
                 size_t chosen, HostPlan& plan) {
  const std::vector<std::vector<int>>& base_pins = base.pins;
  for (size_t v = 0; v < vms.size(); ++v) {
    VmDecision& d = plan.vms[v];
    d.pin_cpus = plan.config.pin_cpus[v];
    if (d.isolation == v1::ISOLATION_LEVEL_DEDICATED) continue;
    const VmSimResult& r = predicted[chosen].vms[v];
    if (!vms[v].pin_cpus.empty()) {
      d.reasons.push_back(absl::StrCat("pinned to CPUs ",
                                       CpuListString(d.pin_cpus),
                                       " as the scenario asks"));
    } else if (!d.pin_cpus.empty() && d.pin_cpus != base_pins[v]) {
      bool is_busy = std::find(busy.begin(), busy.end(), v) != busy.end();
      d.reasons.push_back(absl::StrFormat(
          "%s: pinned to CPUs %s (layout '%s'); predicted %.2f "
          "core-equivalents (%.2f in the simplest layout)",
          is_busy ? absl::StrFormat("busy (%d vCPUs, load %.2f per vCPU)",
                                    vms[v].vcpus,
                                    vms[v].workload.DeclaredLoad())
                  : std::string("kept off the busy VMs' cores"),
          CpuListString(d.pin_cpus), plan.chosen, r.throughput,
          predicted[0].vms[v].throughput));
    } else {
      d.reasons.push_back(absl::StrFormat(
          "not pinned; predicted %.2f core-equivalents, sibling %.0f%% same "
          "/ %.0f%% idle / %.0f%% foreign",
          r.throughput, r.same_pct, r.idle_pct, r.foreign_pct));
    }
  }
}

}  // namespace

absl::StatusOr<HostPlan> PlanHost(const Scenario& scenario,
                                  const SimParams& params,
                                  const PlanOptions& options) {
  const std::vector<VmInstance> vms = ExpandInstances(scenario);
  HostPlan plan;
  RETURN_IF_ERROR(DecideGroups(scenario, vms, plan));
  RETURN_IF_ERROR(GateLevels(scenario, params, options, plan));
  ASSIGN_OR_RETURN(BaseLayout base, GiveDedicatedCores(scenario, vms, plan));
  std::vector<size_t> busy;
  const std::vector<Candidate> candidates = CandidateLayouts(scenario, vms, plan, base, busy);
  size_t chosen = 0;
  ASSIGN_OR_RETURN(std::vector<SimResult> predicted,
                   PredictAndChoose(scenario, params, options, vms, candidates, plan, chosen));
  ExplainPins(vms, base, busy, predicted, chosen, plan);
  return plan;
}

absl::StatusOr<std::vector<VmDecision>> ChooseGroups(const Scenario& scenario) {
  HostPlan plan;
  RETURN_IF_ERROR(DecideGroups(scenario, ExpandInstances(scenario), plan));
  return std::move(plan.vms);
}

absl::Status PinLayout(const Scenario& scenario, std::vector<VmDecision>& layout) {
  const std::vector<VmInstance> vms = ExpandInstances(scenario);
  if (layout.size() != vms.size()) {
    return absl::InvalidArgumentError(absl::StrCat("layout has ", layout.size(),
                                                   " VMs; the scenario has ", vms.size()));
  }
  HostPlan plan;
  plan.vms = layout;
  ASSIGN_OR_RETURN(BaseLayout base, GiveDedicatedCores(scenario, vms, plan));
  for (size_t v = 0; v < layout.size(); ++v) layout[v].pin_cpus = base.pins[v];
  return absl::OkStatus();
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
