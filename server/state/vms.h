// The VMs aggregate of the desired state: TagVM, UntagVM and the reads of
// VMs (tagging from domain metadata, presence and ownership are written by
// Reports: server/state/reports.h).
#ifndef COSCHED_SERVER_STATE_VMS_H_
#define COSCHED_SERVER_STATE_VMS_H_

#include <functional>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosched/v1/control_plane.pb.h"
#include "server/state/commit_effects.h"
#include "server/state/host_status.h"
#include "server/state/state_settings.h"
#include "server/state/write_support.h"
#include "store/store.h"

namespace cosched::server {

// Thread-safe (the Store serialises writes). Every method validates its
// input first: INVALID_ARGUMENT names the field and the rule, and nothing is
// written. Every change is audited in its own transaction.
class Vms {
 public:
  Vms(store::Store& store, const CommitEffects& effects, const HostStatus& hosts,
      const StateSettings& settings)
      : store_(store), effects_(effects), hosts_(hosts), settings_(settings) {}

  // Idempotent upsert. FAILED_PRECONDITION when the tenant's policy forbids
  // the level or the VM is tagged for another tenant.
  void TagVm(const v1::TagVMRequest& request, const Actor& actor,
             Done<v1::TagVMResponse> done);
  // NOT_FOUND when the VM is not tagged.
  void UntagVm(const v1::UntagVMRequest& request, const Actor& actor,
               Done<v1::UntagVMResponse> done);
  // NOT_FOUND when the VM is not tagged; for a VM that hosts report, the
  // message says why its domain metadata did not tag it (refused, naming
  // the field, or tag_from_metadata off). The VM carries its enforcement
  // as last reported.
  // Also takes a name a host runs a VM tagged under its UUID by, and
  // answers that VM (FAILED_PRECONDITION naming each when two are).
  absl::StatusOr<v1::VM> GetVm(const v1::GetVMRequest& request);
  absl::StatusOr<v1::ListVMsResponse> ListVms(const v1::ListVMsRequest& request);

 private:
  // ListVms by domain_name.
  absl::StatusOr<v1::ListVMsResponse> ListVmsNamed(
      const v1::ListVMsRequest& request,
      const std::function<std::optional<absl::Time>(absl::string_view)>& last_report);

  store::Store& store_;
  const CommitEffects& effects_;
  const HostStatus& hosts_;
  const StateSettings& settings_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_VMS_H_
