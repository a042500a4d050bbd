// Internal to cosched_policy: helpers shared by tradeoff.cc (the plan) and
// layout_prediction.cc (the predictions).
#ifndef COSCHED_POLICY_TRADEOFF_INTERNAL_H_
#define COSCHED_POLICY_TRADEOFF_INTERNAL_H_

#include <optional>
#include <string>
#include <vector>

#include "policy/scenario.h"

namespace cosched::policy::internal {

// Dense cookie numbers for trust-group names; "" (untagged) is 0.
std::vector<int> CookiesOf(const std::vector<std::string>& groups);

// The least of the scenario's forced-idle budget and those of the tenants
// with VMs among `vms`; none when nobody set one.
std::optional<double> LeastBudget(const Scenario& scenario, const std::vector<VmInstance>& vms);

}  // namespace cosched::policy::internal

#endif  // COSCHED_POLICY_TRADEOFF_INTERNAL_H_
