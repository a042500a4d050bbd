// An in-memory ControlPlane for csctl tests, served on an ephemeral
// loopback port. Its rules are simple stand-ins for csd's: enough to check
// what csctl sends and how it shows answers and errors. Thread-safe.
#ifndef COSCHED_TESTS_CLI_FAKE_CONTROL_PLANE_H_
#define COSCHED_TESTS_CLI_FAKE_CONTROL_PLANE_H_

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/server.h"

namespace cosched::cli::testing {

class FakeControlPlane final : public v1::ControlPlane::Service {
 public:
  // ListVMs pages hold this many VMs when the request says 0.
  static constexpr int kDefaultPageSize = 2;

  grpc::Status TagVM(grpc::ServerContext*, const v1::TagVMRequest* request,
                     v1::TagVMResponse* response) override;
  grpc::Status UntagVM(grpc::ServerContext*, const v1::UntagVMRequest* request,
                       v1::UntagVMResponse* response) override;
  grpc::Status GetVM(grpc::ServerContext*, const v1::GetVMRequest* request,
                     v1::VM* response) override;
  grpc::Status ListVMs(grpc::ServerContext*, const v1::ListVMsRequest* request,
                       v1::ListVMsResponse* response) override;
  grpc::Status SetTenantPolicy(grpc::ServerContext*,
                               const v1::SetTenantPolicyRequest* request,
                               v1::TenantPolicy* response) override;
  grpc::Status GetTenantPolicy(grpc::ServerContext*,
                               const v1::GetTenantPolicyRequest* request,
                               v1::TenantPolicy* response) override;
  grpc::Status ListTenantPolicies(
      grpc::ServerContext*, const v1::ListTenantPoliciesRequest* request,
      v1::ListTenantPoliciesResponse* response) override;
  grpc::Status ListHosts(grpc::ServerContext*,
                         const v1::ListHostsRequest* request,
                         v1::ListHostsResponse* response) override;
  // Host "slow" answers after 500 ms, to exercise deadlines.
  grpc::Status GetHost(grpc::ServerContext*, const v1::GetHostRequest* request,
                       v1::Host* response) override;

  // Answers what PutStats stored for the subject ("vm:ID", "host:ID",
  // "tenant:ID", "group:ID"), else NOT_FOUND with csd's message.
  grpc::Status GetStats(grpc::ServerContext*, const v1::GetStatsRequest* request,
                        v1::GetStatsResponse* response) override;

  // One rollout at a time, as csd: StartRollout answers it running at
  // stage 1 with the first registered host (PutHost) enabled, and
  // FAILED_PRECONDITION while one is running; a soak under 60 s is
  // INVALID_ARGUMENT naming soak_seconds. Pause, Resume and Abort set the
  // state; GetRollout is NOT_FOUND before the first.
  grpc::Status StartRollout(grpc::ServerContext*, const v1::StartRolloutRequest* request,
                            v1::Rollout* response) override;
  grpc::Status GetRollout(grpc::ServerContext*, const v1::GetRolloutRequest* request,
                          v1::Rollout* response) override;
  grpc::Status PauseRollout(grpc::ServerContext*, const v1::ChangeRolloutRequest* request,
                            v1::Rollout* response) override;
  grpc::Status ResumeRollout(grpc::ServerContext*, const v1::ChangeRolloutRequest* request,
                             v1::Rollout* response) override;
  grpc::Status AbortRollout(grpc::ServerContext*, const v1::ChangeRolloutRequest* request,
                            v1::Rollout* response) override;
  // Keeps new_hosts in the rollout record (one with an empty id when no
  // rollout was started), as csd.
  grpc::Status SetNewHosts(grpc::ServerContext*, const v1::SetNewHostsRequest* request,
                           v1::Rollout* response) override;
  // Records the request; switches a stored host (NOT_FOUND for another).
  grpc::Status SetHostEnforcement(grpc::ServerContext*,
                                  const v1::SetHostEnforcementRequest* request,
                                  v1::SetHostEnforcementResponse* response) override;
  // Answers what SetStatus stored (no replica until then).
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest* request,
                         v1::GetStatusResponse* response) override;
  void SetStatus(const v1::GetStatusResponse& status);
  std::vector<v1::SetHostEnforcementRequest> enforcement_requests() const;
  std::vector<v1::StartRolloutRequest> rollout_requests() const;
  std::vector<v1::ChangeRolloutRequest> rollout_changes() const;

  // Stores `vm` as is (e.g. with a host and enforcement report).
  void PutVm(const v1::VM& vm);
  void PutHost(const v1::Host& host);
  void PutStats(const std::string& subject, const v1::GetStatsResponse& stats);

  int calls() const;
  std::vector<v1::TagVMRequest> tag_requests() const;
  std::vector<v1::ListVMsRequest> list_requests() const;
  std::vector<v1::GetStatsRequest> stats_requests() const;

 private:
  mutable std::mutex mu_;
  int calls_ = 0;
  int64_t revision_ = 0;
  std::map<std::string, v1::VM> vms_;
  std::map<std::string, v1::TenantPolicy> policies_;
  std::map<std::string, v1::Host> hosts_;
  std::vector<v1::TagVMRequest> tag_requests_;
  std::vector<v1::ListVMsRequest> list_requests_;
  std::map<std::string, v1::GetStatsResponse> stats_;
  std::vector<v1::GetStatsRequest> stats_requests_;
  std::optional<v1::Rollout> rollout_;
  std::vector<v1::StartRolloutRequest> rollout_requests_;
  std::vector<v1::ChangeRolloutRequest> rollout_changes_;
  std::vector<v1::SetHostEnforcementRequest> enforcement_requests_;
  v1::GetStatusResponse status_;
  grpc::Status SetRolloutState(const v1::ChangeRolloutRequest* request, v1::Rollout::State state,
                               v1::Rollout* response);
};

// A FakeControlPlane served on 127.0.0.1:<ephemeral port>.
class FakeServer {
 public:
  FakeServer();
  ~FakeServer();

  FakeControlPlane& service() { return service_; }
  const std::string& address() const { return address_; }
  std::unique_ptr<v1::ControlPlane::StubInterface> NewStub() const;

 private:
  FakeControlPlane service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// A loopback address where nothing listens (a port just released).
std::string UnusedLoopbackAddress();

}  // namespace cosched::cli::testing

#endif  // COSCHED_TESTS_CLI_FAKE_CONTROL_PLANE_H_
