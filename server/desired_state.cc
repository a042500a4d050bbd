// DesiredState's writes: tags, untags, tenant policies and host
// registration, each with its validation and audit record. The write of one
// tag or untag, which TagVM and tagging from metadata share, is in
// tag_writes.cc; agents' reports in report_writes.cc; the engine's layouts
// in layout_writes.cc; the reads are in desired_state_reads.cc, the policy
// questions in policy_queries.cc.
#include "server/desired_state.h"

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/labels.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "glog/logging.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "policy/trust_group.h"
#include "server/agent_input.h"
#include "server/desired_state_internal.h"
#include "server/vm_presence.h"

namespace cosched::server {
namespace internal {

absl::Status ValidateOptionalId(absl::string_view field,
                                absl::string_view value) {
  return value.empty() ? absl::OkStatus() : ValidateId(field, value);
}

absl::StatusOr<v1::TenantPolicy> PolicyOf(store::Transaction& txn,
                                          const std::string& tenant_id) {
  ASSIGN_OR_RETURN(auto stored, txn.GetTenantPolicy(tenant_id));
  return stored.has_value() ? *stored : policy::DefaultTenantPolicy(tenant_id);
}

absl::StatusOr<std::vector<v1::VM>> AllVms(store::Transaction& txn,
                                           const store::VmFilter& filter) {
  std::vector<v1::VM> all;
  store::Page page;
  page.limit = kMaxPageSize;
  while (true) {
    ASSIGN_OR_RETURN(auto batch, txn.ListVms(filter, page));
    if (batch.empty()) break;
    page.after = batch.back().vm_id();
    for (auto& vm : batch) all.push_back(std::move(vm));
    if (static_cast<int>(batch.size()) < page.limit) break;
  }
  return all;
}

// A record as audit JSON; empty for none.
std::string AuditJson(const google::protobuf::Message* record) {
  if (record == nullptr) return "";
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(*record, &json, options).ok()) {
    // A record that does not print is still a change that happened.
    return record->ShortDebugString();
  }
  return json;
}

absl::Status ValidateSwitchReason(const std::string& reason) {
  if (reason.empty()) {
    return absl::InvalidArgumentError(
        "reason is required: say why enforcement is switched, for the audit trail");
  }
  if (reason.size() > kMaxDetailLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("reason must be at most ", kMaxDetailLength, " characters"));
  }
  return absl::OkStatus();
}

absl::Status Audit(store::Transaction& txn, const std::string& who,
                   const std::string& role, absl::string_view method,
                   absl::string_view subject, const google::protobuf::Message* before,
                   const google::protobuf::Message* after, int64_t revision,
                   v1::AuditRecord* logged, absl::string_view reason) {
  v1::AuditRecord record;
  record.set_time_unix_ns(absl::ToUnixNanos(absl::Now()));
  record.set_who(who);
  record.set_role(role);
  record.set_method(std::string(method));
  record.set_subject(std::string(subject));
  record.set_before(AuditJson(before));
  record.set_after(AuditJson(after));
  record.set_revision(revision);
  record.set_reason(std::string(reason));
  RETURN_IF_ERROR(txn.AppendAudit(record));
  *logged = std::move(record);
  return absl::OkStatus();
}

void LogAudit(const v1::AuditRecord& record) {
  if (record.method().empty()) return;
  LOG(INFO) << "audit: " << record.who() << " (" << record.role() << ") "
            << record.method() << " " << record.subject()
            << (record.reason().empty() ? "" : " (" + record.reason() + ")")
            << " revision " << record.revision() << " before "
            << (record.before().empty() ? "none" : record.before()) << " after "
            << (record.after().empty() ? "none" : record.after());
}

absl::Status RecordReceiverChanges(store::Transaction& txn, const v1::VM* before,
                                   const v1::VM* after) {
  std::set<std::string> hosts;
  if (before != nullptr) hosts = HostsOf(*before);
  if (after != nullptr) hosts.merge(HostsOf(*after));
  const std::string& vm_id = after != nullptr ? after->vm_id() : before->vm_id();
  for (const std::string& host : hosts) {
    const bool was = before != nullptr && ReceivesAssignment(*before, host);
    const bool is = after != nullptr && ReceivesAssignment(*after, host);
    if (was != is) RETURN_IF_ERROR(txn.RecordChange(host, vm_id));
  }
  return absl::OkStatus();
}

absl::Status RecordAssignmentChange(store::Transaction& txn, const v1::VM& vm) {
  for (const std::string& host : HostsOf(vm)) {
    if (ReceivesAssignment(vm, host)) RETURN_IF_ERROR(txn.RecordChange(host, vm.vm_id()));
  }
  return absl::OkStatus();
}

}  // namespace internal

