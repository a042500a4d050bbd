// The gRPC faces of csd: thin adapters from the generated callback services
// to the desired state's aggregates (server/state/), the assignment fan-out,
// the policy engine and the other replicas. Each call is first authorized
// (server/api/authz.h): a refused call never reaches the domain logic. Unary
// calls never hold a thread while a write waits for its commit.
#ifndef COSCHED_SERVER_API_SERVICES_H_
#define COSCHED_SERVER_API_SERVICES_H_

#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "cosched/v1/replica.grpc.pb.h"
#include "server/api/arena_messages.h"
#include "server/api/authz.h"
#include "server/api/query_pool.h"
#include "server/engine/engine_loop.h"
#include "server/engine/policy_queries.h"
#include "server/fanout/assignment_fanout.h"
#include "server/fanout/watch_reads.h"
#include "server/replicas/leader_queries.h"
#include "server/replicas/peer_stats.h"
#include "server/replicas/peer_status.h"
#include "server/state/audit_trail.h"
#include "server/state/host_status.h"
#include "server/state/hosts.h"
#include "server/state/reports.h"
#include "server/state/rollout_control.h"
#include "server/state/tenant_policies.h"
#include "server/state/vms.h"
#include "server/stats/stats_queries.h"
#include "store/store.h"

namespace cosched::server {

// What ControlPlaneService hands each call over to.
struct ControlPlaneParts {
  store::Store& store;  // whether this replica leads
  Vms& vms;
  TenantPolicies& policies;
  Hosts& hosts;
  const HostStatus& host_status;
  StatsQueries& stats;
  AuditTrail& audit;
  PolicyQueries& policy;  // Place and ExplainVM
  const Authorizer& authz;
  EngineLoop& engine;  // Plan
  RolloutControl& rollouts;
  QueryPool& queries;  // runs Plan and ExplainVM
  // csd on etcd (may be null): gathers the other replicas' stats for
  // GetStats; asks the leader ExplainVM and Plan while this replica does
  // not lead.
  PeerStats* peers = nullptr;
  LeaderQueries* leader = nullptr;
  // GetStatus: this replica's own status; on etcd (may be null), the
  // other replicas' gathered beside it.
  std::function<v1::ReplicaStatus()> status;
  PeerStatus* peer_status = nullptr;
};

class ControlPlaneService final : public v1::ControlPlane::CallbackService {
 public:
  explicit ControlPlaneService(ControlPlaneParts parts) : parts_(parts) {}

