// Stats windows from this replica's agents to the leading replica (csd
// replicas on etcd, issue #16): the policy engine runs on the leader only,
// and an agent reports to one replica, so without this the engine would
// plan the other replicas' hosts without their load.
//
// Every Report's windows are queued as this replica takes them and sent to
// the leader (Replica.ForwardStats, at its registered address, through the
// PeerDirectory: csd's own TLS identity, which needs the operator role
// there) every
// flush_interval, in requests of at most 1000 Reports. Best effort, like
// the stats themselves: nothing is forwarded while this replica leads,
// and what cannot be sent (no leader known, the leader unreachable, the
// queue full) is dropped and counted, never retried, so a leader that
// comes back is not flooded with old windows. The engine plans from what
// it has: a host with fewer windows is planned from less, never wrongly.
#ifndef COSCHED_SERVER_REPLICAS_STATS_FORWARDER_H_
#define COSCHED_SERVER_REPLICAS_STATS_FORWARDER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosched/store/etcd_records.pb.h"
#include "cosched/v1/replica.grpc.pb.h"
#include "server/replicas/peer_directory.h"
#include "server/stats/stats_aggregator.h"

namespace cosched::server {

// Most Reports in one ForwardStats request.
inline constexpr int kMaxForwardedReports = 1000;

// Whether `replica` serves `host_id`: as far as the leader knows, that
// replica took the host's latest Report or holds its stream.
using ServedHost = std::function<bool(const std::string& host_id, const std::string& replica)>;

// The leader's side: checks `request` (INVALID_ARGUMENT naming the field
// and the rule: replica, reports[i].host_id, reports[i].stats...,
// reports[i].tagged_id) and adds to `into` the windows of every Report of
// a host the sending replica serves, under that host's series limit
// (StatsAggregator::SeriesLimit of the VMs its windows name: the sender
// keeps only the VMs its Report listed). Reports of hosts it
// does not serve are dropped and counted in unserved_reports: a replica
// speaks for its own agents only (issue #32). Nothing is added when any
// part is bad.
absl::StatusOr<v1::ForwardStatsResponse> TakeForwardedStats(const v1::ForwardStatsRequest& request,
                                                            const ServedHost& served,
                                                            StatsAggregator& into);

struct StatsForwarderOptions {
  // Deadline of each request (store.etcd.peer_timeout_ms).
  absl::Duration timeout = absl::Seconds(1);
  absl::Duration flush_interval = absl::Seconds(1);
  // Reports queued at most; more are dropped (counted).
  size_t max_queued = 20000;
  // How long a Report the leader did not take as this replica's host's
  // (ForwardStatsResponse.unserved: an agent that just moved here) is sent
  // again, at each flush, before it is dropped: a few of the replicas'
  // liveness exchanges (store.etcd.liveness_interval_ms).
  absl::Duration unserved_retry_for = absl::Seconds(15);
};

// Thread-safe; sends on a thread of its own from construction to
// destruction.
class StatsForwarder {
 public:
  // The leading replica's name as this replica knows it (empty: none).
  using Leader = std::function<std::string()>;

  // Finds the leader's address among `peers` (which outlives it).
  StatsForwarder(Leader leader, PeerDirectory& peers, StatsForwarderOptions options);
  ~StatsForwarder();
  StatsForwarder(const StatsForwarder&) = delete;
  StatsForwarder& operator=(const StatsForwarder&) = delete;

  // Queues the Report's windows for the leader.
  void Enqueue(std::shared_ptr<const v1::ReportRequest> report,
               std::shared_ptr<const absl::flat_hash_map<std::string, std::string>> tagged_id);

  // Reports the leader took, and those dropped, since the start.
  int64_t forwarded() const { return forwarded_.load(); }
  int64_t dropped() const { return dropped_.load(); }

 private:
  struct Item {
    std::shared_ptr<const v1::ReportRequest> report;
    std::shared_ptr<const absl::flat_hash_map<std::string, std::string>> tagged_id;
    absl::Time first_sent = absl::InfinitePast();
  };
  void Run();
  // Sends `items`, and queues again at the front those the leader did not
  // yet take as this replica's (unserved_retry_for).
  void Send(std::vector<Item> items);
  void SendOnce(std::vector<Item> items, absl::Time now, std::vector<Item>& again);
  void Drop(size_t n, const absl::Status& why);

  const Leader leader_;
  PeerDirectory& peers_;
  const StatsForwarderOptions options_;
  std::atomic<int64_t> forwarded_{0};
  std::atomic<int64_t> dropped_{0};

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Item> queue_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_REPLICAS_STATS_FORWARDER_H_