namespace {

using internal::AllVms;
using internal::ClassesOf;
using internal::OperatorDecision;
using internal::SetAssignment;
using internal::kMaxDetailLength;
using internal::kMaxPageSize;
using internal::PolicyOf;
using internal::RecordAssignmentChange;
using internal::RecordReceiverChanges;
using internal::ValidatePreflight;
using internal::ValidateTopology;
using internal::ValidateOptionalId;
using internal::WriteAndAnswer;

using google::protobuf::util::TimeUtil;

constexpr size_t kMaxVersionLength = 64;

absl::Status ValidateIsolationEnum(absl::string_view field, int value) {
  if (!v1::IsolationLevel_IsValid(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " must be one of vm, tenant, none, dedicated (or unset)"));
  }
  return absl::OkStatus();
}

absl::Status Audit(store::Transaction& txn, const Actor& actor,
                   absl::string_view method, absl::string_view subject,
                   const google::protobuf::Message* before,
                   const google::protobuf::Message* after, int64_t revision,
                   v1::AuditRecord* logged, absl::string_view reason = {}) {
  return internal::Audit(txn, actor.who, actor.role, method, subject, before, after,
                         revision, logged, reason);
}

// `done`, after logging the audit record once the change is durable.
template <typename T>
DesiredState::Done<T> LogAudit(std::shared_ptr<v1::AuditRecord> record,
                               DesiredState::Done<T> done) {
  return [record, done = std::move(done)](absl::StatusOr<T> result) {
    if (result.ok()) internal::LogAudit(*record);
    done(std::move(result));
  };
}

}  // namespace

template <typename T>
DesiredState::Done<T> DesiredState::ForgettingReports(
    std::shared_ptr<std::set<std::string>> hosts, Done<T> done) {
  return [this, hosts, done = std::move(done)](absl::StatusOr<T> result) {
    if (result.ok()) {
      for (const std::string& host : *hosts) ForgetReport(host);
    }
    done(std::move(result));
  };
}

template <typename T>
DesiredState::Done<T> DesiredState::NotifyingLayout(
    std::shared_ptr<std::optional<std::string>> host_id, Done<T> done) {
  return [this, host_id, done = std::move(done)](absl::StatusOr<T> result) {
    if (result.ok() && layout_observer_ && host_id->has_value()) layout_observer_(**host_id);
    done(std::move(result));
  };
}

template <typename T>
DesiredState::Done<T> DesiredState::ApplyingPlacement(
    std::shared_ptr<PlacementDelta> delta, Done<T> done) {
  // Runs on the store's completion thread in commit order, so the view
  // follows the store's order of changes.
  return [this, delta, done = std::move(done)](absl::StatusOr<T> result) {
    if (result.ok()) placement_.Apply(*delta);
    done(std::move(result));
  };
}

void DesiredState::TagVm(const v1::TagVMRequest& request, const Actor& actor,
                         Done<v1::TagVMResponse> done) {
  std::vector<std::string> classes;
  absl::Status valid = ValidateId("vm_id", request.vm_id());
  if (valid.ok()) valid = ValidateOptionalId("tenant_id", request.tenant_id());
  if (valid.ok()) valid = ValidateIsolationEnum("isolation", request.isolation());
  if (valid.ok() && !v1::ThreadScope_IsValid(request.thread_scope())) {
    valid = absl::InvalidArgumentError(
        "thread_scope must be one of vcpus, emulator, full (or unset)");
  }
  if (valid.ok()) {
    valid = ValidateClasses("interference_classes",
                            request.interference_classes(), &classes);
  }
  if (!valid.ok()) return done(valid);

  v1::VM wanted;
  wanted.set_vm_id(request.vm_id());
  wanted.set_tenant_id(request.tenant_id().empty() ? policy::kDefaultTenant
                                                   : request.tenant_id());
  wanted.set_requested_isolation(request.isolation());
  for (auto& c : classes) wanted.add_interference_classes(c);
  wanted.set_thread_scope(request.thread_scope() == v1::THREAD_SCOPE_UNSPECIFIED
                              ? v1::THREAD_SCOPE_EMULATOR
                              : request.thread_scope());

  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  auto hosts = std::make_shared<std::set<std::string>>();
  auto layout_host = std::make_shared<std::optional<std::string>>();
  WriteAndAnswer<v1::TagVMResponse>(
      store_,
      [wanted = std::move(wanted), actor, audit, delta, hosts, layout_host](
          store::Transaction& txn, v1::TagVMResponse& out) -> absl::Status {
        *delta = PlacementDelta();
        internal::TagWrite write;
        RETURN_IF_ERROR(internal::WriteTag(txn, wanted, actor, "", write));
        if (write.placed) delta->vms.push_back(*std::move(write.placed));
        *audit = std::move(write.audit);
        *hosts = std::move(write.new_hosts);
        *layout_host = std::move(write.layout_host);
        out = std::move(write.response);
        return absl::OkStatus();
      },
      ApplyingPlacement(
          delta, LogAudit(audit, ForgettingReports(
                                     hosts, NotifyingLayout(layout_host, std::move(done))))));
}

