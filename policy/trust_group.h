// Turns a VM's tagging request and its tenant's policy into a trust group:
// the set of VMs allowed to share SMT siblings (one kernel cookie per group
// and host). Pure functions, no I/O; thread-safe.
#ifndef COSCHED_POLICY_TRUST_GROUP_H_
#define COSCHED_POLICY_TRUST_GROUP_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/types.pb.h"

namespace cosched::policy {

// The name of the tenant of VMs tagged without one.
inline constexpr char kDefaultTenant[] = "default";

struct TrustDecision {
  // The effective level: never UNSPECIFIED.
  v1::IsolationLevel isolation = v1::ISOLATION_LEVEL_UNSPECIFIED;
  // Empty for `none` (cookie 0). Otherwise stable: the same inputs always
  // give the same id, and ids of different tenants never collide, because
  // every id starts with the tenant id and ids cannot contain '/'.
  std::string trust_group;
  // `dedicated`: the VM's vCPUs need whole cores nobody else uses.
  bool dedicated_cores = false;
};

// The policy of a tenant that never had one set: `vm`, every level allowed
// but `none`, which only a policy set for the tenant can grant.
v1::TenantPolicy DefaultTenantPolicy(absl::string_view tenant_id);

// INVALID_ARGUMENT naming the field: bad tenant id, UNSPECIFIED or unknown
// levels, duplicates, a default level that is not allowed, or a
// forced_idle_budget_pct outside 0-100 (or NaN), or an unknown mode. A
// tenant in mode auto that allows only `none` is valid: there is nothing
// for the engine to decide.
absl::Status ValidateTenantPolicy(const v1::TenantPolicy& policy);

// Mode auto: the engine decides the levels of the tenant's VMs tagged
// without one.
bool IsAuto(const v1::TenantPolicy& policy);
// The engine writes its decisions for the tenant (apply unset or true);
// false is a dry run.
bool Applies(const v1::TenantPolicy& policy);

// True when `policy` allows `level` (an empty allowed list allows all).
bool IsAllowed(const v1::TenantPolicy& policy, v1::IsolationLevel level);

// Decides the trust group of VM `vm_id` of `policy.tenant_id()`.
// `requested` UNSPECIFIED takes the tenant's default. `classes` must be
// sorted and unique (see ValidateClasses): at level `tenant`, VMs with
// different class sets get different groups, so classes that interfere
// never share a core.
// FAILED_PRECONDITION when the tenant's policy forbids the level.
absl::StatusOr<TrustDecision> DecideTrustGroup(
    absl::string_view vm_id, v1::IsolationLevel requested,
    const std::vector<std::string>& classes, const v1::TenantPolicy& policy);

}  // namespace cosched::policy

#endif  // COSCHED_POLICY_TRUST_GROUP_H_
