#include "server/replicas/peer_stats.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sibling_share.h"
#include "common/transport.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
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
  if (local.windows() == 0) {
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

namespace {

// One gathering: every call's context and answer, alive until the last
// call completes.
struct Gathering {
  struct Call {
    std::string replica;
    std::string address;
    std::shared_ptr<v1::ControlPlane::Stub> stub;  // keeps the channel while in flight
    grpc::ClientContext context;
    v1::GetStatsResponse response;
  };
  v1::GetStatsRequest request;
  std::vector<std::unique_ptr<Call>> calls;
  std::vector<PeerStatsAnswer> answers;  // by index of calls
  std::vector<v1::StatsReplicaGap> gaps;
  std::atomic<size_t> pending{0};
  PeerStats::Done done;

  void Finish() { done(std::move(answers), std::move(gaps)); }
};

}  // namespace

void PeerStats::Gather(const v1::GetStatsRequest& request, Done done) {
  auto gathering = std::make_shared<Gathering>();
  gathering->request = request;
  gathering->request.set_local_only(true);
  gathering->done = std::move(done);
  absl::StatusOr<std::vector<store::EtcdReplica>> replicas = peers_.Replicas();
  if (!replicas.ok()) {
    gathering->gaps.push_back(Gap("*", absl::StrCat("the replicas registered in etcd could "
                                                    "not be listed: ",
                                                    replicas.status().ToString())));
    gathering->Finish();
    return;
  }
  for (const store::EtcdReplica& replica : *replicas) {
    if (replica.name() == peers_.options().self) continue;
    if (replica.address().empty()) {
      gathering->gaps.push_back(Gap(replica.name(),
                                    "it registered no address (store.etcd.advertise_address)"));
      continue;
    }
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = peers_.ChannelTo(replica.address());
    if (!channel.ok()) {
      gathering->gaps.push_back(
          Gap(replica.name(), absl::StrCat("at ", replica.address(), ": ",
                                           channel.status().ToString())));
      continue;
    }
    auto call = std::make_unique<Gathering::Call>();
    call->replica = replica.name();
    call->address = replica.address();
    call->stub = v1::ControlPlane::NewStub(*channel);
    call->context.set_deadline(std::chrono::system_clock::now() +
                               absl::ToChronoMilliseconds(timeout_));
    gathering->calls.push_back(std::move(call));
  }
  gathering->answers.resize(gathering->calls.size());
  if (gathering->calls.empty()) {
    gathering->Finish();
    return;
  }
  gathering->pending = gathering->calls.size();
  for (size_t i = 0; i < gathering->calls.size(); ++i) {
    Gathering::Call* call = gathering->calls[i].get();
    call->stub->async()->GetStats(
        &call->context, &gathering->request, &call->response,
        [gathering, call, i, timeout = timeout_](grpc::Status status) {
          PeerStatsAnswer& answer = gathering->answers[i];
          answer.replica = call->replica;
          if (status.ok()) {
            answer.stats = std::move(call->response);
          } else if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
            answer.stats = absl::DeadlineExceededError(absl::StrCat(
                "at ", call->address, ": no answer within ", absl::FormatDuration(timeout),
                " (store.etcd.peer_timeout_ms)"));
          } else if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
            answer.stats = FromGrpcStatus(status);
          } else {
            absl::Status error = FromGrpcStatus(status);
            answer.stats = absl::Status(error.code(), absl::StrCat("at ", call->address, ": ",
                                                                   error.message()));
          }
          if (gathering->pending.fetch_sub(1) == 1) gathering->Finish();
        });
  }
}

}  // namespace cosched::server
