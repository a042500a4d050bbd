// Registration, the reads of hosts, and their lifecycle: drain, undrain,
// the off switch and removal.
#include "server/state/hosts.h"

#include <algorithm>
#include <map>
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
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "server/state/agent_input.h"
#include "server/state/host_enablement.h"
#include "server/state/vm_presence.h"

namespace cosched::server {
namespace {

using google::protobuf::util::TimeUtil;
using internal::kMaxDetailLength;
using internal::NextToken;
using internal::PageFrom;
using internal::ValidatePreflight;
using internal::ValidateTopology;
using store::ListAllVms;

// VMs named in a refusal, at most.
constexpr size_t kNamedVms = 5;
constexpr size_t kMaxVersionLength = 64;

// The checks of a Register request: INVALID_ARGUMENT naming the field.
absl::Status ValidateRegister(const v1::RegisterRequest& request) {
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
  return valid;
}

// Registers the host as `request` describes it, inside `txn`: its record,
// its enablement (into `response`) and the audit of what changed.
absl::Status WriteRegistration(store::Transaction& txn, const v1::RegisterRequest& request,
                               const Actor& actor, const EnforcePolicy& enforce,
                               v1::RegisterResponse& response, PlacementDelta& delta,
                               v1::AuditRecord& audit) {
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
  delta.hosts.push_back(host);
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
    RETURN_IF_ERROR(internal::Audit(txn, actor.who, actor.role, "AllowHazards", host.host_id(),
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
    return internal::Audit(txn, actor.who, actor.role, "ChangeHost", host.host_id(), &before, &after, 0,
                 &audit);
  }
  return internal::Audit(txn, actor.who, actor.role, "Register", host.host_id(), nullptr, &host, 0,
               &audit);
}

}  // namespace

void Hosts::RegisterHost(const v1::RegisterRequest& request, const Actor& actor,
                         Done<v1::RegisterResponse> done) {
  if (absl::Status valid = ValidateRegister(request); !valid.ok()) return done(valid);
  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  internal::WriteAndAnswer<v1::RegisterResponse>(
      &store_,
      [request, actor, audit, delta, enforce = settings_.enforce_policy()](
          store::Transaction& txn, v1::RegisterResponse& response) {
        *delta = PlacementDelta();
        *audit = v1::AuditRecord();
        return WriteRegistration(txn, request, actor, enforce, response, *delta, *audit);
      },
      effects_.ApplyingPlacement<v1::RegisterResponse>(
          delta,
          internal::LoggingAudit<v1::RegisterResponse>(
              audit, [this, host_id = request.host_id(),
                      done = std::move(done)](absl::StatusOr<v1::RegisterResponse> r) {
                // Its topology may have changed: the next Report is checked
                // and written whole.
                if (r.ok()) effects_.reports().Forget(host_id);
                if (r.ok()) r->set_revision(store_.CurrentRevision());
                done(std::move(r));
              })));
}

absl::StatusOr<v1::Host> Hosts::GetHost(const v1::GetHostRequest& request) {
  RETURN_IF_ERROR(ValidateId("host_id", request.host_id()));
  v1::Host result;
  RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto host, txn.GetHost(request.host_id()));
    if (!host) {
      return absl::NotFoundError(
          absl::StrCat("host '", request.host_id(), "' not found"));
    }
    result = std::move(*host);
    return absl::OkStatus();
  }));
  status_.AddLiveness(result);
  return result;
}

absl::StatusOr<v1::ListHostsResponse> Hosts::ListHosts(
                                                       const v1::ListHostsRequest& request) {
  ASSIGN_OR_RETURN(store::Page page,
                   PageFrom(request.page_size(), request.page_token()));
  ASSIGN_OR_RETURN(const LabelSelector selector,
                   ParseLabelSelector("selector", request.selector()));
  v1::ListHostsResponse response;
  RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto hosts, txn.ListHosts(page));
    ASSIGN_OR_RETURN(
        auto token,
        NextToken(hosts, page, [](const v1::Host& h) { return h.host_id(); },
                  [&](const store::Page& p) { return txn.ListHosts(p); }));
    response.set_next_page_token(token);
    // A page holds the matching hosts of one page of the store's: fewer
    // than page_size, or none, before the last.
    for (auto& h : hosts) {
      if (!Matches(selector, h.labels())) continue;
      status_.AddLiveness(h);
      *response.add_hosts() = std::move(h);
    }
    return absl::OkStatus();
  }));
  return response;
}

void Hosts::SetHostDraining(const v1::DrainHostRequest& request, bool draining,
                            const Actor& actor, Done<v1::Host> done) {
  absl::Status valid = ValidateId("host_id", request.host_id());
  if (!valid.ok()) return done(valid);
  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  auto result = std::make_shared<v1::Host>();
  store_.Write(
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
        effects_.placement().Apply(*delta);
        internal::LogAudit(*audit);
        status_.AddLiveness(*result);
        done(*result);
      });
}

void Hosts::SetHostEnforcement(const v1::SetHostEnforcementRequest& request,
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
    absl::Status read = store_.Read([&](store::Transaction& txn) -> absl::Status {
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

void Hosts::SwitchEnforcement(std::shared_ptr<EnforcementSwitch> run, size_t from) {
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
  store_.Write(
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
        effects_.placement().Apply(*delta);
        for (const v1::AuditRecord& audit : *audits) internal::LogAudit(audit);
        for (v1::Host& host : *switched) {
          status_.AddLiveness(host);
          *run->response.add_hosts() = std::move(host);
        }
        if (to < run->host_ids.size()) return SwitchEnforcement(run, to);
        run->response.set_fleet_off(rollout_.FleetOff());
        run->done(std::move(run->response));
      });
}

void Hosts::RemoveHost(const v1::RemoveHostRequest& request, const Actor& actor,
                       Done<v1::RemoveHostResponse> done) {
  absl::Status valid = ValidateId("host_id", request.host_id());
  if (!valid.ok()) return done(valid);
  if (status_.IsConnected(request.host_id())) {
    return done(absl::FailedPreconditionError(absl::StrCat(
        "host '", request.host_id(),
        "' has an agent connected; stop its cs-agent before removing it")));
  }
  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  auto result = std::make_shared<v1::RemoveHostResponse>();
  store_.Write(
      [this, host_id = request.host_id(), actor, audit, delta,
       result](store::Transaction& txn) -> absl::Status {
        *delta = PlacementDelta();
        ASSIGN_OR_RETURN(auto host, txn.GetHost(host_id));
        if (!host) return absl::NotFoundError(absl::StrCat("host '", host_id, "' not found"));
        std::map<std::string, v1::VM> vms;
        for (const store::VmFilter& filter :
             {store::VmFilter::OwnedBy(host_id), store::VmFilter::ReportedOn(host_id)}) {
          ASSIGN_OR_RETURN(auto listed, ListAllVms(txn, filter));
          for (v1::VM& vm : listed) vms.emplace(vm.vm_id(), std::move(vm));
        }
        // A host that stopped reporting long ago reports nothing now: what
        // it last said is history, and removing it is how an operator
        // retires a dead machine.
        if (status_.IsLive(*host) && (host->vm_count() > 0 || !vms.empty())) {
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
              absl::FormatDuration(settings_.host_stale_after())));
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
        effects_.placement().Apply(*delta);
        effects_.reports().Remove(host_id);
        status_.liveness().Forget(host_id);
        internal::LogAudit(*audit);
        done(*result);
      });
}

}  // namespace cosched::server
