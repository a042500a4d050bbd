#include "server/fanout/watch_reads.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "server/state/vm_presence.h"

namespace cosched::server {

absl::Status WatchReads::ValidateWatch(
                                       const v1::WatchAssignmentsRequest& request) {
  RETURN_IF_ERROR(ValidateId("host_id", request.host_id()));
  if (request.resume_revision() < 0) {
    return absl::InvalidArgumentError("resume_revision must not be negative");
  }
  return store_.Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto host, txn.GetHost(request.host_id()));
    if (!host) {
      return absl::FailedPreconditionError(absl::StrCat(
          "host '", request.host_id(), "' is not registered; call Register first"));
    }
    return absl::OkStatus();
  });
}

namespace {

// The host's assignments as a snapshot, read in `txn`: the VMs it owns, and
// those it reports that another host owns (a live migration's other side).
absl::Status ReadSnapshot(store::Transaction& txn, absl::string_view host_id,
                          v1::WatchAssignmentsResponse& message) {
  message.Clear();
  message.set_kind(v1::WatchAssignmentsResponse::KIND_SNAPSHOT);
  std::set<std::string> sent;
  for (const store::VmFilter& filter : {store::VmFilter::OwnedBy(std::string(host_id)),
                                        store::VmFilter::ReportedOn(std::string(host_id))}) {
    ASSIGN_OR_RETURN(auto vms, store::ListAllVms(txn, filter));
    for (auto& vm : vms) {
      if (!ReceivesAssignment(vm, host_id) || !sent.insert(vm.vm_id()).second) continue;
      *message.add_assignments() = vm.assignment();
    }
  }
  ASSIGN_OR_RETURN(const int64_t revision, txn.ReadRevision());
  message.set_revision(revision);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::WatchAssignmentsResponse> WatchReads::ReadWatchMessage(
    absl::string_view host_id, int64_t revision) {
  v1::WatchAssignmentsResponse message;
  RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
    if (revision <= 0) return ReadSnapshot(txn, host_id, message);
    ASSIGN_OR_RETURN(auto changes, txn.ChangesSince(host_id, revision));
    if (!changes.complete) return ReadSnapshot(txn, host_id, message);
    message.Clear();
    message.set_kind(v1::WatchAssignmentsResponse::KIND_DELTA);
    // Complete only when `revision` is at most the read's, so the stream
    // never goes back.
    message.set_revision(changes.revision);
    for (const std::string& vm_id : changes.vm_ids) {
      ASSIGN_OR_RETURN(auto vm, txn.GetVm(vm_id));
      if (vm && ReceivesAssignment(*vm, host_id)) {
        *message.add_assignments() = vm->assignment();
      } else {
        message.add_removed_vm_ids(vm_id);
      }
    }
    return absl::OkStatus();
  }));
  return message;
}

absl::StatusOr<v1::WatchAssignmentsResponse> WatchReads::FirstWatchMessage(
    absl::string_view host_id, int64_t resume_revision) {
  // Nothing changed since a resume: the empty delta tells the agent it is
  // current up to the read's revision.
  return ReadWatchMessage(host_id, resume_revision);
}

absl::StatusOr<std::optional<v1::WatchAssignmentsResponse>>
WatchReads::WatchUpdate(absl::string_view host_id, int64_t revision) {
  ASSIGN_OR_RETURN(v1::WatchAssignmentsResponse message, ReadWatchMessage(host_id, revision));
  if (message.kind() == v1::WatchAssignmentsResponse::KIND_DELTA &&
      message.assignments().empty() && message.removed_vm_ids().empty()) {
    return std::nullopt;
  }
  return message;
}

}  // namespace cosched::server