void DesiredState::UntagVm(const v1::UntagVMRequest& request,
                           const Actor& actor, Done<v1::UntagVMResponse> done) {
  absl::Status valid = ValidateId("vm_id", request.vm_id());
  if (!valid.ok()) return done(valid);
  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  delta->removed_vms.push_back(request.vm_id());
  auto hosts = std::make_shared<std::set<std::string>>();
  auto layout_host = std::make_shared<std::optional<std::string>>();
  WriteAndAnswer<v1::UntagVMResponse>(
      store_,
      [vm_id = request.vm_id(), actor, audit, hosts, layout_host](
          store::Transaction& txn, v1::UntagVMResponse& out) -> absl::Status {
        ASSIGN_OR_RETURN(auto existing, txn.GetVm(vm_id));
        if (!existing) {
          return absl::NotFoundError(absl::StrCat("vm '", vm_id, "' is not tagged"));
        }
        ASSIGN_OR_RETURN(int64_t revision,
                         internal::WriteUntag(txn, *existing, actor, "", audit.get()));
        *hosts = HostsOf(*existing);
        if (!existing->host_id().empty()) *layout_host = existing->host_id();
        out.set_revision(revision);
        return absl::OkStatus();
      },
      ApplyingPlacement(
          delta, LogAudit(audit, ForgettingReports(
                                     hosts, NotifyingLayout(layout_host, std::move(done))))));
}

void DesiredState::SetTenantPolicy(const v1::SetTenantPolicyRequest& request,
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
  WriteAndAnswer<v1::TenantPolicy>(
      store_,
      [wanted = std::move(wanted), actor, audit, delta](
          store::Transaction& txn, v1::TenantPolicy& out) -> absl::Status {
        *delta = PlacementDelta();
        store::VmFilter filter;
        filter.tenant_id = wanted.tenant_id();
        ASSIGN_OR_RETURN(auto vms, AllVms(txn, filter));
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
        ASSIGN_OR_RETURN(int64_t revision, txn.WriteRevision());
        auto now = TimeUtil::GetCurrentTime();
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
            delta->vms.push_back(std::move(placed));
          }
        }
        v1::TenantPolicy stored = wanted;
        stored.set_revision(revision);
        *stored.mutable_update_time() = now;
        ASSIGN_OR_RETURN(auto previous, txn.GetTenantPolicy(wanted.tenant_id()));
        RETURN_IF_ERROR(txn.PutTenantPolicy(stored));
        RETURN_IF_ERROR(Audit(txn, actor, "SetTenantPolicy", stored.tenant_id(),
                              previous ? &*previous : nullptr, &stored,
                              revision, audit.get()));
        delta->policies.push_back(stored);
        out = std::move(stored);
        return absl::OkStatus();
      },
      ApplyingPlacement(
          delta, LogAudit(audit, NotifyingLayout(std::make_shared<std::optional<std::string>>(""),
                                                 std::move(done)))));
}

