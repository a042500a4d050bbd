// DesiredState's write of an agent's Report: the VMs the host runs now
// (presence, ownership, tags from domain metadata), its preflight and
// enablement, and its stats windows; and the memory of each host's last
// Report, so that an unchanged one writes nothing.
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
#include "common/log_every.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "glog/logging.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "server/agent_input.h"
#include "server/desired_state.h"
#include "server/desired_state_internal.h"
#include "server/metadata_tag.h"
#include "server/vm_presence.h"

namespace cosched::server {
namespace {

using internal::AllVms;
using internal::DropUnlistedStats;
using internal::RecordReceiverChanges;
using internal::ValidateDomainMetadata;
using internal::ValidateEnforcement;
using internal::ValidateOptionalId;
using internal::ValidatePreflight;
using internal::ValidateStatsCores;
using internal::WriteAndAnswer;
using google::protobuf::util::TimeUtil;

// A Report names at most this many VMs.
constexpr int kMaxReportedVms = 10000;

}  // namespace

void DesiredState::ApplyReport(const v1::ReportRequest& request,
                               Done<v1::ReportResponse> done) {
  absl::Status valid = ValidateId("host_id", request.host_id());
  // Before anything else is read of it: a Report past the host's rate
  // costs csd no more than this.
  if (valid.ok()) valid = report_rate_.Admit(request.host_id());
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
  if (valid.ok()) valid = internal::ValidateImpostors(request);
  if (!valid.ok()) return done(valid);
  // Every answer says whether the host should set cookies, so a change of
  // the setting or of the host's vulnerabilities reaches a running agent.
  liveness_.Note(request, absl::Now());
  std::optional<v1::Host> registered = placement_.HostRecord(request.host_id());
  done = [enablement = EnablementOf(request.preflight(), enforce_policy(),
                                    registered ? rollout_.VerdictFor(*registered) : RolloutVerdict{}),
          done = std::move(done)](absl::StatusOr<v1::ReportResponse> r) mutable {
    if (r.ok()) *r->mutable_enablement() = enablement;
    done(std::move(r));
  };

  // Shared by the write and its completion: stats can be large to copy.
  // Stats of VMs the Report does not list are dropped here, before the
  // store, the stats kept in memory or the leader see them.
  auto own = std::make_shared<v1::ReportRequest>(request);
  auto dropped_ids = std::make_shared<std::vector<std::string>>();
  const int64_t dropped = DropUnlistedStats(*own, dropped_ids.get());
  if (dropped > 0) {
    COSCHED_LOG_EVERY_T(WARNING, 60) << "host " << request.host_id() << ": dropped " << dropped
                             << " stats entries of VMs its Report does not list, e.g. "
                             << (*dropped_ids)[0] << " (logged once a minute)";
    done = [dropped, dropped_ids, done = std::move(done)](
               absl::StatusOr<v1::ReportResponse> r) mutable {
      if (r.ok()) {
        r->set_dropped_vm_stats(dropped);
        for (std::string& id : *dropped_ids) r->add_dropped_vm_ids(std::move(id));
      }
      done(std::move(r));
    };
  }
  std::shared_ptr<const v1::ReportRequest> report = std::move(own);
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
       tag_from_metadata = tag_from_metadata_.load()](store::Transaction& txn,
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
          // Metadata counts from the owner only, and what every host that
          // reports the VM says must agree with it (issue #32).
          if (tag_from_metadata && updated.conflict().empty() &&
              !updated.metadata_host().empty() &&
              (updated.presence_size() > 1 || updated.host_id() != updated.metadata_host())) {
            ASSIGN_OR_RETURN(std::string conflict,
                             MetadataConflict(txn, updated, host_id,
                                              it == seen.end() ? nullptr : it->second,
                                              from_metadata->hosts));
            updated.set_conflict(std::move(conflict));
          }
          if (!google::protobuf::util::MessageDifferencer::Equals(updated, vm)) {
            RETURN_IF_ERROR(RecordReceiverChanges(txn, &vm, &updated));
            RETURN_IF_ERROR(txn.PutVm(updated));
            // A first placement or a VM gone everywhere is no migration.
            if (updated.host_id() != vm.host_id() && !vm.host_id().empty() &&
                !updated.host_id().empty()) {
              moves->push_back(absl::StrCat(vm_id, " from '", vm.host_id(), "' to '",
                                            updated.host_id(), "'"));
              v1::AuditRecord logged;
              RETURN_IF_ERROR(internal::Audit(txn, host_id, "host", "ChangeOwner", vm_id, &vm,
                                              &updated, 0, &logged));
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
        // What the host says of processes posing as VMs: shown, never acted on.
        host->mutable_impostors()->CopyFrom(request.impostors());
        host->set_impostor_count(request.impostor_count());
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
    // A hazard that comes or goes changes the host, so it is content; so
    // does a process posing as a VM.
    if (request.has_preflight()) {
      out.WriteVarint64(request.preflight().ByteSizeLong());
      request.preflight().SerializeWithCachedSizes(&out);
    }
    out.WriteVarint32(static_cast<uint32_t>(request.impostor_count()));
    for (const v1::ImpostorProcess& impostor : request.impostors()) {
      out.WriteVarint64(impostor.ByteSizeLong());
      impostor.SerializeWithCachedSizes(&out);
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
