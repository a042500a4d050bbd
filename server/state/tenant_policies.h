// The tenant policies aggregate of the desired state: each tenant's allowed
// levels, default, mode and budget (policy/tenant_policy.h).
#ifndef COSCHED_SERVER_STATE_TENANT_POLICIES_H_
#define COSCHED_SERVER_STATE_TENANT_POLICIES_H_

#include "absl/status/statusor.h"
#include "cosched/v1/control_plane.pb.h"
#include "server/state/commit_effects.h"
#include "server/state/write_support.h"
#include "store/store.h"

namespace cosched::server {

// Thread-safe; validates, writes and audits as Vms does.
class TenantPolicies {
 public:
  TenantPolicies(store::Store& store, const CommitEffects& effects)
      : store_(store), effects_(effects) {}

  // Re-assigns the tenant's VMs that use its default level.
  // FAILED_PRECONDITION (listing them) when tagged VMs use a level the new
  // policy forbids.
  void SetTenantPolicy(const v1::SetTenantPolicyRequest& request, const Actor& actor,
                       Done<v1::TenantPolicy> done);
  // The built-in default (explicitly_set=false) when none was set.
  absl::StatusOr<v1::TenantPolicy> GetTenantPolicy(const v1::GetTenantPolicyRequest& request);
  absl::StatusOr<v1::ListTenantPoliciesResponse> ListTenantPolicies(
      const v1::ListTenantPoliciesRequest& request);

 private:
  store::Store& store_;
  const CommitEffects& effects_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_TENANT_POLICIES_H_
