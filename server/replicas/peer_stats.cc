#include "server/replicas/peer_stats.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sibling_share.h"
#include "server/replicas/peer_calls.h"
#include "server/stats/stats_source.h"

namespace cosched::server {
namespace {

v1::StatsReplicaGap Gap(std::string replica, std::string reason) {
  v1::StatsReplicaGap gap;
  gap.set_replica(std::move(replica));
  gap.set_reason(std::move(reason));
  return gap;
}

}  // namespace

absl::StatusOr<v1::GetStatsResponse> CombineStatsAnswers(
    v1::GetStatsResponse local, const std::vector<PeerStatsAnswer>& peers,
    std::vector<v1::StatsReplicaGap> gaps, const std::string& not_found) {
  for (const PeerStatsAnswer& peer : peers) {
    if (peer.stats.ok()) {
      AddStatsAnswer(*peer.stats, local);
    } else if (peer.stats.status().code() != absl::StatusCode::kNotFound) {
      gaps.push_back(Gap(peer.replica, peer.stats.status().ToString()));
    }
  }
  std::sort(gaps.begin(), gaps.end(), [](const auto& a, const auto& b) {
    return a.replica() < b.replica();
  });
  if (!HasStats(local)) {
    if (gaps.empty()) return absl::NotFoundError(not_found);
    return absl::NotFoundError(absl::StrCat(
        not_found, " by the replicas that answered; missing: ",
        absl::StrJoin(gaps, "; ", [](std::string* out, const v1::StatsReplicaGap& gap) {
          absl::StrAppend(out, gap.replica(), " (", gap.reason(), ")");
        })));
  }
  local.set_partial(!gaps.empty());
  for (v1::StatsReplicaGap& gap : gaps) *local.add_missing_replicas() = std::move(gap);
  return local;
}

void PeerStats::Gather(const v1::GetStatsRequest& request, Done done) {
  v1::GetStatsRequest local_only = request;
  local_only.set_local_only(true);
  AskPeers<v1::GetStatsRequest, v1::GetStatsResponse>(
      peers_, local_only, timeout_,
      [](auto* async, grpc::ClientContext* context, const v1::GetStatsRequest* request,
         v1::GetStatsResponse* response, std::function<void(grpc::Status)> callback) {
        async->GetStats(context, request, response, std::move(callback));
      },
      [done = std::move(done)](std::vector<PeerAnswer<v1::GetStatsResponse>> answers) {
        std::vector<PeerStatsAnswer> asked;
        std::vector<v1::StatsReplicaGap> gaps;
        for (PeerAnswer<v1::GetStatsResponse>& a : answers) {
          if (a.asked) {
            asked.push_back({a.replica, std::move(a.answer)});
          } else {
            gaps.push_back(Gap(a.replica, std::string(a.answer.status().message())));
          }
        }
        done(std::move(asked), std::move(gaps));
      });
}

}  // namespace cosched::server
