#include "policy/trust_group.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/names.h"
#include "common/validation.h"

namespace cosched::policy {
namespace {

bool IsKnownLevel(int level) {
  return level == v1::ISOLATION_LEVEL_VM || level == v1::ISOLATION_LEVEL_TENANT ||
         level == v1::ISOLATION_LEVEL_NONE ||
         level == v1::ISOLATION_LEVEL_DEDICATED;
}

std::string AllowedNames(const v1::TenantPolicy& policy) {
  std::vector<std::string> names;
  for (int level : policy.allowed_isolation()) {
    names.push_back(IsolationName(static_cast<v1::IsolationLevel>(level)));
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace

v1::TenantPolicy DefaultTenantPolicy(absl::string_view tenant_id) {
  v1::TenantPolicy policy;
  policy.set_tenant_id(std::string(tenant_id));
  policy.set_default_isolation(v1::ISOLATION_LEVEL_VM);
  // Every level but none: turning isolation off is a grant an operator
  // makes for a tenant (csctl policy set), never the default (issue #32).
  for (v1::IsolationLevel level :
       {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT, v1::ISOLATION_LEVEL_DEDICATED}) {
    policy.add_allowed_isolation(level);
  }
  policy.set_explicitly_set(false);
  return policy;
}

absl::Status ValidateTenantPolicy(const v1::TenantPolicy& policy) {
  absl::Status s = ValidateId("policy.tenant_id", policy.tenant_id());
  if (!s.ok()) return s;
  if (!IsKnownLevel(policy.default_isolation())) {
    return absl::InvalidArgumentError(
        "policy.default_isolation must be one of vm, tenant, none, dedicated");
  }
  std::set<int> seen;
  for (int i = 0; i < policy.allowed_isolation_size(); ++i) {
    int level = policy.allowed_isolation(i);
    if (!IsKnownLevel(level)) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy.allowed_isolation[", i,
                       "] must be one of vm, tenant, none, dedicated"));
    }
    if (!seen.insert(level).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy.allowed_isolation[", i, "] repeats '",
          IsolationName(static_cast<v1::IsolationLevel>(level)), "'"));
    }
  }
  if (!IsAllowed(policy, policy.default_isolation())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy.default_isolation '", IsolationName(policy.default_isolation()),
        "' must be one of policy.allowed_isolation (", AllowedNames(policy),
        ")"));
  }
  if (policy.has_forced_idle_budget_pct() &&
      !(policy.forced_idle_budget_pct() >= 0 &&
        policy.forced_idle_budget_pct() <= 100)) {
    return absl::InvalidArgumentError(
        "policy.forced_idle_budget_pct must be between 0 and 100 (percent of "
        "host CPU time), or unset for no budget");
  }
  if (!v1::PolicyMode_IsValid(policy.mode())) {
    return absl::InvalidArgumentError(
        "policy.mode must be fixed or auto (or unset for fixed)");
  }
  return absl::OkStatus();
}

bool IsAuto(const v1::TenantPolicy& policy) {
  return policy.mode() == v1::POLICY_MODE_AUTO;
}

bool Applies(const v1::TenantPolicy& policy) {
  return !policy.has_apply() || policy.apply();
}

bool IsAllowed(const v1::TenantPolicy& policy, v1::IsolationLevel level) {
  if (policy.allowed_isolation().empty()) return true;
  for (int allowed : policy.allowed_isolation()) {
    if (allowed == level) return true;
  }
  return false;
}

absl::StatusOr<TrustDecision> DecideTrustGroup(
    absl::string_view vm_id, v1::IsolationLevel requested,
    const std::vector<std::string>& classes, const v1::TenantPolicy& policy) {
  TrustDecision decision;
  decision.isolation = requested == v1::ISOLATION_LEVEL_UNSPECIFIED
                           ? policy.default_isolation()
                           : requested;
  if (!IsKnownLevel(decision.isolation)) {
    return absl::InvalidArgumentError(
        "isolation must be one of vm, tenant, none, dedicated");
  }
  if (!IsAllowed(policy, decision.isolation)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "isolation '", IsolationName(decision.isolation),
        "' is not allowed by the policy of tenant '", policy.tenant_id(),
        "' (allowed: ", AllowedNames(policy), ")",
        policy.explicitly_set() ? ""
                                : "; the tenant has no policy, and none must be granted: "
                                  "csctl policy set with --allow listing it"));
  }
  const std::string& tenant = policy.tenant_id();
  switch (decision.isolation) {
    case v1::ISOLATION_LEVEL_VM:
      decision.trust_group = absl::StrCat(tenant, "/vm/", vm_id);
      break;
    case v1::ISOLATION_LEVEL_TENANT:
      // '+' cannot occur in a class id, so the joined set is unambiguous.
      decision.trust_group =
          classes.empty()
              ? absl::StrCat(tenant, "/tenant")
              : absl::StrCat(tenant, "/tenant/", absl::StrJoin(classes, "+"));
      break;
    case v1::ISOLATION_LEVEL_DEDICATED:
      decision.trust_group = absl::StrCat(tenant, "/dedicated/", vm_id);
      decision.dedicated_cores = true;
      break;
    case v1::ISOLATION_LEVEL_NONE:
    default:
      break;
  }
  return decision;
}

}  // namespace cosched::policy
