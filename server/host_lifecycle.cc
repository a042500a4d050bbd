// DesiredState's host lifecycle: drain, undrain and remove a host, and the
// rules of which hosts Place may choose (live, not draining, able to
// isolate). Kept apart from desired_state.cc, which holds the VM writes.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/labels.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "google/protobuf/util/time_util.h"
#include "server/desired_state.h"
#include "server/desired_state_internal.h"
#include "server/vm_presence.h"

namespace cosched::server {
namespace {

using google::protobuf::util::TimeUtil;
using internal::AllVms;

// VMs named in a refusal, at most.
constexpr size_t kNamedVms = 5;

absl::Time TimeOf(const google::protobuf::Timestamp& t) {
  return absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t));
}

}  // namespace

absl::Time DesiredState::LastSeen(const v1::Host& host) const {
  absl::Time seen = host.has_last_seen_time() ? TimeOf(host.last_seen_time())
                                              : absl::InfinitePast();
  if (std::optional<absl::Time> reported = LastReport(host.host_id())) {
    seen = std::max(seen, *reported);
  }
  return seen;
}

absl::Duration DesiredState::SilentFor(const v1::Host& host) const {
  return std::max(absl::ZeroDuration(), absl::Now() - LastSeen(host));
}

bool DesiredState::IsConnected(absl::string_view host_id) const {
  return (connected_ && connected_(host_id)) ||
         liveness_.ConnectedElsewhere(host_id, absl::Now() - host_stale_after());
}

std::string DesiredState::ConnectedReplica(absl::string_view host_id) const {
  if (connected_ && connected_(host_id)) return replica_name_;
  return liveness_.ConnectedReplica(host_id, absl::Now() - host_stale_after());
}

bool DesiredState::ServedBy(const std::string& host_id, const std::string& replica) const {
  if (replica.empty()) return false;
  std::optional<HostLiveness::Seen> seen = liveness_.Latest(host_id);
  if (!seen || (seen->replica != replica && seen->connected_to != replica)) return false;
  return placement_.HostRecord(host_id).has_value();
}

bool DesiredState::IsLive(const v1::Host& host) const {
  if (IsConnected(host.host_id())) return true;
  return absl::Now() - LastSeen(host) <= host_stale_after();
}

std::string DesiredState::UnplaceableReason(const v1::Host& host,
                                            bool needs_isolation) const {
  if (host.draining()) return "draining";
  // A host the operator waived counts as isolating without cookies.
  const v1::HostEnablement enablement =
      EnablementOf(host.capabilities().preflight(), enforce_policy(), rollout_.VerdictFor(host));
  if (enablement.state() == v1::HostEnablement::STATE_WAIVED) {
    needs_isolation = false;
  }
  if (needs_isolation && enablement.state() == v1::HostEnablement::STATE_OFF) {
    return "enforcement off (csctl hosts enforce on)";
  }
  // A staged rollout has not enabled it: its agent makes no cookies.
  if (needs_isolation && enablement.state() == v1::HostEnablement::STATE_NOT_ENABLED) {
    return "not enabled (staged rollout)";
  }
  // Its agent creates no cookies while a hazard lasts.
  if (needs_isolation && host.capabilities().preflight().hazards_size() > 0) {
    return absl::StrCat("unsafe (", host.capabilities().preflight().hazards(0).name(), ")");
  }
  // Where siblings exist, only cookies keep strangers off them.
  if (needs_isolation && host.capabilities().smt_active() &&
      host.capabilities().core_sched() != v1::CORE_SCHED_SUPPORT_SUPPORTED) {
    return "unable to isolate (SMT on, core scheduling not usable)";
  }
  if (!IsLive(host)) {
    return absl::StrCat("not live (no agent connected, no report in ",
                        absl::FormatDuration(host_stale_after()), ")");
  }
  return "";
}

void DesiredState::AddLiveness(v1::Host& host) const {
  *host.mutable_last_seen_time() =
      TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(LastSeen(host)));
  if (LastSeen(host) == absl::InfinitePast()) host.clear_last_seen_time();
  host.set_unplaceable_reason(UnplaceableReason(host, /*needs_isolation=*/true));
  *host.mutable_enablement() =
      EnablementOf(host.capabilities().preflight(), enforce_policy(), rollout_.VerdictFor(host));
}

