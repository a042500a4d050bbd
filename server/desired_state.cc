// DesiredState's writes: tags, untags, tenant policies, host registration
// and agents' reports, each with its validation and audit record. The write
// of one tag or untag, which TagVM and tagging from metadata share, is in
// tag_writes.cc; the reads are in desired_state_reads.cc, the policy
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
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "policy/trust_group.h"
#include "server/agent_input.h"
#include "server/desired_state_internal.h"
#include "server/metadata_tag.h"
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
using internal::kMaxTrustGroupLength;
using internal::PolicyOf;
using internal::RecordAssignmentChange;
using internal::RecordReceiverChanges;
using internal::ValidateDomainMetadata;
using internal::ValidateEnforcement;
using internal::ValidatePreflight;
using internal::ValidateStatsCores;
using internal::ValidateTopology;
using internal::ValidateOptionalId;

using google::protobuf::util::TimeUtil;

constexpr int kMaxReportedVms = 10000;
constexpr size_t kMaxVersionLength = 64;

// Runs `done` with the outcome of a write whose result `fn` fills in.
template <typename T>
void WriteAndAnswer(store::Store* store,
                    std::function<absl::Status(store::Transaction&, T&)> fn,
                    DesiredState::Done<T> done) {
  auto result = std::make_shared<T>();
  store->Write(
      [fn = std::move(fn), result](store::Transaction& txn) {
        // A store may run the function again (EtcdStore, after losing a
        // race): each run answers afresh.
        *result = T();
        return fn(txn, *result);
      },
      [done = std::move(done), result](absl::Status status) {
        if (status.ok()) {
          done(std::move(*result));
        } else {
          done(status);
        }
      });
}

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
      [request, actor, audit, delta](store::Transaction& txn,
                                     v1::RegisterResponse&) -> absl::Status {
        *delta = PlacementDelta();
        ASSIGN_OR_RETURN(auto existing, txn.GetHost(request.host_id()));
        v1::Host host = existing.value_or(v1::Host());
        auto now = TimeUtil::GetCurrentTime();
        host.set_host_id(request.host_id());
        *host.mutable_topology() = request.topology();
        *host.mutable_capabilities() = request.capabilities();
        host.set_agent_version(request.agent_version());
        *host.mutable_labels() = request.labels();
        if (!existing) *host.mutable_registered_time() = now;
        *host.mutable_last_seen_time() = now;
        host.clear_connected();
        RETURN_IF_ERROR(txn.PutHost(host));
        delta->hosts.push_back(host);
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
        // Re-registration of a known host is routine (every agent start).
        if (existing) return absl::OkStatus();
        return Audit(txn, actor, "Register", host.host_id(), nullptr, &host, 0,
                     audit.get());
      },
      ApplyingPlacement<v1::RegisterResponse>(
          delta,
          LogAudit<v1::RegisterResponse>(
              audit, [this, host_id = request.host_id(),
                      enablement = EnablementOf(request.capabilities().preflight(), enforce_,
                                                rollout_.VerdictFor(request.host_id())),
                      done = std::move(done)](absl::StatusOr<v1::RegisterResponse> r) {
                // Its topology may have changed: the next Report is checked
                // and written whole.
                if (r.ok()) ForgetReport(host_id);
                if (r.ok()) r->set_revision(store_->CurrentRevision());
                if (r.ok()) *r->mutable_enablement() = enablement;
                done(std::move(r));
              })));
}

