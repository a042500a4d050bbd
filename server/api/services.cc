#include "server/api/services.h"

#include "absl/strings/str_cat.h"
#include "common/log_every.h"
#include "common/transport.h"
#include "glog/logging.h"
#include "server/replicas/stats_forwarder.h"

namespace cosched::server {
namespace {

// Answers a unary call with a result that is already known.
template <typename T>
grpc::ServerUnaryReactor* AnswerNow(grpc::CallbackServerContext* context,
                                    absl::StatusOr<T> result, T* response) {
  auto* reactor = context->DefaultReactor();
  if (result.ok()) *response = std::move(*result);
  reactor->Finish(ToGrpcStatus(result.status()));
  return reactor;
}

// The completion of an asynchronous write, answering the call.
template <typename T>
Done<T> AnswerLater(grpc::ServerUnaryReactor* reactor,
                                  T* response) {
  return [reactor, response](absl::StatusOr<T> result) {
    if (result.ok()) *response = std::move(*result);
    reactor->Finish(ToGrpcStatus(result.status()));
  };
}

// Answers a unary call that authorization refused. Logged, rate-limited:
// refusals are what an operator looks for after a misconfiguration or an
// intrusion attempt, but a looping client must not flood the log.
grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  COSCHED_LOG_EVERY_T(WARNING, 10) << "refused " << context->peer() << ": " << status;
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

Actor ActorOf(const Caller& caller) {
  return {caller.who, std::string(RoleName(caller.role))};
}

}  // namespace

grpc::ServerUnaryReactor* ControlPlaneService::TagVM(
    grpc::CallbackServerContext* context, const v1::TagVMRequest* request,
    v1::TagVMResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "TagVM");
  if (!caller.ok()) return Refuse(context, caller.status());
  auto* reactor = context->DefaultReactor();
  parts_.vms.TagVm(*request, ActorOf(*caller), AnswerLater(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::UntagVM(
    grpc::CallbackServerContext* context, const v1::UntagVMRequest* request,
    v1::UntagVMResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "UntagVM");
  if (!caller.ok()) return Refuse(context, caller.status());
  auto* reactor = context->DefaultReactor();
  parts_.vms.UntagVm(*request, ActorOf(*caller), AnswerLater(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::GetVM(
    grpc::CallbackServerContext* context, const v1::GetVMRequest* request,
    v1::VM* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "GetVM");
  if (!caller.ok()) return Refuse(context, caller.status());
  return AnswerNow(context, parts_.vms.GetVm(*request), response);
}

grpc::ServerUnaryReactor* ControlPlaneService::ListVMs(
    grpc::CallbackServerContext* context, const v1::ListVMsRequest* request,
    v1::ListVMsResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "ListVMs");
  if (!caller.ok()) return Refuse(context, caller.status());
  return AnswerNow(context, parts_.vms.ListVms(*request), response);
}

grpc::ServerUnaryReactor* ControlPlaneService::SetTenantPolicy(
    grpc::CallbackServerContext* context,
    const v1::SetTenantPolicyRequest* request, v1::TenantPolicy* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "SetTenantPolicy");
  if (!caller.ok()) return Refuse(context, caller.status());
  auto* reactor = context->DefaultReactor();
  parts_.policies.SetTenantPolicy(*request, ActorOf(*caller),
                         AnswerLater(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::GetTenantPolicy(
    grpc::CallbackServerContext* context,
    const v1::GetTenantPolicyRequest* request, v1::TenantPolicy* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "GetTenantPolicy");
  if (!caller.ok()) return Refuse(context, caller.status());
  return AnswerNow(context, parts_.policies.GetTenantPolicy(*request), response);
}

grpc::ServerUnaryReactor* ControlPlaneService::ListTenantPolicies(
    grpc::CallbackServerContext* context,
    const v1::ListTenantPoliciesRequest* request,
    v1::ListTenantPoliciesResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "ListTenantPolicies");
  if (!caller.ok()) return Refuse(context, caller.status());
  return AnswerNow(context, parts_.policies.ListTenantPolicies(*request), response);
}

grpc::ServerUnaryReactor* ControlPlaneService::ListHosts(
    grpc::CallbackServerContext* context, const v1::ListHostsRequest* request,
    v1::ListHostsResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "ListHosts");
  if (!caller.ok()) return Refuse(context, caller.status());
  auto hosts = parts_.hosts.ListHosts(*request);
  if (hosts.ok()) {
    for (auto& host : *hosts->mutable_hosts()) {
      host.set_connected(parts_.host_status.IsConnected(host.host_id()));
      host.set_connected_replica(parts_.host_status.ConnectedReplica(host.host_id()));
    }
  }
  return AnswerNow(context, std::move(hosts), response);
}

grpc::ServerUnaryReactor* ControlPlaneService::GetHost(
    grpc::CallbackServerContext* context, const v1::GetHostRequest* request,
    v1::Host* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "GetHost");
  if (!caller.ok()) return Refuse(context, caller.status());
  auto host = parts_.hosts.GetHost(*request);
  if (host.ok()) {
    host->set_connected(parts_.host_status.IsConnected(host->host_id()));
    host->set_connected_replica(parts_.host_status.ConnectedReplica(host->host_id()));
  }
  return AnswerNow(context, std::move(host), response);
}

grpc::ServerUnaryReactor* ControlPlaneService::DrainHost(
    grpc::CallbackServerContext* context, const v1::DrainHostRequest* request,
    v1::Host* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "DrainHost");
  if (!caller.ok()) return Refuse(context, caller.status());
  auto* reactor = context->DefaultReactor();
  parts_.hosts.SetHostDraining(*request, true, ActorOf(*caller),
                          AnswerLater(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::UndrainHost(
    grpc::CallbackServerContext* context, const v1::DrainHostRequest* request,
    v1::Host* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "UndrainHost");
  if (!caller.ok()) return Refuse(context, caller.status());
  auto* reactor = context->DefaultReactor();
  parts_.hosts.SetHostDraining(*request, false, ActorOf(*caller),
                          AnswerLater(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::RemoveHost(
    grpc::CallbackServerContext* context, const v1::RemoveHostRequest* request,
    v1::RemoveHostResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "RemoveHost");
  if (!caller.ok()) return Refuse(context, caller.status());
  auto* reactor = context->DefaultReactor();
  parts_.hosts.RemoveHost(*request, ActorOf(*caller), AnswerLater(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::GetStats(
    grpc::CallbackServerContext* context, const v1::GetStatsRequest* request,
    v1::GetStatsResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "GetStats");
  if (!caller.ok()) return Refuse(context, caller.status());
  if (parts_.peers == nullptr || request->local_only()) {
    return AnswerNow(context, parts_.stats.GetStats(*request), response);
  }
  absl::StatusOr<StatsQueries::StatsQuery> local = parts_.stats.QueryStats(*request);
  if (!local.ok()) return AnswerNow<v1::GetStatsResponse>(context, local.status(), response);
  auto* reactor = context->DefaultReactor();
  parts_.peers->Gather(*request, [reactor, response, local = std::move(*local)](
                               std::vector<PeerStatsAnswer> answers,
                               std::vector<v1::StatsReplicaGap> gaps) mutable {
    absl::StatusOr<v1::GetStatsResponse> combined = CombineStatsAnswers(
        std::move(local.stats), answers, std::move(gaps), local.not_found);
    if (combined.ok()) *response = std::move(*combined);
    reactor->Finish(ToGrpcStatus(combined.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::GetStatus(grpc::CallbackServerContext* context,
                                                         const v1::GetStatusRequest* request,
                                                         v1::GetStatusResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "GetStatus");
  if (!caller.ok()) return Refuse(context, caller.status());
  v1::ReplicaStatus self = parts_.status ? parts_.status() : v1::ReplicaStatus();
  if (parts_.peer_status == nullptr || request->local_only()) {
    v1::GetStatusResponse own;
    *own.add_replicas() = std::move(self);
    return AnswerNow<v1::GetStatusResponse>(context, std::move(own), response);
  }
  auto* reactor = context->DefaultReactor();
  parts_.peer_status->Gather(std::move(self), [reactor, response](v1::GetStatusResponse all) {
    *response = std::move(all);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::ListAuditRecords(
    grpc::CallbackServerContext* context,
    const v1::ListAuditRecordsRequest* request,
    v1::ListAuditRecordsResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "ListAuditRecords");
  if (!caller.ok()) return Refuse(context, caller.status());
  return AnswerNow(context, parts_.audit.ListAuditRecords(*request), response);
}

grpc::ServerUnaryReactor* ControlPlaneService::Place(
    grpc::CallbackServerContext* context, const v1::PlaceRequest* request,
    v1::PlaceResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "Place");
  if (!caller.ok()) return Refuse(context, caller.status());
  return AnswerNow(context, parts_.policy.Place(*request), response);
}

bool ControlPlaneService::AskTheLeader(bool local_only) const {
  return parts_.leader != nullptr && !local_only && !parts_.store.Leads();
}

grpc::ServerUnaryReactor* ControlPlaneService::ExplainVM(
    grpc::CallbackServerContext* context, const v1::ExplainVMRequest* request,
    v1::ExplainVMResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "ExplainVM");
  if (!caller.ok()) return Refuse(context, caller.status());
  if (AskTheLeader(request->local_only())) {
    auto* reactor = context->DefaultReactor();
    parts_.leader->ExplainVM(*context, *request, response,
                       [reactor](absl::Status s) { reactor->Finish(ToGrpcStatus(s)); });
    return reactor;
  }
  return RunQuery<v1::ExplainVMResponse>(
      context, "ExplainVM", [this, request] { return parts_.policy.ExplainVm(*request); }, response);
}

template <typename T>
grpc::ServerUnaryReactor* ControlPlaneService::RunQuery(
    grpc::CallbackServerContext* context, const std::string& name,
    std::function<absl::StatusOr<T>()> query, T* response) {
  auto* reactor = context->DefaultReactor();
  // The simulator runs on the query pool, not on this callback thread.
  absl::Status queued =
      parts_.queries.Submit(name, [reactor, response, query = std::move(query)](absl::Status expired) {
        absl::StatusOr<T> result = expired.ok() ? query() : absl::StatusOr<T>(expired);
        if (result.ok()) *response = std::move(*result);
        reactor->Finish(ToGrpcStatus(result.status()));
      });
  if (!queued.ok()) {
    COSCHED_LOG_EVERY_T(WARNING, 10) << "refused " << context->peer() << ": " << queued;
    reactor->Finish(ToGrpcStatus(queued));
  }
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::Plan(grpc::CallbackServerContext* context,
                                                    const v1::PlanRequest* request,
                                                    v1::PlanResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "Plan");
  if (!caller.ok()) return Refuse(context, caller.status());
  // What every auto host of the fleet would change is a prediction per
  // host: operators may ask it, viewers ask per tenant (issue #32).
  if (request->tenant_id().empty() && !request->report() && caller->role < Role::kOperator) {
    return Refuse(context,
                  absl::PermissionDeniedError(absl::StrCat(
                      caller->who, " has role ", RoleName(caller->role),
                      "; a Plan of the whole fleet (no tenant_id) needs operator: a viewer "
                      "asks for one tenant (csctl plan --tenant T), or for the report")));
  }
  if (AskTheLeader(request->local_only())) {
    auto* reactor = context->DefaultReactor();
    parts_.leader->Plan(*context, *request, response,
                  [reactor](absl::Status s) { reactor->Finish(ToGrpcStatus(s)); });
    return reactor;
  }
  return RunQuery<v1::PlanResponse>(
      context, "Plan", [this, request] { return parts_.engine.Plan(*request); }, response);
}

grpc::ServerUnaryReactor* ControlPlaneService::StartRollout(
    grpc::CallbackServerContext* context, const v1::StartRolloutRequest* request,
    v1::Rollout* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "StartRollout");
  if (!caller.ok()) return Refuse(context, caller.status());
  auto* reactor = context->DefaultReactor();
  parts_.rollouts.StartRollout(*request, ActorOf(*caller), AnswerLater(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::GetRollout(grpc::CallbackServerContext* context,
                                                          const v1::GetRolloutRequest*,
                                                          v1::Rollout* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "GetRollout");
  if (!caller.ok()) return Refuse(context, caller.status());
  return AnswerNow(context, parts_.rollouts.GetRollout(), response);
}

grpc::ServerUnaryReactor* ControlPlaneService::ChangeRollout(
    grpc::CallbackServerContext* context, const char* method, RolloutControl::Change change,
    const v1::ChangeRolloutRequest* request, v1::Rollout* response) {
  auto caller = parts_.authz.ForControlPlane(*context, method);
  if (!caller.ok()) return Refuse(context, caller.status());
  auto* reactor = context->DefaultReactor();
  parts_.rollouts.ChangeRollout(change, *request, ActorOf(*caller), AnswerLater(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::PauseRollout(
    grpc::CallbackServerContext* context, const v1::ChangeRolloutRequest* request,
    v1::Rollout* response) {
  return ChangeRollout(context, "PauseRollout", RolloutControl::Change::kPause, request, response);
}

grpc::ServerUnaryReactor* ControlPlaneService::ResumeRollout(
    grpc::CallbackServerContext* context, const v1::ChangeRolloutRequest* request,
    v1::Rollout* response) {
  return ChangeRollout(context, "ResumeRollout", RolloutControl::Change::kResume, request,
                       response);
}

grpc::ServerUnaryReactor* ControlPlaneService::AbortRollout(
    grpc::CallbackServerContext* context, const v1::ChangeRolloutRequest* request,
    v1::Rollout* response) {
  return ChangeRollout(context, "AbortRollout", RolloutControl::Change::kAbort, request, response);
}

grpc::ServerUnaryReactor* ControlPlaneService::SetNewHosts(
    grpc::CallbackServerContext* context, const v1::SetNewHostsRequest* request,
    v1::Rollout* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "SetNewHosts");
  if (!caller.ok()) return Refuse(context, caller.status());
  auto* reactor = context->DefaultReactor();
  parts_.rollouts.SetNewHosts(*request, ActorOf(*caller), AnswerLater(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ControlPlaneService::SetHostEnforcement(
    grpc::CallbackServerContext* context, const v1::SetHostEnforcementRequest* request,
    v1::SetHostEnforcementResponse* response) {
  auto caller = parts_.authz.ForControlPlane(*context, "SetHostEnforcement");
  if (!caller.ok()) return Refuse(context, caller.status());
  const int targets =
      !request->host_id().empty() + !request->selector().empty() + request->all();
  if (targets != 1) {
    return AnswerNow(context,
                     absl::StatusOr<v1::SetHostEnforcementResponse>(absl::InvalidArgumentError(
                         "give exactly one of host_id, selector and all")),
                     response);
  }
  auto* reactor = context->DefaultReactor();
  if (request->all()) {
    parts_.rollouts.SetFleetEnforcement(*request, ActorOf(*caller), AnswerLater(reactor, response));
  } else {
    parts_.hosts.SetHostEnforcement(*request, ActorOf(*caller), AnswerLater(reactor, response));
  }
  return reactor;
}

grpc::ServerUnaryReactor* AgentServiceImpl::Register(
    grpc::CallbackServerContext* context, const v1::RegisterRequest* request,
    v1::RegisterResponse* response) {
  auto caller = authz_.ForHost(*context, request->host_id());
  if (!caller.ok()) return Refuse(context, caller.status());
  auto* reactor = context->DefaultReactor();
  hosts_.RegisterHost(*request, Actor{caller->who, "host"},
                       AnswerLater(reactor, response));
  return reactor;
}

grpc::ServerWriteReactor<v1::WatchAssignmentsResponse>*
AgentServiceImpl::WatchAssignments(grpc::CallbackServerContext* context,
                                   const v1::WatchAssignmentsRequest* request) {
  auto caller = authz_.ForHost(*context, request->host_id());
  if (!caller.ok()) {
    COSCHED_LOG_EVERY_T(WARNING, 10)
        << "refused " << context->peer() << ": " << caller.status();
  }
  absl::Status valid =
      caller.ok() ? watches_.ValidateWatch(*request) : caller.status();
  if (!valid.ok()) {
    // A reactor that only says why.
    class Refusal : public grpc::ServerWriteReactor<v1::WatchAssignmentsResponse> {
     public:
      explicit Refusal(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
      void OnDone() override { delete this; }
    };
    return new Refusal(valid);
  }
  return fanout_.StartWatch(*request);
}

grpc::ServerUnaryReactor* AgentServiceImpl::Report(
    grpc::CallbackServerContext* context, const v1::ReportRequest* request,
    v1::ReportResponse* response) {
  // The report is the host's own list of VMs: the caller must be that host.
  auto caller = authz_.ForHost(*context, request->host_id());
  if (!caller.ok()) return Refuse(context, caller.status());
  auto* reactor = context->DefaultReactor();
  // The Report as gRPC parsed it, in its arena (arena_messages.h): its
  // write, its stats and the leader's copy share it, and no copy is made.
  reports_.ApplyReport(SharedRequest<v1::ReportRequest, v1::ReportResponse>(context, request),
                       AnswerLater(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ReplicaServiceImpl::ForwardStats(
    grpc::CallbackServerContext* context, const v1::ForwardStatsRequest* request,
    v1::ForwardStatsResponse* response) {
  auto caller = authz_.ForControlPlane(*context, "ForwardStats");
  if (!caller.ok()) return Refuse(context, caller.status());
  // Only the leader's engine plans: windows taken elsewhere would be lost
  // to it. The sender asks again who leads.
  if (!store_.Leads()) {
    const std::string leader = leader_ ? leader_() : "";
    return AnswerNow(context,
                     absl::StatusOr<v1::ForwardStatsResponse>(absl::FailedPreconditionError(
                         absl::StrCat("this replica does not lead",
                                      leader.empty() ? "" : absl::StrCat(" (", leader, " does)"),
                                      ": forward stats to the leader"))),
                     response);
  }
  const ServedHost served = [this](const std::string& host, const std::string& replica) {
    return status_.ServedBy(host, replica);
  };
  return AnswerNow(context, TakeForwardedStats(*request, served, forwarded_),
                   response);
}

}  // namespace cosched::server
