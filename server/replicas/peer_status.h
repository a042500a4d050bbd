// GetStatus across the csd replicas sharing an etcd store (csctl status):
// the replica asked answers for itself and gathers each other replica's
// own answer (GetStatus with local_only) within store.etcd.peer_timeout_ms.
// A replica that does not answer is listed with why, never left out.
#ifndef COSCHED_SERVER_REPLICAS_PEER_STATUS_H_
#define COSCHED_SERVER_REPLICAS_PEER_STATUS_H_

#include <functional>

#include "absl/time/time.h"
#include "cosched/v1/control_plane.pb.h"
#include "server/replicas/peer_directory.h"

namespace cosched::server {

// Thread-safe.
class PeerStatus {
 public:
  // `peers` outlives it.
  PeerStatus(PeerDirectory& peers, absl::Duration timeout) : peers_(peers), timeout_(timeout) {}

  // Calls `done` once with `self` first and then every other registered
  // replica by name, as it answered or, with `unreachable` set, as its
  // registration names it; on a gRPC thread or, with nobody to ask, on
  // this one.
  void Gather(v1::ReplicaStatus self, std::function<void(v1::GetStatusResponse)> done);

 private:
  PeerDirectory& peers_;
  const absl::Duration timeout_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_REPLICAS_PEER_STATUS_H_