void DesiredState::ApplyReport(const v1::ReportRequest& request,
                               Done<v1::ReportResponse> done) {
  absl::Status valid = ValidateId("host_id", request.host_id());
  if (valid.ok() && request.applied_revision() < 0) {
    valid = absl::InvalidArgumentError("applied_revision must not be negative");
  }
  if (valid.ok() && request.vms_size() > kMaxReportedVms) {
    valid = absl::InvalidArgumentError(
        absl::StrCat("vms has ", request.vms_size(), " entries; at most ",
                     kMaxReportedVms, " are allowed"));
  }
  std::set<std::string> ids;
  for (int i = 0; valid.ok() && i < request.vms_size(); ++i) {
    const auto& o = request.vms(i);
    std::string field = absl::StrCat("vms[", i, "]");
    valid = ValidateId(absl::StrCat(field, ".vm_id"), o.vm_id());
    if (valid.ok()) valid = ValidateOptionalId(absl::StrCat(field, ".uuid"), o.uuid());
    if (valid.ok()) valid = ValidateEnforcement(absl::StrCat(field, ".enforcement"), o.enforcement());
    if (valid.ok() && o.has_metadata()) {
      valid = ValidateDomainMetadata(absl::StrCat(field, ".metadata"), o.metadata());
    }
    if (valid.ok() && !v1::VMRunState_IsValid(o.run_state())) {
      valid = absl::InvalidArgumentError(
          absl::StrCat(field, ".run_state is not a known run state"));
    }
    if (valid.ok() && !ids.insert(o.vm_id()).second) {
      valid = absl::InvalidArgumentError(
          absl::StrCat(field, ".vm_id '", o.vm_id(), "' is reported twice"));
    }
  }
  if (valid.ok()) valid = ValidateStatsWindows(request.stats(), request.dropped_windows());
  if (valid.ok()) valid = ValidatePreflight("preflight", request.preflight());
  if (!valid.ok()) return done(valid);
  // Every answer says whether the host should set cookies, so a change of
  // the setting or of the host's vulnerabilities reaches a running agent.
  liveness_.Note(request, absl::Now());
  done = [enablement = EnablementOf(request.preflight(), enforce_,
                                    rollout_.VerdictFor(request.host_id())),
          done = std::move(done)](absl::StatusOr<v1::ReportResponse> r) mutable {
    if (r.ok()) *r->mutable_enablement() = enablement;
    done(std::move(r));
  };

  // Shared by the write and its completion: stats can be large to copy.
  auto report = std::make_shared<const v1::ReportRequest>(request);
  const std::string content = ReportContent(request);
  if (std::optional<ReportSeen> last = UnchangedReport(request.host_id(), content)) {
    // The same as the host's last committed Report: nothing to write, no
    // revision, no fan-out. Only its time and its stats windows are new.
    v1::Topology topology;
    for (int i = 0; i < last->cores; ++i) topology.add_cores();
    absl::Status stats_valid = ValidateStatsCores(request.stats(), topology);
    if (!stats_valid.ok()) return done(stats_valid);
    return AddReportStats(report, std::move(last->tagged_id), std::move(done));
  }

  // Reported vm_id -> the id the VM is tagged under, where they differ;
  // filled by the write, read once it committed.
  auto tagged_id = std::make_shared<absl::flat_hash_map<std::string, std::string>>();
  auto delta = std::make_shared<PlacementDelta>();
  auto moves = std::make_shared<std::vector<std::string>>();
  auto cores = std::make_shared<int>(0);
  auto from_metadata = std::make_shared<MetadataWrites>();
  WriteAndAnswer<v1::ReportResponse>(
      store_,
      [report, tagged_id, delta, moves, cores, from_metadata,
       tag_from_metadata = tag_from_metadata_](store::Transaction& txn,
                                               v1::ReportResponse&) -> absl::Status {
        *delta = PlacementDelta();
        moves->clear();
        tagged_id->clear();
        *from_metadata = MetadataWrites();
        const v1::ReportRequest& request = *report;
        const std::string& host_id = request.host_id();
        ASSIGN_OR_RETURN(auto host, txn.GetHost(host_id));
        if (!host) {
          return absl::FailedPreconditionError(absl::StrCat(
              "host '", host_id, "' is not registered; call Register first"));
        }
        RETURN_IF_ERROR(ValidateStatsCores(request.stats(), host->topology()));
        *cores = host->topology().cores_size();

        std::vector<v1::VMObservation> observations(request.vms().begin(),
                                                    request.vms().end());
        auto now = TimeUtil::GetCurrentTime();
        for (auto& o : observations) *o.mutable_enforcement()->mutable_report_time() = now;
        RETURN_IF_ERROR(txn.ReplaceObservations(host_id, observations));
        // Every VM this host owned or reported before, and every tagged VM
        // it reports now, with what it reports of each.
        std::map<std::string, v1::VM> vms;
        for (const store::VmFilter& filter :
             {store::VmFilter::OwnedBy(host_id), store::VmFilter::ReportedOn(host_id)}) {
          ASSIGN_OR_RETURN(auto listed, AllVms(txn, filter));
          for (v1::VM& vm : listed) vms.emplace(vm.vm_id(), std::move(vm));
        }
        std::map<std::string, const v1::VMObservation*> seen;
        for (const auto& o : observations) {
          // A VM is tagged under its name or its UUID.
          std::optional<v1::VM> vm;
          for (const std::string* key : {&o.vm_id(), &o.uuid()}) {
            if (key->empty() || vm) continue;
            ASSIGN_OR_RETURN(vm, txn.GetVm(*key));
          }
          if (tag_from_metadata) {
            const std::string before = vm ? vm->vm_id() : "";
            ASSIGN_OR_RETURN(vm, TagFromMetadata(txn, host_id, o, std::move(vm), *from_metadata));
            // Untagged now: not written back below.
            if (!vm && !before.empty()) vms.erase(before);
          }
          if (!vm) continue;
          if (vm->vm_id() != o.vm_id()) (*tagged_id)[o.vm_id()] = vm->vm_id();
          seen[vm->vm_id()] = &o;
          // As read now: tagging from metadata may have rewritten the VM
          // listed above.
          vms.insert_or_assign(vm->vm_id(), *std::move(vm));
        }
        delta->removed_vms = from_metadata->untagged_vms;
        for (auto& [vm_id, vm] : vms) {
          v1::VM updated = vm;
          auto it = seen.find(vm_id);
          SetPresence(updated, host_id,
                      it == seen.end() ? std::nullopt
                                       : std::optional<v1::VMObservation>(*it->second),
                      now);
          ResolveOwner(updated);
          if (!google::protobuf::util::MessageDifferencer::Equals(updated, vm)) {
            RETURN_IF_ERROR(RecordReceiverChanges(txn, &vm, &updated));
            RETURN_IF_ERROR(txn.PutVm(updated));
            // A first placement or a VM gone everywhere is no migration.
            if (updated.host_id() != vm.host_id() && !vm.host_id().empty() &&
                !updated.host_id().empty()) {
              moves->push_back(absl::StrCat(vm_id, " from '", vm.host_id(), "' to '",
                                            updated.host_id(), "'"));
              v1::AuditRecord logged;
              RETURN_IF_ERROR(Audit(txn, Actor{host_id, "host"}, "ChangeOwner", vm_id,
                                    &vm, &updated, 0, &logged));
            }
          }
          ASSIGN_OR_RETURN(PlacedVm placed, PlacedVmOf(txn, updated));
          delta->vms.push_back(std::move(placed));
        }
        *host->mutable_last_seen_time() = now;
        host->set_applied_revision(request.applied_revision());
        host->set_vm_count(request.vms_size());
        if (request.has_preflight() &&
            !google::protobuf::util::MessageDifferencer::Equals(
                host->capabilities().preflight(), request.preflight())) {
          // A hazard came or went: Place must see it at once.
          *host->mutable_capabilities()->mutable_preflight() = request.preflight();
          delta->hosts.push_back(*host);
        }
        return txn.PutHost(*host);
      },
      [this, report, content, tagged_id, delta, moves, cores, from_metadata,
       done = std::move(done)](absl::StatusOr<v1::ReportResponse> r) mutable {
        if (!r.ok()) return done(r.status());
        placement_.Apply(*delta);
        for (const v1::AuditRecord& audit : from_metadata->audits) internal::LogAudit(audit);
        for (const std::string& host : from_metadata->hosts) {
          if (host != report->host_id()) ForgetReport(host);
        }
        for (const std::string& move : *moves) {
          LOG(INFO) << "host " << report->host_id() << ": owner of vm " << move;
        }
        RememberReport(report->host_id(),
                       ReportSeen{content, *cores, *tagged_id});
        if (layout_observer_) layout_observer_(report->host_id());
        AddReportStats(report, std::move(*tagged_id), std::move(done));
      });
}

