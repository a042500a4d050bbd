#include "server/engine/layout_changes.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "policy/layout_rules.h"

namespace cosched::server {

v1::PredictedLayout Predicted(const policy::CandidateScore& score, double gain) {
  v1::PredictedLayout out;
  out.set_throughput(score.predicted_throughput);
  out.set_forced_idle_pct(score.predicted_forced_idle_pct);
  out.set_cross_tenant_pct(score.predicted_cross_tenant_pct);
  out.set_foreign_pct(score.predicted_foreign_pct);
  out.set_gain(gain);
  return out;
}

std::optional<double> LeastBudget(const HostState& state) {
  std::optional<double> budget;
  for (const auto& [tenant, p] : state.policies) {
    if (p.has_forced_idle_budget_pct()) {
      budget = std::min(budget.value_or(100.0), p.forced_idle_budget_pct());
    }
  }
  return budget;
}

std::vector<policy::VmDecision> CurrentLayout(const HostState& state) {
  const v1::Topology& topology = state.host.topology();
  std::vector<policy::VmDecision> current;
  for (const v1::VM& vm : state.vms) {
    policy::VmDecision d;
    d.vm = vm.vm_id();
    d.tenant = vm.tenant_id();
    d.isolation = vm.assignment().isolation();
    d.trust_group = vm.assignment().trust_group();
    // A pin of another host (the VM migrated) does not hold here.
    if (vm.assignment().pin().host_id() == state.host.host_id()) {
      d.pin_cpus = ScenarioCpusOf(topology, {vm.assignment().pin().cpus().begin(),
                                             vm.assignment().pin().cpus().end()});
    }
    current.push_back(std::move(d));
  }
  return current;
}

absl::StatusOr<EnginePins> EnginePins::Make(const policy::Scenario& scenario,
                                           const v1::Topology& topology,
                                           const std::vector<policy::VmDecision>& planned) {
  EnginePins pins(topology);
  pins.unpinned_ = planned;
  for (policy::VmDecision& d : pins.unpinned_) d.pin_cpus.clear();
  RETURN_IF_ERROR(policy::PinLayout(scenario, pins.unpinned_));
  return pins;
}

std::vector<int> EnginePins::Of(const std::vector<policy::VmDecision>& layout, size_t v) const {
  return layout[v].pin_cpus == unpinned_[v].pin_cpus ? std::vector<int>()
                                                     : HostCpusOf(topology_, layout[v].pin_cpus);
}


std::vector<size_t> AddChanges(const HostState& state,
                               const std::vector<policy::VmDecision>& current,
                               const std::vector<policy::VmDecision>& planned,
                               const EnginePins& pins, v1::HostLayoutPlan& plan) {
  std::vector<size_t> changed;
  for (size_t v = 0; v < state.vms.size(); ++v) {
    if (planned[v].isolation == current[v].isolation &&
        planned[v].trust_group == current[v].trust_group &&
        planned[v].pin_cpus == current[v].pin_cpus) {
      continue;
    }
    changed.push_back(v);
    v1::VMLayoutChange* change = plan.add_changes();
    change->set_vm_id(state.vms[v].vm_id());
    change->set_tenant_id(state.vms[v].tenant_id());
    change->set_from_isolation(current[v].isolation);
    change->set_from_trust_group(current[v].trust_group);
    change->set_to_isolation(planned[v].isolation);
    change->set_to_trust_group(planned[v].trust_group);
    for (int cpu : pins.Of(current, v)) change->add_from_pin_cpus(cpu);
    for (int cpu : pins.Of(planned, v)) change->add_to_pin_cpus(cpu);
  }
  return changed;
}

std::string MoveSummary(const policy::LayoutProposal& chosen) {
  const policy::CandidateScore& now_score = chosen.now;
  const policy::CandidateScore& new_score = chosen.next;
  std::string summary = absl::StrFormat(
      "move '%s': predicted throughput %.2f core-equivalents (now %.2f, gain %+.1f%%), forced "
      "idle %.1f%% (now %.1f%%), cross-tenant %.1f%% (now %.1f%%)",
      chosen.move, new_score.predicted_throughput, now_score.predicted_throughput,
      100 * chosen.gain, new_score.predicted_forced_idle_pct, now_score.predicted_forced_idle_pct,
      new_score.predicted_cross_tenant_pct, now_score.predicted_cross_tenant_pct);
  if (chosen.screened) {
    absl::StrAppendFormat(&summary,
                          " over %.2f simulated s: the screen settled it (engine.screen_s)",
                          new_score.simulated_s);
  }
  return summary;
}

}  // namespace cosched::server