void DesiredState::SetHostDraining(const v1::DrainHostRequest& request, bool draining,
                                   const Actor& actor, Done<v1::Host> done) {
  absl::Status valid = ValidateId("host_id", request.host_id());
  if (!valid.ok()) return done(valid);
  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  auto result = std::make_shared<v1::Host>();
  store_->Write(
      [host_id = request.host_id(), draining, actor, audit, delta,
       result](store::Transaction& txn) -> absl::Status {
        *delta = PlacementDelta();
        ASSIGN_OR_RETURN(auto host, txn.GetHost(host_id));
        if (!host) return absl::NotFoundError(absl::StrCat("host '", host_id, "' not found"));
        *result = *host;
        if (host->draining() == draining) return absl::OkStatus();  // idempotent
        v1::Host updated = *host;
        updated.set_draining(draining);
        RETURN_IF_ERROR(txn.PutHost(updated));
        delta->hosts.push_back(updated);
        *result = updated;
        return internal::Audit(txn, actor.who, actor.role, draining ? "DrainHost" : "UndrainHost", host_id,
                               &*host, &updated, 0, audit.get());
      },
      [this, audit, delta, result, done = std::move(done)](absl::Status status) {
        if (!status.ok()) return done(status);
        placement_.Apply(*delta);
        internal::LogAudit(*audit);
        AddLiveness(*result);
        done(*result);
      });
}

void DesiredState::SetHostEnforcement(const v1::SetHostEnforcementRequest& request,
                                      const Actor& actor,
                                      Done<v1::SetHostEnforcementResponse> done) {
  absl::Status valid = internal::ValidateSwitchReason(request.reason());
  std::optional<LabelSelector> selector;
  if (valid.ok() && !request.host_id().empty()) {
    valid = ValidateId("host_id", request.host_id());
  } else if (valid.ok()) {
    absl::StatusOr<LabelSelector> parsed = ParseLabelSelector("selector", request.selector());
    if (parsed.ok()) {
      selector = std::move(*parsed);
    } else {
      valid = parsed.status();
    }
  }
  if (!valid.ok()) return done(valid);
  auto run = std::make_shared<EnforcementSwitch>();
  run->request = request;
  run->actor = actor;
  run->done = std::move(done);
  if (!selector) {
    run->host_ids.push_back(request.host_id());
  } else {
    absl::Status read = store_->Read([&](store::Transaction& txn) -> absl::Status {
      run->host_ids.clear();
      store::Page page;
      page.limit = 1000;
      while (true) {
        ASSIGN_OR_RETURN(std::vector<v1::Host> listed, txn.ListHosts(page));
        for (const v1::Host& h : listed) {
          if (Matches(*selector, h.labels())) run->host_ids.push_back(h.host_id());
        }
        if (listed.size() < static_cast<size_t>(page.limit)) break;
        page.after = listed.back().host_id();
      }
      return absl::OkStatus();
    });
    if (!read.ok()) return run->done(read);
    if (run->host_ids.empty()) {
      return run->done(absl::NotFoundError(
          absl::StrCat("selector '", request.selector(), "' matches no host")));
    }
  }
  SwitchEnforcement(std::move(run), 0);
}

void DesiredState::SwitchEnforcement(std::shared_ptr<EnforcementSwitch> run, size_t from) {
  // A few hosts a write: the store never splits a write, and on etcd one
  // Txn takes at most max_txn_ops operations (128 by default), a host and
  // its audit record several each; a selector over a whole zone must not
  // fail for its size (issue #33).
  constexpr size_t kHostsPerWrite = 16;
  const size_t to = std::min(run->host_ids.size(), from + kHostsPerWrite);
  auto audits = std::make_shared<std::vector<v1::AuditRecord>>();
  auto delta = std::make_shared<PlacementDelta>();
  auto switched = std::make_shared<std::vector<v1::Host>>();
  const bool one_host = !run->request.host_id().empty();
  store_->Write(
      [run, from, to, one_host, audits, delta, switched](store::Transaction& txn) -> absl::Status {
        *delta = PlacementDelta();
        audits->clear();
        switched->clear();
        for (size_t i = from; i < to; ++i) {
          const std::string& host_id = run->host_ids[i];
          ASSIGN_OR_RETURN(std::optional<v1::Host> host, txn.GetHost(host_id));
          if (!host) {
            if (one_host) return absl::NotFoundError(absl::StrCat("host '", host_id, "' not found"));
            continue;  // removed since the selector was read
          }
          if (host->enforcement_off() == run->request.off()) continue;  // idempotent
          v1::Host updated = *host;
          updated.set_enforcement_off(run->request.off());
          RETURN_IF_ERROR(txn.PutHost(updated));
          delta->hosts.push_back(updated);
          RETURN_IF_ERROR(internal::Audit(txn, run->actor.who, run->actor.role,
                                          "SetHostEnforcement", host_id, &*host, &updated, 0,
                                          &audits->emplace_back(), run->request.reason()));
          switched->push_back(std::move(updated));
        }
        return absl::OkStatus();
      },
      [this, run, from, to, audits, delta, switched](absl::Status status) {
        if (!status.ok()) {
          if (from == 0) return run->done(status);
          return run->done(absl::Status(
              status.code(), absl::StrCat(status.message(), "; ", run->response.hosts_size(),
                                          " of the ", run->host_ids.size(),
                                          " hosts selected were switched before (each audited): "
                                          "run the command again to finish")));
        }
        placement_.Apply(*delta);
        for (const v1::AuditRecord& audit : *audits) internal::LogAudit(audit);
        for (v1::Host& host : *switched) {
          AddLiveness(host);
          *run->response.add_hosts() = std::move(host);
        }
        if (to < run->host_ids.size()) return SwitchEnforcement(run, to);
        run->response.set_fleet_off(rollout_.FleetOff());
        run->done(std::move(run->response));
      });
}