void DesiredState::AddReportStats(
    std::shared_ptr<const v1::ReportRequest> report,
    absl::flat_hash_map<std::string, std::string> tagged_id,
    Done<v1::ReportResponse> done) {
  v1::ReportResponse response;
  response.set_revision(store_->CurrentRevision());
  // Only a committed (or unchanged) Report counts: a refused one changes
  // nothing. Answered once its windows are in, so the agent's next Report
  // and any GetStats after the answer see them.
  auto tagged = std::make_shared<const absl::flat_hash_map<std::string, std::string>>(
      std::move(tagged_id));
  if (stats_observer_ && report->stats_size() > 0) stats_observer_(report, tagged);
  stats_.AddInBackground(
      report, tagged,
      [host = report->host_id(), done = std::move(done), response](int64_t ignored) {
        LOG_IF_EVERY_N(WARNING, ignored > 0, 100)
            << "host " << host << ": ignored " << ignored
            << " stats window(s) already reported, over 24 h old or "
               "ahead of csd's clock (logged every 100th time)";
        done(response);
      });
}

std::string DesiredState::ReportContent(const v1::ReportRequest& request) {
  // This runs for every Report: one scratch message is reused for the VMs
  // (its fields keep their capacity) instead of a copy of the whole list.
  // Agents stamp report_time on every Report; csd stamps its own, so it is
  // no part of what changed.
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    out.WriteVarint64(static_cast<uint64_t>(request.applied_revision()));
    v1::VMObservation scratch;
    for (const v1::VMObservation& o : request.vms()) {
      scratch.CopyFrom(o);
      scratch.mutable_enforcement()->clear_report_time();
      out.WriteVarint64(scratch.ByteSizeLong());
      scratch.SerializeWithCachedSizes(&out);
    }
    // A hazard that comes or goes changes the host, so it is content.
    if (request.has_preflight()) {
      out.WriteVarint64(request.preflight().ByteSizeLong());
      request.preflight().SerializeWithCachedSizes(&out);
    }
  }
  return bytes;
}

std::optional<DesiredState::ReportSeen> DesiredState::UnchangedReport(
    absl::string_view host_id, const std::string& content) {
  std::lock_guard<std::mutex> lock(reports_mu_);
  auto it = reports_.find(host_id);
  if (it == reports_.end()) return std::nullopt;
  if (it->second.content != content) return std::nullopt;
  ReportSeen seen;  // without the content: nobody needs a copy
  seen.cores = it->second.cores;
  seen.tagged_id = it->second.tagged_id;
  return seen;
}

void DesiredState::RememberReport(const std::string& host_id, ReportSeen seen) {
  std::lock_guard<std::mutex> lock(reports_mu_);
  reports_[host_id] = std::move(seen);
}

void DesiredState::ForgetReport(absl::string_view host_id) {
  std::lock_guard<std::mutex> lock(reports_mu_);
  reports_.erase(host_id);
}

std::optional<absl::Time> DesiredState::LastReport(absl::string_view host_id) const {
  std::optional<HostLiveness::Seen> seen = liveness_.Latest(host_id);
  if (!seen || seen->time == absl::InfinitePast()) return std::nullopt;
  return seen->time;
}

}  // namespace cosched::server
