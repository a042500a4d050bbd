// The write of one tag or untag inside a store transaction, with its audit
// record: TagVM's (vms.cc) and tagging from domain metadata's
// (metadata_tag.cc) are the same write.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "policy/trust_group.h"
#include "server/state/vm_names.h"
#include "server/state/vm_presence.h"
#include "server/state/write_support.h"

namespace cosched::server::internal {
namespace {

using google::protobuf::util::TimeUtil;

// Whether retagging `existing` as `wanted` keeps the level the engine chose:
// it was the engine's, the request names no level, and the tenant is still
// in mode auto with that level allowed.
bool KeepsEngineLevel(const v1::VM& existing, const v1::VM& wanted,
                      const v1::TenantPolicy& policy) {
  return existing.decision().decided_by() == v1::DECIDED_BY_ENGINE &&
         wanted.requested_isolation() == v1::ISOLATION_LEVEL_UNSPECIFIED &&
         policy::IsAuto(policy) && policy::IsAllowed(policy, existing.assignment().isolation());
}

// Builds a newly tagged VM's presence from what hosts already report of it,
// so that it is enforced at once rather than at each host's next Report;
// adds each of those hosts with the id it reports the VM under to
// `reported`.
absl::Status PresenceFromObservations(store::Transaction& txn, v1::VM& vm,
                                      std::vector<std::pair<std::string, std::string>>& reported) {
  ASSIGN_OR_RETURN(auto seen, txn.ListObservations(vm.vm_id()));
  for (const store::Observation& o : seen) {
    SetPresence(vm, o.host_id, o.vm, o.vm.enforcement().report_time());
    reported.emplace_back(o.host_id, o.vm.vm_id());
  }
  ResolveOwner(vm);
  for (const store::Observation& o : seen) {
    if (o.host_id == vm.host_id()) NoteDomainName(vm, o.vm);
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> ClassesOf(const v1::VM& vm) {
  return {vm.interference_classes().begin(), vm.interference_classes().end()};
}

// Fills vm.assignment from the VM's request fields and the decision.
void SetAssignment(v1::VM& vm, const policy::TrustDecision& decision) {
  v1::Assignment* a = vm.mutable_assignment();
  a->set_vm_id(vm.vm_id());
  a->set_tenant_id(vm.tenant_id());
  a->set_isolation(decision.isolation);
  a->set_trust_group(decision.trust_group);
  a->set_dedicated_cores(decision.dedicated_cores);
  a->set_thread_scope(vm.thread_scope());
  *a->mutable_interference_classes() = vm.interference_classes();
}

// The decision record of a level set by TagVM or a policy (decided_at is
// stamped when it is written).
v1::LayoutDecision OperatorDecision(const v1::VM& vm, const v1::TenantPolicy& policy) {
  v1::LayoutDecision decision;
  decision.set_decided_by(v1::DECIDED_BY_OPERATOR);
  if (vm.requested_isolation() != v1::ISOLATION_LEVEL_UNSPECIFIED) {
    decision.add_reasons(absl::StrCat("tagged with isolation ",
                                      IsolationName(vm.requested_isolation()),
                                      ": the operator's, the engine never changes it"));
  } else if (policy::IsAuto(policy)) {
    decision.add_reasons(absl::StrCat("tenant '", policy.tenant_id(), "' default level ",
                                      IsolationName(policy.default_isolation()),
                                      " until the engine decides (mode auto)"));
  } else {
    decision.add_reasons(absl::StrCat("tenant '", policy.tenant_id(), "' default level ",
                                      IsolationName(policy.default_isolation()),
                                      " (mode fixed)"));
  }
  return decision;
}

absl::Status WriteTag(store::Transaction& txn, const v1::VM& wanted, const Actor& actor,
                      absl::string_view reason, TagWrite& out) {
  out = TagWrite();
  ASSIGN_OR_RETURN(auto existing, txn.GetVm(wanted.vm_id()));
  if (existing && existing->tenant_id() != wanted.tenant_id() &&
      existing->metadata_host().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vm '", wanted.vm_id(), "' is tagged for tenant '",
        existing->tenant_id(), "'; untag it before tagging it for tenant '",
        wanted.tenant_id(), "'"));
  }
  ASSIGN_OR_RETURN(auto policy, PolicyOf(txn, wanted.tenant_id()));
  // Retagging a VM the engine manages keeps the engine's level (its
  // next re-plan sees the new classes); anything else is the
  // operator's decision.
  const bool keep_engine = existing && KeepsEngineLevel(*existing, wanted, policy);
  ASSIGN_OR_RETURN(auto decision,
                   policy::DecideTrustGroup(
                       wanted.vm_id(),
                       keep_engine ? existing->assignment().isolation()
                                   : wanted.requested_isolation(),
                       ClassesOf(wanted), policy));
  v1::VM vm = wanted;
  SetAssignment(vm, decision);
  // The engine's pin goes with its level: an operator's level is unpinned.
  if (keep_engine) *vm.mutable_assignment()->mutable_pin() = existing->assignment().pin();
  *vm.mutable_decision() =
      keep_engine ? existing->decision() : OperatorDecision(wanted, policy);
  if (!keep_engine && !reason.empty()) vm.mutable_decision()->add_reasons(std::string(reason));
  if (existing) {
    vm.set_host_id(existing->host_id());
    *vm.mutable_presence() = existing->presence();
    vm.set_conflict(existing->conflict());
    vm.set_domain_name(existing->domain_name());
    if (vm.metadata_host().empty()) {
      // An operator's tag ends a conflict of metadata hosts disagree on
      // (metadata no longer counts); one of two UUIDs stays (issue #32).
      v1::VM resolved = vm;
      ResolveOwner(resolved);
      vm.set_conflict(resolved.conflict());
    }
    *vm.mutable_create_time() = existing->create_time();
    // Idempotent: the same request changes nothing, not even the revision.
    v1::VM same = *existing;
    same.mutable_assignment()->set_revision(0);
    same.clear_update_time();
    v1::VM asked = vm;
    if (!same.has_decision()) {
      // Written before decisions were kept: a retag that changes
      // nothing else does not write one.
      asked.clear_decision();
    } else if (same.decision().decided_by() != v1::DECIDED_BY_ENGINE) {
      same.mutable_decision()->clear_decided_at();
    }
    if (google::protobuf::util::MessageDifferencer::Equals(same, asked)) {
      *out.response.mutable_vm() = *existing;
      out.response.set_changed(false);
      return absl::OkStatus();
    }
  } else {
    RETURN_IF_ERROR(PresenceFromObservations(txn, vm, out.new_hosts));
  }
  ASSIGN_OR_RETURN(int64_t revision, txn.WriteRevision());
  auto now = TimeUtil::GetCurrentTime();
  if (!existing) *vm.mutable_create_time() = now;
  *vm.mutable_update_time() = now;
  if (!keep_engine) *vm.mutable_decision()->mutable_decided_at() = now;
  vm.mutable_assignment()->set_revision(revision);
  RETURN_IF_ERROR(txn.PutVm(vm));
  RETURN_IF_ERROR(RecordAssignmentChange(txn, vm));
  RETURN_IF_ERROR(Audit(txn, actor.who, actor.role, "TagVM", vm.vm_id(),
                        existing ? &*existing : nullptr, &vm, revision, &out.audit,
                        reason));
  ASSIGN_OR_RETURN(out.placed, PlacedVmOf(txn, vm));
  if (!vm.host_id().empty()) out.layout_host = vm.host_id();
  *out.response.mutable_vm() = std::move(vm);
  out.response.set_changed(true);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> WriteUntag(store::Transaction& txn, const v1::VM& existing,
                                   const Actor& actor, absl::string_view reason,
                                   v1::AuditRecord* logged) {
  ASSIGN_OR_RETURN(int64_t revision, txn.WriteRevision());
  RETURN_IF_ERROR(txn.DeleteVm(existing.vm_id()));
  RETURN_IF_ERROR(RecordReceiverChanges(txn, &existing, nullptr));
  RETURN_IF_ERROR(Audit(txn, actor.who, actor.role, "UntagVM", existing.vm_id(), &existing,
                        nullptr, revision, logged, reason));
  return revision;
}

}  // namespace cosched::server::internal
