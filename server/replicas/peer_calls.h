// One unary ControlPlane call to every other csd replica on the etcd
// prefix at once, as the registered list names them (PeerDirectory): what a
// fleet-wide answer gathers (GetStats' windows, GetStatus' replicas). Each
// replica answers, or is named with why it did not: it registered no
// address, its channel could not be made, it did not answer within the
// timeout (store.etcd.peer_timeout_ms), or it refused.
#ifndef COSCHED_SERVER_REPLICAS_PEER_CALLS_H_
#define COSCHED_SERVER_REPLICAS_PEER_CALLS_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/transport.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "server/replicas/peer_directory.h"

namespace cosched::server {

// One replica's answer, or why there is none. `replica` "*" when the list
// of replicas could not be read (then it is the only one).
template <typename Response>
struct PeerAnswer {
  std::string replica;
  std::string address;
  absl::StatusOr<Response> answer;
  // Whether it was called (false: no address, no channel, no list).
  bool asked = false;
};

// Sends `request` to every replica `peers` lists but itself, through
// `start` (which calls the stub's async method, e.g.
// `async->GetStats(context, request, response, std::move(callback))`), each
// with `timeout` to answer, and calls `done` once with every answer in list
// order: on a gRPC thread, or on this one when there is nobody to ask.
template <typename Request, typename Response>
void AskPeers(
    PeerDirectory& peers, const Request& request, absl::Duration timeout,
    std::function<void(v1::ControlPlane::Stub::async_interface* async,
                       grpc::ClientContext* context, const Request* request,
                       Response* response, std::function<void(grpc::Status)> callback)>
        start,
    std::function<void(std::vector<PeerAnswer<Response>>)> done) {
  // Every call's context and answer, alive until the last call completes.
  struct Call {
    std::shared_ptr<v1::ControlPlane::Stub> stub;  // keeps the channel while in flight
    grpc::ClientContext context;
    Response response;
  };
  struct Asking {
    Request request;
    std::vector<PeerAnswer<Response>> answers;
    std::vector<std::unique_ptr<Call>> calls;  // by index of answers; null: not asked
    std::atomic<size_t> pending{0};
    std::function<void(std::vector<PeerAnswer<Response>>)> done;
  };
  auto asking = std::make_shared<Asking>();
  asking->request = request;
  asking->done = std::move(done);
  absl::StatusOr<std::vector<store::EtcdReplica>> replicas = peers.Replicas();
  if (!replicas.ok()) {
    asking->answers.push_back(
        {"*", "",
         absl::Status(replicas.status().code(),
                      absl::StrCat("the replicas registered in etcd could not be listed: ",
                                   replicas.status().message())),
         false});
    return asking->done(std::move(asking->answers));
  }
  for (const store::EtcdReplica& replica : *replicas) {
    if (replica.name() == peers.options().self) continue;
    PeerAnswer<Response> answer{replica.name(), replica.address(),
                                absl::UnavailableError("not asked")};
    std::unique_ptr<Call> call;
    if (replica.address().empty()) {
      answer.answer = absl::FailedPreconditionError(
          "it registered no address (store.etcd.advertise_address)");
    } else if (absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
                   peers.ChannelTo(replica.address());
               !channel.ok()) {
      answer.answer = absl::Status(channel.status().code(),
                                   absl::StrCat("at ", replica.address(), ": ",
                                                channel.status().message()));
    } else {
      answer.asked = true;
      call = std::make_unique<Call>();
      call->stub = v1::ControlPlane::NewStub(*channel);
      call->context.set_deadline(std::chrono::system_clock::now() +
                                 absl::ToChronoMilliseconds(timeout));
    }
    asking->answers.push_back(std::move(answer));
    asking->calls.push_back(std::move(call));
  }
  size_t asked = 0;
  for (const auto& call : asking->calls) asked += call != nullptr ? 1 : 0;
  if (asked == 0) return asking->done(std::move(asking->answers));
  asking->pending = asked;
  for (size_t i = 0; i < asking->calls.size(); ++i) {
    Call* call = asking->calls[i].get();
    if (call == nullptr) continue;
    start(call->stub->async(), &call->context, &asking->request, &call->response,
          [asking, call, i, timeout](grpc::Status status) {
            PeerAnswer<Response>& answer = asking->answers[i];
            if (status.ok()) {
              answer.answer = std::move(call->response);
            } else if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
              answer.answer = absl::DeadlineExceededError(absl::StrCat(
                  "at ", answer.address, ": no answer within ", absl::FormatDuration(timeout),
                  " (store.etcd.peer_timeout_ms)"));
            } else {
              const absl::Status error = FromGrpcStatus(status);
              answer.answer = absl::Status(
                  error.code(), absl::StrCat("at ", answer.address, ": ", error.message()));
            }
            if (asking->pending.fetch_sub(1) == 1) asking->done(std::move(asking->answers));
          });
  }
}

}  // namespace cosched::server

#endif  // COSCHED_SERVER_REPLICAS_PEER_CALLS_H_
