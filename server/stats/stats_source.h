// Where the policy engine and ExplainVM read the agents' stats from: one
// replica's StatsAggregator, or (csd replicas on etcd) this replica's own
// agents' merged with the windows the other replicas forward to the leader
// (server/replicas/stats_forwarder.h), since the engine runs on the leader and an
// agent reports to one replica.
#ifndef COSCHED_SERVER_STATS_STATS_SOURCE_H_
#define COSCHED_SERVER_STATS_STATS_SOURCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "cosched/v1/control_plane.pb.h"

namespace cosched::server {

// Adds `part` (another replica's answer for the same request) into `sum`:
// windows are reported to one replica each, so every figure adds up (by
// the rules of common/sibling_share.h), per VM by vm_id and per core by
// index; the span is the union of both.
void AddStatsAnswer(const v1::GetStatsResponse& part, v1::GetStatsResponse& sum);

// Whether an answer holds anything: a window, or a tenant's gone VMs.
inline bool HasStats(const v1::GetStatsResponse& r) {
  return r.windows() > 0 || r.has_gone_vms();
}

// Queries as StatsAggregator's (server/stats/stats_aggregator.h says what each
// answers). Thread-safe.
class StatsSource {
 public:
  virtual ~StatsSource() = default;
  virtual v1::GetStatsResponse QueryVms(const std::vector<std::string>& vm_ids,
                                        int64_t span_seconds) const = 0;
  virtual v1::GetStatsResponse QueryHost(absl::string_view host_id,
                                         int64_t span_seconds) const = 0;
  virtual v1::GetStatsResponse QueryHostSince(absl::string_view host_id,
                                              int64_t since_unix_ns) const = 0;
};

// The sum of two sources whose windows never overlap: a window is reported
// to one replica, and taken by the leader either from its own agent or
// forwarded, never both. Figures add as GetStats adds replicas' answers
// (AddStatsAnswer).
class MergedStats final : public StatsSource {
 public:
  MergedStats(const StatsSource& first, const StatsSource& second)
      : first_(first), second_(second) {}
  v1::GetStatsResponse QueryVms(const std::vector<std::string>& vm_ids,
                                int64_t span_seconds) const override;
  v1::GetStatsResponse QueryHost(absl::string_view host_id, int64_t span_seconds) const override;
  v1::GetStatsResponse QueryHostSince(absl::string_view host_id,
                                      int64_t since_unix_ns) const override;

 private:
  const StatsSource& first_;
  const StatsSource& second_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATS_STATS_SOURCE_H_
