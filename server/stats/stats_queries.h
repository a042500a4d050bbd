// GetStats on one csd: the sibling-sharing stats of a VM, host, tenant or
// trust group, from this csd's own agents (replicas on etcd gather the
// others' too: server/replicas/peer_stats.h), and where csd keeps them.
#ifndef COSCHED_SERVER_STATS_STATS_QUERIES_H_
#define COSCHED_SERVER_STATS_STATS_QUERIES_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "cosched/v1/control_plane.pb.h"
#include "server/stats/stats_aggregator.h"
#include "server/stats/stats_source.h"
#include "store/store.h"

namespace cosched::server {

// StatsAggregator::VmFacts read from csd's store: a VM is reported while a
// host's last Report names it (by id or UUID); its tenant is the one its
// record names.
StatsAggregator::VmFactsFn VmFactsIn(store::Store& store);

// The agents' stats csd keeps in memory: its own agents' (GetStats answers
// from them) and, on the leader of replicas on etcd, those the other
// replicas forward (server/replicas/stats_forwarder.h); the policy engine
// and ExplainVM read both (`engine`).
struct AgentStats {
  // `clock` is the clock of the stats kept (tests set it; nullptr: the
  // system clock).
  explicit AgentStats(const StatsAggregator::Clock& clock = nullptr)
      : own(clock), forwarded(clock) {}
  // Series of VMs gone from every host folded at once (StatsAggregator).
  explicit AgentStats(store::Store& store, const StatsAggregator::Clock& clock = nullptr)
      : AgentStats(clock) {
    own.SetVmFacts(VmFactsIn(store));
    forwarded.SetVmFacts(VmFactsIn(store));
  }

  StatsAggregator own;
  StatsAggregator forwarded;
  MergedStats engine{own, forwarded};
};

// Thread-safe.
class StatsQueries {
 public:
  StatsQueries(store::Store& store, const StatsAggregator& stats)
      : store_(store), stats_(stats) {}

  // Sibling-sharing stats of a VM, host, tenant or trust group over the
  // last window_seconds. A tenant's or trust group's VMs are those tagged
  // for it now: a VM's whole recent history counts for its current tenant
  // and group. INVALID_ARGUMENT for no subject or a bad one, or
  // window_seconds outside 1-86400 (0: 300); NOT_FOUND when no window of
  // the subject ended in the span.
  absl::StatusOr<v1::GetStatsResponse> GetStats(const v1::GetStatsRequest& request);
  // GetStats's answer before its NOT_FOUND: `stats` may have no window,
  // and `not_found` is the error to give when no replica has one.
  struct StatsQuery {
    v1::GetStatsResponse stats;
    std::string not_found;
  };
  absl::StatusOr<StatsQuery> QueryStats(const v1::GetStatsRequest& request);

 private:
  store::Store& store_;
  const StatsAggregator& stats_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATS_STATS_QUERIES_H_
