// The write of the policy engine's decisions (ApplyLayout): the
// same path as TagVM (one transaction, a revision, the change log that
// agents' watches read, an audit record per VM), guarded by each VM's
// assignment revision so that a racing TagVM is never overwritten.
#include "server/state/layouts.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "google/protobuf/util/time_util.h"
#include "policy/trust_group.h"

namespace cosched::server {

void Layouts::ApplyLayout(const std::string& host_id, std::vector<LayoutChange> changes,
                          Done<int64_t> done) {
  if (changes.empty()) return done(absl::InvalidArgumentError("changes must not be empty"));
  auto audits = std::make_shared<std::vector<v1::AuditRecord>>();
  auto delta = std::make_shared<PlacementDelta>();
  auto revision = std::make_shared<int64_t>(0);
  store_.Write(
      [host_id, changes = std::move(changes), audits, delta,
       revision](store::Transaction& txn) -> absl::Status {
        // A store may run this again after losing a race: start afresh.
        audits->clear();
        *delta = PlacementDelta();
        // Only the replica that leads decides for the fleet.
        RETURN_IF_ERROR(txn.RequireLeadership());
        ASSIGN_OR_RETURN(*revision, txn.WriteRevision());
        const auto now = google::protobuf::util::TimeUtil::GetCurrentTime();
        for (const LayoutChange& change : changes) {
          ASSIGN_OR_RETURN(auto existing, txn.GetVm(change.vm_id));
          if (!existing || existing->assignment().revision() != change.expected_revision ||
              existing->host_id() != host_id) {
            return absl::AbortedError(absl::StrCat(
                "vm '", change.vm_id, "' changed since the engine planned host '", host_id,
                "' (assignment revision ", change.expected_revision, "): re-plan"));
          }
          ASSIGN_OR_RETURN(v1::TenantPolicy policy,
                           internal::PolicyOf(txn, existing->tenant_id()));
          if (existing->requested_isolation() != v1::ISOLATION_LEVEL_UNSPECIFIED ||
              !policy::IsAuto(policy)) {
            return absl::AbortedError(absl::StrCat(
                "vm '", change.vm_id, "' is no longer the engine's to decide: re-plan"));
          }
          std::vector<std::string> classes(existing->interference_classes().begin(),
                                           existing->interference_classes().end());
          ASSIGN_OR_RETURN(policy::TrustDecision decision,
                           policy::DecideTrustGroup(change.vm_id, change.isolation, classes,
                                                    policy));
          if (decision.trust_group != change.trust_group) {
            return absl::FailedPreconditionError(absl::StrCat(
                "vm '", change.vm_id, "' at level ", IsolationName(change.isolation),
                " is in group '", decision.trust_group, "', not '", change.trust_group, "'"));
          }
          v1::VM vm = *existing;
          v1::Assignment* a = vm.mutable_assignment();
          a->set_isolation(decision.isolation);
          a->set_trust_group(decision.trust_group);
          a->set_dedicated_cores(decision.dedicated_cores);
          a->clear_pin();
          if (!change.pin_cpus.empty()) {
            a->mutable_pin()->set_host_id(host_id);
            for (int cpu : change.pin_cpus) a->mutable_pin()->add_cpus(cpu);
          }
          a->set_revision(*revision);
          *vm.mutable_decision() = change.decision;
          vm.mutable_decision()->set_decided_by(v1::DECIDED_BY_ENGINE);
          *vm.mutable_decision()->mutable_decided_at() = now;
          *vm.mutable_update_time() = now;
          RETURN_IF_ERROR(txn.PutVm(vm));
          RETURN_IF_ERROR(internal::RecordAssignmentChange(txn, vm));
          v1::AuditRecord& logged = audits->emplace_back();
          RETURN_IF_ERROR(internal::Audit(txn, kEngineActor, "engine", "EngineDecision",
                                          vm.vm_id(), &*existing, &vm, *revision, &logged));
          ASSIGN_OR_RETURN(PlacedVm placed, PlacedVmOf(txn, vm));
          delta->vms.push_back(std::move(placed));
        }
        return absl::OkStatus();
      },
      [this, host_id, audits, delta, revision, done = std::move(done)](absl::Status status) {
        if (!status.ok()) return done(status);
        effects_.placement().Apply(*delta);
        for (const v1::AuditRecord& record : *audits) internal::LogAudit(record);
        done(*revision);
      });
}

void Layouts::SetBudgetFlag(const std::string& host_id, const std::string& reason,
                            Done<bool> done) {
  auto audit = std::make_shared<v1::AuditRecord>();
  auto written = std::make_shared<bool>(false);
  store_.Write(
      [host_id, reason, audit, written](store::Transaction& txn) -> absl::Status {
        *written = false;
        RETURN_IF_ERROR(txn.RequireLeadership());
        ASSIGN_OR_RETURN(auto host, txn.GetHost(host_id));
        if (!host) return absl::NotFoundError(absl::StrCat("host '", host_id, "' is not registered"));
        if (host->budget_unmet().empty() == reason.empty()) return absl::OkStatus();
        v1::Host flagged = *host;
        flagged.set_budget_unmet(reason);
        RETURN_IF_ERROR(txn.PutHost(flagged));
        *written = true;
        return internal::Audit(txn, kEngineActor, "engine", "EngineBudgetFlag", host_id,
                               &*host, &flagged, 0, audit.get());
      },
      [audit, written, done = std::move(done)](absl::Status status) {
        if (!status.ok()) return done(status);
        if (*written) internal::LogAudit(*audit);
        done(*written);
      });
}

}  // namespace cosched::server
