// ExplainVM and Plan answered by the leading replica (csd replicas sharing
// an etcd store). Their answers rest on the agents' stats and on the
// engine's record of the plans it applied, and only the leader has all of
// both: each replica keeps its own agents' windows and forwards them to
// the leader (server/replicas/stats_forwarder.h), and only the leader's engine
// plans. So a replica that does not lead asks the leader (the request with
// local_only set, so that it is never asked on) and answers with the
// leader's answer, within the caller's deadline.
//
// The leader's own errors (NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION)
// come back as they are; any other failure says that this replica asked
// the leader, naming it and its address. When no leader is known (an
// election in progress) the answer is UNAVAILABLE: ask again.
#ifndef COSCHED_SERVER_REPLICAS_LEADER_QUERIES_H_
#define COSCHED_SERVER_REPLICAS_LEADER_QUERIES_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/server_context.h"
#include "server/replicas/peer_directory.h"

namespace cosched::server {

// Thread-safe.
class LeaderQueries {
 public:
  // The name of the replica that leads, as this one last saw it; empty
  // when none is known.
  using Leader = std::function<std::string()>;
  using Done = std::function<void(absl::Status)>;

  // `peers` outlives it. A caller that set no deadline gets
  // `default_deadline`.
  LeaderQueries(Leader leader, PeerDirectory& peers,
                absl::Duration default_deadline = absl::Seconds(60))
      : leader_(std::move(leader)), peers_(peers), default_deadline_(default_deadline) {}

  // Asks the leader and fills `response`; `done` is called once, on a gRPC
  // thread or on this one when the leader cannot be asked. `context` is the
  // caller's call: its deadline and cancellation carry over.
  void ExplainVM(const grpc::CallbackServerContext& context, const v1::ExplainVMRequest& request,
                 v1::ExplainVMResponse* response, Done done);
  void Plan(const grpc::CallbackServerContext& context, const v1::PlanRequest& request,
            v1::PlanResponse* response, Done done);

 private:
  template <typename Request, typename Response, typename Method>
  void Ask(const grpc::CallbackServerContext& context, const Request& request,
           Response* response, Method method, Done done);

  const Leader leader_;
  PeerDirectory& peers_;
  const absl::Duration default_deadline_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_REPLICAS_LEADER_QUERIES_H_
