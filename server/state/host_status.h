// Each host as it is now, beside what is stored of it: whether its agent is
// connected (to this csd or another replica), when it last reported, and
// whether Place may choose it.
#ifndef COSCHED_SERVER_STATE_HOST_STATUS_H_
#define COSCHED_SERVER_STATE_HOST_STATUS_H_

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cosched/v1/control_plane.pb.h"
#include "server/state/host_liveness.h"
#include "server/state/placement_view.h"
#include "server/state/rollout_view.h"
#include "server/state/state_settings.h"

namespace cosched::server {

// Thread-safe once set up (the setters run before serving).
class HostStatus {
 public:
  HostStatus(const StateSettings& settings, const RolloutView& rollout,
             const PlacementView& placement)
      : settings_(settings), rollout_(rollout), placement_(placement) {}

  // Each host's last Report and stream, to this csd or (replicas on etcd)
  // to another replica, by its seen record (server/state/host_liveness.h).
  HostLiveness& liveness() { return liveness_; }
  const HostLiveness& liveness() const { return liveness_; }
  // This csd's name among the replicas on etcd. Set before serving.
  void set_replica_name(std::string name) { replica_name_ = std::move(name); }
  // Whether a host's agent holds a watch stream on this csd now (csd's
  // fan-out knows). Set before serving; unset: none does.
  void set_connected_check(std::function<bool(absl::string_view)> check) {
    connected_ = std::move(check);
  }

  // How long since the host's agent last registered or reported (to any
  // replica, or as stored), whether or not it holds a stream: a stuck agent
  // keeps its stream and reports nothing.
  absl::Duration SilentFor(const v1::Host& host) const;
  // Its agent holds a stream on this csd or, by its last seen record, on
  // another replica.
  bool IsConnected(absl::string_view host_id) const;
  // The replica that holds its agent's stream: this csd's name or
  // another's; empty when none does.
  std::string ConnectedReplica(absl::string_view host_id) const;
  // ServedHost of TakeForwardedStats: `host_id` is registered and, by what
  // this csd knows, `replica` took its latest Report or holds its stream.
  bool ServedBy(const std::string& host_id, const std::string& replica) const;
  // When the host's agent last reported to any replica (nullopt: not since
  // csd started, as far as it knows).
  std::optional<absl::Time> LastReport(absl::string_view host_id) const;
  // Connected, or seen within host_stale_after.
  bool IsLive(const v1::Host& host) const;
  // Why Place would not choose `host` now: empty when it would.
  std::string UnplaceableReason(const v1::Host& host, bool needs_isolation) const;
  // The host as it is now: its last report time, whether it is placeable
  // and its enablement.
  void AddLiveness(v1::Host& host) const;

 private:
  // The later of its stored last_seen_time and its last Report to any
  // replica.
  absl::Time LastSeen(const v1::Host& host) const;

  const StateSettings& settings_;
  const RolloutView& rollout_;
  const PlacementView& placement_;
  HostLiveness liveness_;
  std::string replica_name_;
  std::function<bool(absl::string_view)> connected_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_HOST_STATUS_H_
