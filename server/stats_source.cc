#include "server/stats_source.h"

#include "server/peer_stats.h"

namespace cosched::server {
namespace {

v1::GetStatsResponse Sum(v1::GetStatsResponse first, const v1::GetStatsResponse& second) {
  if (second.windows() == 0) return first;
  if (first.windows() == 0) return second;
  AddStatsAnswer(second, first);
  return first;
}

}  // namespace

v1::GetStatsResponse MergedStats::QueryVms(const std::vector<std::string>& vm_ids,
                                           int64_t span_seconds) const {
  return Sum(first_.QueryVms(vm_ids, span_seconds), second_.QueryVms(vm_ids, span_seconds));
}

v1::GetStatsResponse MergedStats::QueryHost(absl::string_view host_id,
                                            int64_t span_seconds) const {
  return Sum(first_.QueryHost(host_id, span_seconds), second_.QueryHost(host_id, span_seconds));
}

v1::GetStatsResponse MergedStats::QueryHostSince(absl::string_view host_id,
                                                 int64_t since_unix_ns) const {
  return Sum(first_.QueryHostSince(host_id, since_unix_ns),
             second_.QueryHostSince(host_id, since_unix_ns));
}

}  // namespace cosched::server