  grpc::ServerUnaryReactor* TagVM(grpc::CallbackServerContext* context,
                                  const v1::TagVMRequest* request,
                                  v1::TagVMResponse* response) override;
  grpc::ServerUnaryReactor* UntagVM(grpc::CallbackServerContext* context,
                                    const v1::UntagVMRequest* request,
                                    v1::UntagVMResponse* response) override;
  grpc::ServerUnaryReactor* GetVM(grpc::CallbackServerContext* context,
                                  const v1::GetVMRequest* request,
                                  v1::VM* response) override;
  grpc::ServerUnaryReactor* ListVMs(grpc::CallbackServerContext* context,
                                    const v1::ListVMsRequest* request,
                                    v1::ListVMsResponse* response) override;
  grpc::ServerUnaryReactor* SetTenantPolicy(
      grpc::CallbackServerContext* context,
      const v1::SetTenantPolicyRequest* request,
      v1::TenantPolicy* response) override;
  grpc::ServerUnaryReactor* GetTenantPolicy(
      grpc::CallbackServerContext* context,
      const v1::GetTenantPolicyRequest* request,
      v1::TenantPolicy* response) override;
  grpc::ServerUnaryReactor* ListTenantPolicies(
      grpc::CallbackServerContext* context,
      const v1::ListTenantPoliciesRequest* request,
      v1::ListTenantPoliciesResponse* response) override;
  grpc::ServerUnaryReactor* ListHosts(grpc::CallbackServerContext* context,
                                      const v1::ListHostsRequest* request,
                                      v1::ListHostsResponse* response) override;
  grpc::ServerUnaryReactor* DrainHost(grpc::CallbackServerContext* context,
                                      const v1::DrainHostRequest* request,
                                      v1::Host* response) override;
  grpc::ServerUnaryReactor* UndrainHost(grpc::CallbackServerContext* context,
                                        const v1::DrainHostRequest* request,
                                        v1::Host* response) override;
  grpc::ServerUnaryReactor* RemoveHost(grpc::CallbackServerContext* context,
                                       const v1::RemoveHostRequest* request,
                                       v1::RemoveHostResponse* response) override;
  grpc::ServerUnaryReactor* GetHost(grpc::CallbackServerContext* context,
                                    const v1::GetHostRequest* request,
                                    v1::Host* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const v1::GetStatsRequest* request,
                                     v1::GetStatsResponse* response) override;
  grpc::ServerUnaryReactor* ListAuditRecords(
      grpc::CallbackServerContext* context,
      const v1::ListAuditRecordsRequest* request,
      v1::ListAuditRecordsResponse* response) override;
  grpc::ServerUnaryReactor* Place(grpc::CallbackServerContext* context,
                                  const v1::PlaceRequest* request,
                                  v1::PlaceResponse* response) override;
  grpc::ServerUnaryReactor* ExplainVM(grpc::CallbackServerContext* context,
                                      const v1::ExplainVMRequest* request,
                                      v1::ExplainVMResponse* response) override;
  grpc::ServerUnaryReactor* Plan(grpc::CallbackServerContext* context,
                                 const v1::PlanRequest* request,
                                 v1::PlanResponse* response) override;
  grpc::ServerUnaryReactor* StartRollout(grpc::CallbackServerContext* context,
                                         const v1::StartRolloutRequest* request,
                                         v1::Rollout* response) override;
  grpc::ServerUnaryReactor* GetRollout(grpc::CallbackServerContext* context,
                                       const v1::GetRolloutRequest* request,
                                       v1::Rollout* response) override;
  grpc::ServerUnaryReactor* PauseRollout(grpc::CallbackServerContext* context,
                                         const v1::ChangeRolloutRequest* request,
                                         v1::Rollout* response) override;
  grpc::ServerUnaryReactor* ResumeRollout(grpc::CallbackServerContext* context,
                                          const v1::ChangeRolloutRequest* request,
                                          v1::Rollout* response) override;
  grpc::ServerUnaryReactor* AbortRollout(grpc::CallbackServerContext* context,
                                         const v1::ChangeRolloutRequest* request,
                                         v1::Rollout* response) override;
  grpc::ServerUnaryReactor* SetNewHosts(grpc::CallbackServerContext* context,
                                        const v1::SetNewHostsRequest* request,
                                        v1::Rollout* response) override;
  grpc::ServerUnaryReactor* SetHostEnforcement(grpc::CallbackServerContext* context,
                                               const v1::SetHostEnforcementRequest* request,
                                               v1::SetHostEnforcementResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;

 private:
  // Whether ExplainVM and Plan go to the leader: its engine's record and
  // every replica's stats are there (server/replicas/leader_queries.h).
  bool AskTheLeader(bool local_only) const;
  // Answers the call with `query`'s result, run on the query pool; or
  // refuses it (RESOURCE_EXHAUSTED) when the pool is full.
  template <typename T>
  grpc::ServerUnaryReactor* RunQuery(grpc::CallbackServerContext* context,
                                     const std::string& name,
                                     std::function<absl::StatusOr<T>()> query, T* response);
  grpc::ServerUnaryReactor* ChangeRollout(grpc::CallbackServerContext* context,
                                          const char* method, RolloutControl::Change change,
                                          const v1::ChangeRolloutRequest* request,
                                          v1::Rollout* response);

  const ControlPlaneParts parts_;
};

class AgentServiceImpl final : public v1::AgentService::CallbackService {
 public:
  AgentServiceImpl(Hosts& hosts, Reports& reports, WatchReads& watches,
                   AssignmentFanout& fanout, const Authorizer& authz)
      : hosts_(hosts), reports_(reports), watches_(watches), fanout_(fanout), authz_(authz) {
    SetMessageAllocatorFor_Report(&report_messages_);
  }

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerWriteReactor<v1::WatchAssignmentsResponse>* WatchAssignments(
      grpc::CallbackServerContext* context,
      const v1::WatchAssignmentsRequest* request) override;
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* context,
                                   const v1::ReportRequest* request,
                                   v1::ReportResponse* response) override;

 private:
  Hosts& hosts_;
  Reports& reports_;
  WatchReads& watches_;
  AssignmentFanout& fanout_;
  const Authorizer& authz_;
  // A Report is the largest message csd takes, over a thousand a second in
  // a large fleet: parsed into an arena of its own.
  ArenaAllocator<v1::ReportRequest, v1::ReportResponse> report_messages_;
};

// What the other csd replicas on the etcd prefix call (replica.proto).
class ReplicaServiceImpl final : public v1::Replica::CallbackService {
 public:
  // Takes the stats forwarded to this replica while it leads into
  // `forwarded`, from hosts `status` says `replica` serves. `leader`: the
  // leading replica's name as this one knows it.
  ReplicaServiceImpl(store::Store& store, const HostStatus& status, StatsAggregator& forwarded,
                     const Authorizer& authz, std::function<std::string()> leader)
      : store_(store), status_(status), forwarded_(forwarded), authz_(authz),
        leader_(std::move(leader)) {
    SetMessageAllocatorFor_ForwardStats(&forwarded_messages_);
  }

  grpc::ServerUnaryReactor* ForwardStats(grpc::CallbackServerContext* context,
                                         const v1::ForwardStatsRequest* request,
                                         v1::ForwardStatsResponse* response) override;

 private:
  store::Store& store_;
  const HostStatus& status_;
  StatsAggregator& forwarded_;
  const Authorizer& authz_;
  const std::function<std::string()> leader_;
  // The windows of up to kMaxForwardedReports Reports in one call: read in
  // place, in an arena of their own.
  ArenaAllocator<v1::ForwardStatsRequest, v1::ForwardStatsResponse> forwarded_messages_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_API_SERVICES_H_
