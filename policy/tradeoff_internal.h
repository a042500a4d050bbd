// Internal to cosched_policy: helpers shared by tradeoff.cc (the plan),
// layout_pinning.cc (where VMs run) and layout_prediction.cc (the
// predictions).
#ifndef COSCHED_POLICY_TRADEOFF_INTERNAL_H_
#define COSCHED_POLICY_TRADEOFF_INTERNAL_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "policy/scenario.h"
#include "policy/tradeoff.h"

namespace cosched::policy::internal {

// The CPUs of `count` whole cores from `first_core` (CPU c is on core
// c % cores).
std::vector<int> CoreCpus(int first_core, int count, int cores);
// "pinned to cores 0-1", "pinned to the first thread of cores 0-3",
// "pinned to CPUs 1,5" (the simulator's numbering: core c % cores, thread
// c / cores), "not pinned": in cores, which a host's topology numbers
// alike (its CPU ids may differ).
std::string DescribePin(const std::vector<int>& cpus, int cores);
// Of two sorted lists.
std::vector<int> Intersect(const std::vector<int>& a, const std::vector<int>& b);

// Where a layout's VMs may run before the engine pins any.
struct BaseLayout {
  std::vector<int> all_cpus;
  // Cores [top, cores) are given to dedicated VMs; shared_cpus are the
  // others' CPUs (empty when there is no dedicated VM: all of them).
  int top = 0;
  std::vector<int> shared_cpus;
  // Per VM: a dedicated VM's whole cores; another VM's own pinning (the
  // scenario's, else the decision's) within the shared CPUs, or the shared
  // CPUs when there are dedicated cores, else nothing.
  std::vector<std::vector<int>> pins;
  // A dedicated VM's first core, -1 for the others.
  std::vector<int> dedicated_first;
};
// Dedicated VMs (by the layout's levels) get whole cores from the top; a
// VM pinned only to those runs on the others, as agents confine it.
// FAILED_PRECONDITION when they do not fit.
absl::StatusOr<BaseLayout> PinBase(const Scenario& scenario, const std::vector<VmInstance>& vms,
                                   const std::vector<VmDecision>& layout);

// Dense cookie numbers for trust-group names; "" (untagged) is 0.
std::vector<int> CookiesOf(const std::vector<std::string>& groups);

// The least of the scenario's forced-idle budget and those of the tenants
// with VMs among `vms`; none when nobody set one.
std::optional<double> LeastBudget(const Scenario& scenario, const std::vector<VmInstance>& vms);

}  // namespace cosched::policy::internal

#endif  // COSCHED_POLICY_TRADEOFF_INTERNAL_H_
