// The hosts aggregate of the desired state: registration, the reads of
// hosts, and their lifecycle (drain, the off switch, removal). A host's
// Reports are server/state/reports.h's; its liveness host_status.h's.
#ifndef COSCHED_SERVER_STATE_HOSTS_H_
#define COSCHED_SERVER_STATE_HOSTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cosched/v1/control_plane.pb.h"
#include "server/state/commit_effects.h"
#include "server/state/host_status.h"
#include "server/state/rollout_view.h"
#include "server/state/state_settings.h"
#include "server/state/write_support.h"
#include "store/store.h"

namespace cosched::server {

// Thread-safe; validates, writes and audits as Vms does.
class Hosts {
 public:
  Hosts(store::Store& store, const CommitEffects& effects, HostStatus& status,
        const StateSettings& settings, const RolloutView& rollout)
      : store_(store), effects_(effects), status_(status), settings_(settings),
        rollout_(rollout) {}

  // Audited when the host is new or what it says of itself (topology,
  // labels, observing) changed.
  void RegisterHost(const v1::RegisterRequest& request, const Actor& actor,
                    Done<v1::RegisterResponse> done);
  absl::StatusOr<v1::Host> GetHost(const v1::GetHostRequest& request);
  absl::StatusOr<v1::ListHostsResponse> ListHosts(const v1::ListHostsRequest& request);
  // Host lifecycle (ControlPlane.DrainHost, UndrainHost, RemoveHost).
  // NOT_FOUND for an unknown host. Removal is FAILED_PRECONDITION while the
  // host's agent is connected or VMs are reported there.
  void SetHostDraining(const v1::DrainHostRequest& request, bool draining, const Actor& actor,
                       Done<v1::Host> done);
  // The off switch for one host or the hosts a selector matches now
  // (SetHostEnforcement with host_id or selector; `all` is RolloutControl's
  // fleet setting). Each host that changes is written and audited with the
  // reason, a few hosts a write (so that a selector of any size fits
  // etcd's Txn limit); a write that fails ends the call with its error and
  // how many hosts were switched before it. NOT_FOUND for an unknown host
  // or a selector matching none.
  void SetHostEnforcement(const v1::SetHostEnforcementRequest& request, const Actor& actor,
                          Done<v1::SetHostEnforcementResponse> done);
  void RemoveHost(const v1::RemoveHostRequest& request, const Actor& actor,
                  Done<v1::RemoveHostResponse> done);

 private:
  // SetHostEnforcement's run over its hosts, a write at a time.
  struct EnforcementSwitch {
    v1::SetHostEnforcementRequest request;
    Actor actor;
    Done<v1::SetHostEnforcementResponse> done;
    std::vector<std::string> host_ids;
    v1::SetHostEnforcementResponse response;  // the hosts switched so far
  };
  // Switches run->host_ids from `from` on; answers run->done at the end.
  void SwitchEnforcement(std::shared_ptr<EnforcementSwitch> run, size_t from);

  store::Store& store_;
  const CommitEffects& effects_;
  HostStatus& status_;
  const StateSettings& settings_;
  const RolloutView& rollout_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_HOSTS_H_