void DesiredState::RegisterHost(const v1::RegisterRequest& request,
                                const Actor& actor,
                                Done<v1::RegisterResponse> done) {
  absl::Status valid = ValidateId("host_id", request.host_id());
  if (valid.ok()) valid = ValidateTopology(request.topology());
  if (valid.ok() &&
      !v1::CoreSchedSupport_IsValid(request.capabilities().core_sched())) {
    valid = absl::InvalidArgumentError(
        "capabilities.core_sched is not a known support level");
  }
  if (valid.ok() &&
      request.capabilities().core_sched_detail().size() > kMaxDetailLength) {
    valid = absl::InvalidArgumentError(absl::StrCat(
        "capabilities.core_sched_detail must be at most ", kMaxDetailLength,
        " bytes"));
  }
  if (valid.ok()) {
    valid = ValidatePreflight("capabilities.preflight", request.capabilities().preflight());
  }
  if (valid.ok()) valid = ValidateLabels("labels", request.labels());
  if (valid.ok() && request.agent_version().size() > kMaxVersionLength) {
    valid = absl::InvalidArgumentError(absl::StrCat(
        "agent_version must be at most ", kMaxVersionLength, " bytes"));
  }
  if (!valid.ok()) return done(valid);
  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  WriteAndAnswer<v1::RegisterResponse>(
      store_,
      [request, actor, audit, delta, enforce = enforce_policy()](
          store::Transaction& txn, v1::RegisterResponse& response) -> absl::Status {
        *delta = PlacementDelta();
        ASSIGN_OR_RETURN(auto existing, txn.GetHost(request.host_id()));
        ASSIGN_OR_RETURN(std::optional<v1::Rollout> rollout, txn.GetRollout());
        v1::Host host = existing.value_or(v1::Host());
        // A host new to csd follows the fleet's new_hosts setting; a known
        // one keeps what it had (a rollout only ever enables).
        if (!existing && rollout && rollout->new_hosts() == v1::NEW_HOSTS_WAIT_FOR_ROLLOUT) {
          host.set_waits_for_rollout(true);
        }
        auto now = TimeUtil::GetCurrentTime();
        host.set_host_id(request.host_id());
        *host.mutable_topology() = request.topology();
        *host.mutable_capabilities() = request.capabilities();
        host.set_agent_version(request.agent_version());
        *host.mutable_labels() = request.labels();
        host.set_agent_observes(request.observe());
        if (!existing) *host.mutable_registered_time() = now;
        *host.mutable_last_seen_time() = now;
        host.clear_connected();
        RETURN_IF_ERROR(txn.PutHost(host));
        delta->hosts.push_back(host);
        *response.mutable_enablement() =
            EnablementOf(request.capabilities().preflight(), enforce,
                         VerdictOf(rollout ? &*rollout : nullptr, host));
        // An operator's override of a hazard (allow_hazards) is on record
        // whenever it starts to apply or changes.
        const auto& allowed = host.capabilities().preflight().allowed_hazards();
        const bool override_changed =
            !existing ||
            !std::equal(allowed.begin(), allowed.end(),
                        existing->capabilities().preflight().allowed_hazards().begin(),
                        existing->capabilities().preflight().allowed_hazards().end(),
                        [](const v1::Hazard& a, const v1::Hazard& b) {
                          return a.name() == b.name();
                        });
        if (!allowed.empty() && override_changed) {
          v1::AuditRecord logged;
          RETURN_IF_ERROR(Audit(txn, actor, "AllowHazards", host.host_id(),
                                existing ? &existing->capabilities().preflight() : nullptr,
                                &host.capabilities().preflight(), 0, &logged));
        }
        // Re-registration of a known host is routine (every agent start),
        // but what it says of itself is on record when it changes: its
        // topology decides which CPUs are siblings, its labels which
        // rollouts and selectors concern it, agent_observes whether it
        // sets cookies at all.
        if (existing) {
          v1::Host before, after;
          *before.mutable_topology() = existing->topology();
          *before.mutable_labels() = existing->labels();
          before.set_agent_observes(existing->agent_observes());
          *after.mutable_topology() = host.topology();
          *after.mutable_labels() = host.labels();
          after.set_agent_observes(host.agent_observes());
          if (google::protobuf::util::MessageDifferencer::Equals(before, after)) {
            return absl::OkStatus();
          }
          return Audit(txn, actor, "ChangeHost", host.host_id(), &before, &after, 0,
                       audit.get());
        }
        return Audit(txn, actor, "Register", host.host_id(), nullptr, &host, 0,
                     audit.get());
      },
      ApplyingPlacement<v1::RegisterResponse>(
          delta,
          LogAudit<v1::RegisterResponse>(
              audit, [this, host_id = request.host_id(),
                      done = std::move(done)](absl::StatusOr<v1::RegisterResponse> r) {
                // Its topology may have changed: the next Report is checked
                // and written whole.
                if (r.ok()) ForgetReport(host_id);
                if (r.ok()) r->set_revision(store_->CurrentRevision());
                done(std::move(r));
              })));
}

absl::Status DesiredState::AuditConfigReload(const std::string& changed) {
  v1::AuditRecord logged;
  RETURN_IF_ERROR(store_->WriteSync([&](store::Transaction& txn) {
    return internal::Audit(txn, "csd:reload", "admin", "ReloadConfig", "csd.yaml", nullptr,
                           nullptr, store_->CurrentRevision(), &logged,
                           absl::StrCat("changed ", changed));
  }));
  internal::LogAudit(logged);
  return absl::OkStatus();
}

}  // namespace cosched::server