void DesiredState::RemoveHost(const v1::RemoveHostRequest& request, const Actor& actor,
                              Done<v1::RemoveHostResponse> done) {
  absl::Status valid = ValidateId("host_id", request.host_id());
  if (!valid.ok()) return done(valid);
  if (IsConnected(request.host_id())) {
    return done(absl::FailedPreconditionError(absl::StrCat(
        "host '", request.host_id(),
        "' has an agent connected; stop its cs-agent before removing it")));
  }
  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  auto result = std::make_shared<v1::RemoveHostResponse>();
  store_->Write(
      [this, host_id = request.host_id(), actor, audit, delta,
       result](store::Transaction& txn) -> absl::Status {
        *delta = PlacementDelta();
        ASSIGN_OR_RETURN(auto host, txn.GetHost(host_id));
        if (!host) return absl::NotFoundError(absl::StrCat("host '", host_id, "' not found"));
        std::map<std::string, v1::VM> vms;
        for (const store::VmFilter& filter :
             {store::VmFilter::OwnedBy(host_id), store::VmFilter::ReportedOn(host_id)}) {
          ASSIGN_OR_RETURN(auto listed, AllVms(txn, filter));
          for (v1::VM& vm : listed) vms.emplace(vm.vm_id(), std::move(vm));
        }
        // A host that stopped reporting long ago reports nothing now: what
        // it last said is history, and removing it is how an operator
        // retires a dead machine.
        if (IsLive(*host) && (host->vm_count() > 0 || !vms.empty())) {
          std::vector<std::string> named;
          for (const auto& [id, vm] : vms) {
            if (named.size() == kNamedVms) break;
            named.push_back(id);
          }
          return absl::FailedPreconditionError(absl::StrCat(
              "host '", host_id, "' reported ", host->vm_count(), " VM(s) in its last report",
              named.empty() ? "" : absl::StrCat(" (tagged: ", absl::StrJoin(named, ", "),
                                                vms.size() > named.size() ? ", ..." : "", ")"),
              "; move or stop them, or wait until it has not reported for ",
              absl::FormatDuration(host_stale_after())));
        }
        ASSIGN_OR_RETURN(int64_t revision, txn.WriteRevision());
        const auto now = TimeUtil::GetCurrentTime();
        for (auto& [id, vm] : vms) {
          v1::VM updated = vm;
          SetPresence(updated, host_id, std::nullopt, now);
          if (updated.host_id() == host_id) updated.clear_host_id();
          ResolveOwner(updated);
          RETURN_IF_ERROR(internal::RecordReceiverChanges(txn, &vm, &updated));
          RETURN_IF_ERROR(txn.PutVm(updated));
          ASSIGN_OR_RETURN(PlacedVm placed, PlacedVmOf(txn, updated));
          delta->vms.push_back(std::move(placed));
        }
        RETURN_IF_ERROR(txn.DeleteHost(host_id));
        delta->removed_hosts.push_back(host_id);
        result->set_revision(revision);
        return internal::Audit(txn, actor.who, actor.role, "RemoveHost", host_id, &*host, nullptr, revision,
                               audit.get());
      },
      [this, host_id = request.host_id(), audit, delta, result,
       done = std::move(done)](absl::Status status) {
        if (!status.ok()) return done(status);
        placement_.Apply(*delta);
        ForgetReport(host_id);
        liveness_.Forget(host_id);
        internal::LogAudit(*audit);
        done(*result);
      });
}

}  // namespace cosched::server
