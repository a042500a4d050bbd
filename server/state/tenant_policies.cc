#include "server/state/tenant_policies.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "policy/trust_group.h"

namespace cosched::server {
namespace {

using google::protobuf::util::TimeUtil;
using internal::ClassesOf;
using internal::NextToken;
using internal::OperatorDecision;
using internal::PageFrom;
using internal::PolicyOf;
using internal::RecordAssignmentChange;
using internal::SetAssignment;
using store::ListAllVms;

// FAILED_PRECONDITION naming (ten of) the tenant's VMs tagged with a level
// `wanted` forbids.
absl::Status CheckLevelsAllowed(const v1::TenantPolicy& wanted, const std::vector<v1::VM>& vms) {
  std::vector<std::string> violators;
  for (const v1::VM& vm : vms) {
    if (vm.requested_isolation() != v1::ISOLATION_LEVEL_UNSPECIFIED &&
        !policy::IsAllowed(wanted, vm.requested_isolation())) {
      violators.push_back(absl::StrCat(
          vm.vm_id(), " (", IsolationName(vm.requested_isolation()), ")"));
    }
  }
  if (!violators.empty()) {
    size_t shown = std::min<size_t>(violators.size(), 10);
    return absl::FailedPreconditionError(absl::StrCat(
        "the new policy of tenant '", wanted.tenant_id(),
        "' forbids levels its VMs use: ",
        absl::StrJoin(violators.begin(), violators.begin() + shown, ", "),
        violators.size() > shown
            ? absl::StrCat(" and ", violators.size() - shown, " more")
            : "",
        "; retag or untag them first"));
  }
  return absl::OkStatus();
}

// Re-assigns the tenant's VMs as `wanted` decides them, at `revision`: those
// tagged without a level take its default, those the engine decided keep
// their level while it is allowed. Each VM that changes is written, its
// change logged for the hosts that receive it, and placed in `delta`.
absl::Status ReassignVms(store::Transaction& txn, const v1::TenantPolicy& wanted,
                         const std::vector<v1::VM>& vms, int64_t revision,
                         const google::protobuf::Timestamp& now, PlacementDelta& delta) {
  for (v1::VM vm : vms) {
    // A level the engine chose stays while the new policy allows it,
    // in either mode: switching auto -> fixed keeps each VM's layout
    // until it is retagged.
    const bool keep_engine =
        vm.decision().decided_by() == v1::DECIDED_BY_ENGINE &&
        vm.requested_isolation() == v1::ISOLATION_LEVEL_UNSPECIFIED &&
        policy::IsAllowed(wanted, vm.assignment().isolation());
    ASSIGN_OR_RETURN(auto decision,
                     policy::DecideTrustGroup(
                         vm.vm_id(),
                         keep_engine ? vm.assignment().isolation()
                                     : vm.requested_isolation(),
                         ClassesOf(vm), wanted));
    v1::VM updated = vm;
    SetAssignment(updated, decision);
    if (!keep_engine) updated.mutable_assignment()->clear_pin();
    updated.mutable_assignment()->set_revision(vm.assignment().revision());
    if (google::protobuf::util::MessageDifferencer::Equals(updated, vm)) {
      continue;
    }
    updated.mutable_assignment()->set_revision(revision);
    *updated.mutable_update_time() = now;
    *updated.mutable_decision() = OperatorDecision(updated, wanted);
    *updated.mutable_decision()->mutable_decided_at() = now;
    RETURN_IF_ERROR(txn.PutVm(updated));
    RETURN_IF_ERROR(RecordAssignmentChange(txn, updated));
    if (!updated.host_id().empty()) {
      ASSIGN_OR_RETURN(PlacedVm placed, PlacedVmOf(txn, updated));
      delta.vms.push_back(std::move(placed));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void TenantPolicies::SetTenantPolicy(const v1::SetTenantPolicyRequest& request,
                                     const Actor& actor,
                                     Done<v1::TenantPolicy> done) {
  absl::Status valid = policy::ValidateTenantPolicy(request.policy());
  if (!valid.ok()) return done(valid);
  v1::TenantPolicy wanted = request.policy();
  wanted.set_explicitly_set(true);
  wanted.clear_revision();
  wanted.clear_update_time();
  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  internal::WriteAndAnswer<v1::TenantPolicy>(
      &store_,
      [wanted = std::move(wanted), actor, audit, delta](
          store::Transaction& txn, v1::TenantPolicy& out) -> absl::Status {
        *delta = PlacementDelta();
        store::VmFilter filter;
        filter.tenant_id = wanted.tenant_id();
        ASSIGN_OR_RETURN(auto vms, ListAllVms(txn, filter));
        RETURN_IF_ERROR(CheckLevelsAllowed(wanted, vms));
        ASSIGN_OR_RETURN(int64_t revision, txn.WriteRevision());
        auto now = TimeUtil::GetCurrentTime();
        RETURN_IF_ERROR(ReassignVms(txn, wanted, vms, revision, now, *delta));
        v1::TenantPolicy stored = wanted;
        stored.set_revision(revision);
        *stored.mutable_update_time() = now;
        ASSIGN_OR_RETURN(auto previous, txn.GetTenantPolicy(wanted.tenant_id()));
        RETURN_IF_ERROR(txn.PutTenantPolicy(stored));
        RETURN_IF_ERROR(internal::Audit(txn, actor.who, actor.role, "SetTenantPolicy", stored.tenant_id(),
                              previous ? &*previous : nullptr, &stored,
                              revision, audit.get()));
        delta->policies.push_back(stored);
        out = std::move(stored);
        return absl::OkStatus();
      },
      effects_.ApplyingPlacement(
          delta, internal::LoggingAudit(
                     audit, effects_.NotifyingLayout(
                                std::make_shared<std::optional<std::string>>(""), std::move(done)))));
}

absl::StatusOr<v1::TenantPolicy> TenantPolicies::GetTenantPolicy(
    const v1::GetTenantPolicyRequest& request) {
  RETURN_IF_ERROR(ValidateId("tenant_id", request.tenant_id()));
  v1::TenantPolicy result;
  RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(result, PolicyOf(txn, request.tenant_id()));
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<v1::ListTenantPoliciesResponse> TenantPolicies::ListTenantPolicies(
    const v1::ListTenantPoliciesRequest& request) {
  ASSIGN_OR_RETURN(store::Page page,
                   PageFrom(request.page_size(), request.page_token()));
  v1::ListTenantPoliciesResponse response;
  RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto policies, txn.ListTenantPolicies(page));
    ASSIGN_OR_RETURN(
        auto token,
        NextToken(policies, page,
                  [](const v1::TenantPolicy& p) { return p.tenant_id(); },
                  [&](const store::Page& p) { return txn.ListTenantPolicies(p); }));
    response.set_next_page_token(token);
    for (auto& p : policies) *response.add_policies() = std::move(p);
    return absl::OkStatus();
  }));
  return response;
}

}  // namespace cosched::server
