// GetStats across the csd replicas sharing an etcd store (issue #16, part
// 4). Stats are in memory on the replica the reporting agent is connected
// to (server/stats/stats_aggregator.h), so a fleet-wide answer needs every
// replica's: the replica asked gathers the others' answers (GetStats with
// local_only) within store.etcd.peer_timeout_ms and adds them to its own.
// A replica that does not answer, refuses, or registered no address is
// named in the answer, which is then partial: never a silent undercount.
#ifndef COSCHED_SERVER_REPLICAS_PEER_STATS_H_
#define COSCHED_SERVER_REPLICAS_PEER_STATS_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosched/store/etcd_records.pb.h"
#include "cosched/v1/config.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "server/replicas/peer_directory.h"
#include "server/stats/stats_source.h"

namespace cosched::server {

// One replica's part of a gathered answer.
struct PeerStatsAnswer {
  std::string replica;
  // NOT_FOUND: none of its agents reported the subject, not a gap.
  absl::StatusOr<v1::GetStatsResponse> stats;
};

// The answer to a gathered GetStats: this replica's (`local`, from
// StatsQueries::QueryStats) plus each peer's; a peer's error other than
// NOT_FOUND becomes a gap, as do `gaps` found before asking. NOT_FOUND,
// naming `subject` and the gaps, when no replica has a window.
absl::StatusOr<v1::GetStatsResponse> CombineStatsAnswers(
    v1::GetStatsResponse local, const std::vector<PeerStatsAnswer>& peers,
    std::vector<v1::StatsReplicaGap> gaps, const std::string& not_found);

// Thread-safe.
class PeerStats {
 public:
  using Done =
      std::function<void(std::vector<PeerStatsAnswer> answers, std::vector<v1::StatsReplicaGap>)>;

  // Asks the replicas `peers` lists but itself (options().self); each has
  // `timeout` to answer (store.etcd.peer_timeout_ms). `peers` outlives it.
  PeerStats(PeerDirectory& peers, absl::Duration timeout) : peers_(peers), timeout_(timeout) {}

  // Asks every other registered replica for `request` (local_only set) and
  // calls `done` once with their answers and the replicas it could not ask,
  // on a gRPC thread or, when there is nobody to ask, on this one.
  void Gather(const v1::GetStatsRequest& request, Done done);

 private:
  PeerDirectory& peers_;
  const absl::Duration timeout_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_REPLICAS_PEER_STATS_H_
