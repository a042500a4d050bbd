#include "tests/cli/fake_control_plane.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/names.h"
#include "common/transport.h"
#include "common/validation.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace cosched::cli::testing {
namespace {

grpc::Status Invalid(const absl::Status& status) {
  return ToGrpcStatus(status);
}

v1::TenantPolicy BuiltInPolicy(const std::string& tenant_id) {
  v1::TenantPolicy policy;
  policy.set_tenant_id(tenant_id);
  policy.set_default_isolation(v1::ISOLATION_LEVEL_VM);
  return policy;
}

bool Allows(const v1::TenantPolicy& policy, v1::IsolationLevel level) {
  return policy.allowed_isolation().empty() ||
         std::find(policy.allowed_isolation().begin(),
                   policy.allowed_isolation().end(),
                   level) != policy.allowed_isolation().end();
}

}  // namespace

grpc::Status FakeControlPlane::TagVM(grpc::ServerContext*,
                                     const v1::TagVMRequest* request,
                                     v1::TagVMResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  tag_requests_.push_back(*request);
  absl::Status valid = ValidateId("vm_id", request->vm_id());
  // Stricter than csd (which reads empty as "default"), so tests see that
  // csctl sends the tenant.
  if (valid.ok()) valid = ValidateId("tenant_id", request->tenant_id());
  std::vector<std::string> classes;
  if (valid.ok()) {
    valid = ValidateClasses("interference_classes",
                            request->interference_classes(), &classes);
  }
  if (!valid.ok()) return Invalid(valid);

  auto existing = vms_.find(request->vm_id());
  if (existing != vms_.end() &&
      existing->second.tenant_id() != request->tenant_id()) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("vm '", request->vm_id(), "' belongs to tenant '",
                     existing->second.tenant_id(), "'"));
  }
  auto found = policies_.find(request->tenant_id());
  v1::TenantPolicy policy = found == policies_.end()
                                ? BuiltInPolicy(request->tenant_id())
                                : found->second;
  v1::IsolationLevel level = request->isolation() ==
                                     v1::ISOLATION_LEVEL_UNSPECIFIED
                                 ? policy.default_isolation()
                                 : request->isolation();
  if (!Allows(policy, level)) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("tenant '", request->tenant_id(),
                     "' does not allow isolation '", IsolationName(level),
                     "'"));
  }

  v1::VM vm = existing == vms_.end() ? v1::VM() : existing->second;
  const bool changed =
      existing == vms_.end() ||
      vm.requested_isolation() != request->isolation() ||
      vm.thread_scope() != request->thread_scope() ||
      std::vector<std::string>(vm.interference_classes().begin(),
                               vm.interference_classes().end()) != classes;
  if (changed) {
    vm.set_vm_id(request->vm_id());
    vm.set_tenant_id(request->tenant_id());
    vm.set_requested_isolation(request->isolation());
    vm.set_thread_scope(request->thread_scope());
    vm.clear_interference_classes();
    for (const std::string& c : classes) vm.add_interference_classes(c);
    v1::Assignment* a = vm.mutable_assignment();
    a->set_vm_id(vm.vm_id());
    a->set_tenant_id(vm.tenant_id());
    a->set_isolation(level);
    a->set_thread_scope(request->thread_scope() ==
                                v1::THREAD_SCOPE_UNSPECIFIED
                            ? v1::THREAD_SCOPE_EMULATOR
                            : request->thread_scope());
    switch (level) {
      case v1::ISOLATION_LEVEL_NONE: a->clear_trust_group(); break;
      case v1::ISOLATION_LEVEL_TENANT:
        a->set_trust_group(absl::StrCat("tenant:", vm.tenant_id()));
        break;
      default: a->set_trust_group(absl::StrCat("vm:", vm.vm_id()));
    }
    a->set_dedicated_cores(level == v1::ISOLATION_LEVEL_DEDICATED);
    a->set_revision(++revision_);
    vms_[vm.vm_id()] = vm;
  }
  *response->mutable_vm() = vm;
  response->set_changed(changed);
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::UntagVM(grpc::ServerContext*,
                                       const v1::UntagVMRequest* request,
                                       v1::UntagVMResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  if (vms_.erase(request->vm_id()) == 0) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("vm '", request->vm_id(), "' not found"));
  }
  response->set_revision(++revision_);
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::GetVM(grpc::ServerContext*,
                                     const v1::GetVMRequest* request,
                                     v1::VM* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  auto it = vms_.find(request->vm_id());
  if (it == vms_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("vm '", request->vm_id(), "' not found"));
  }
  *response = it->second;
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::ListVMs(grpc::ServerContext*,
                                       const v1::ListVMsRequest* request,
                                       v1::ListVMsResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  list_requests_.push_back(*request);
  const int page_size =
      request->page_size() == 0 ? kDefaultPageSize : request->page_size();
  // The token is the last vm_id of the previous page.
  for (auto it = vms_.upper_bound(request->page_token()); it != vms_.end();
       ++it) {
    const v1::VM& vm = it->second;
    if (!request->tenant_id().empty() &&
        vm.tenant_id() != request->tenant_id()) {
      continue;
    }
    if (!request->host_id().empty() && vm.host_id() != request->host_id()) {
      continue;
    }
    if (response->vms_size() == page_size) {
      response->set_next_page_token(response->vms().rbegin()->vm_id());
      break;
    }
    *response->add_vms() = vm;
  }
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::SetTenantPolicy(
    grpc::ServerContext*, const v1::SetTenantPolicyRequest* request,
    v1::TenantPolicy* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  v1::TenantPolicy policy = request->policy();
  absl::Status valid = ValidateId("policy.tenant_id", policy.tenant_id());
  if (!valid.ok()) return Invalid(valid);
  if (!Allows(policy, policy.default_isolation())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "policy.default_isolation must be allowed");
  }
  policy.set_explicitly_set(true);
  policy.set_revision(++revision_);
  policies_[policy.tenant_id()] = policy;
  *response = policy;
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::GetTenantPolicy(
    grpc::ServerContext*, const v1::GetTenantPolicyRequest* request,
    v1::TenantPolicy* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  auto it = policies_.find(request->tenant_id());
  *response = it == policies_.end() ? BuiltInPolicy(request->tenant_id())
                                    : it->second;
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::ListTenantPolicies(
    grpc::ServerContext*, const v1::ListTenantPoliciesRequest* request,
    v1::ListTenantPoliciesResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  // One policy per page, so every listing follows tokens.
  auto it = policies_.upper_bound(request->page_token());
  if (it == policies_.end()) return grpc::Status::OK;
  *response->add_policies() = it->second;
  if (std::next(it) != policies_.end()) {
    response->set_next_page_token(it->first);
  }
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::ListHosts(grpc::ServerContext*,
                                         const v1::ListHostsRequest*,
                                         v1::ListHostsResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  for (const auto& [id, host] : hosts_) *response->add_hosts() = host;
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::GetHost(grpc::ServerContext*,
                                       const v1::GetHostRequest* request,
                                       v1::Host* response) {
  if (request->host_id() == "slow") {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  auto it = hosts_.find(request->host_id());
  if (it == hosts_.end()) {
    return grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("host '", request->host_id(), "' not found"));
  }
  *response = it->second;
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::GetStats(grpc::ServerContext*,
                                        const v1::GetStatsRequest* request,
                                        v1::GetStatsResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  stats_requests_.push_back(*request);
  std::string subject;
  if (request->has_vm_id()) subject = "vm:" + request->vm_id();
  if (request->has_host_id()) subject = "host:" + request->host_id();
  if (request->has_tenant()) subject = "tenant:" + request->tenant();
  if (request->has_trust_group()) subject = "group:" + request->trust_group();
  auto it = stats_.find(subject);
  if (it == stats_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no stats were reported for ", subject,
                                     " in the last ", request->window_seconds(), " s"));
  }
  *response = it->second;
  return grpc::Status::OK;
}

void FakeControlPlane::PutStats(const std::string& subject,
                                const v1::GetStatsResponse& stats) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_[subject] = stats;
}

std::vector<v1::GetStatsRequest> FakeControlPlane::stats_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_requests_;
}

void FakeControlPlane::PutVm(const v1::VM& vm) {
  std::lock_guard<std::mutex> lock(mu_);
  vms_[vm.vm_id()] = vm;
}

void FakeControlPlane::PutHost(const v1::Host& host) {
  std::lock_guard<std::mutex> lock(mu_);
  hosts_[host.host_id()] = host;
}

grpc::Status FakeControlPlane::StartRollout(grpc::ServerContext*,
                                            const v1::StartRolloutRequest* request,
                                            v1::Rollout* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  rollout_requests_.push_back(*request);
  if (request->soak_seconds() < 60) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "soak_seconds 30s is out of range: 1m to 7d");
  }
  if (rollout_ && rollout_->state() == v1::Rollout::STATE_RUNNING) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "rollout r-1 is running: only one rollout runs at a time");
  }
  v1::Rollout r;
  r.set_rollout_id("r-1");
  r.set_state(v1::Rollout::STATE_RUNNING);
  r.set_selector(request->selector());
  *r.mutable_stage_percents() = request->stage_percents();
  r.set_soak_seconds(request->soak_seconds());
  r.mutable_stage_started_time()->set_seconds(1800000000);
  r.mutable_started_time()->set_seconds(1800000000);
  r.set_started_by("alice");
  r.set_matching_hosts(static_cast<int>(hosts_.size()));
  r.set_enabled_count(hosts_.empty() ? 0 : 1);
  rollout_ = r;
  *response = r;
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                                         v1::GetStatusResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  *response = status_;
  return grpc::Status::OK;
}

void FakeControlPlane::SetStatus(const v1::GetStatusResponse& status) {
  std::lock_guard<std::mutex> lock(mu_);
  status_ = status;
}

grpc::Status FakeControlPlane::GetRollout(grpc::ServerContext*, const v1::GetRolloutRequest*,
                                          v1::Rollout* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  if (!rollout_) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "no rollout was started (csctl rollout start)");
  }
  *response = *rollout_;
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::SetRolloutState(const v1::ChangeRolloutRequest* request,
                                               v1::Rollout::State state,
                                               v1::Rollout* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  rollout_changes_.push_back(*request);
  if (!rollout_) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "no rollout was started (csctl rollout start)");
  }
  rollout_->set_state(state);
  *response = *rollout_;
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::PauseRollout(grpc::ServerContext*,
                                            const v1::ChangeRolloutRequest* request,
                                            v1::Rollout* response) {
  return SetRolloutState(request, v1::Rollout::STATE_PAUSED, response);
}

grpc::Status FakeControlPlane::ResumeRollout(grpc::ServerContext*,
                                             const v1::ChangeRolloutRequest* request,
                                             v1::Rollout* response) {
  return SetRolloutState(request, v1::Rollout::STATE_RUNNING, response);
}

grpc::Status FakeControlPlane::AbortRollout(grpc::ServerContext*,
                                            const v1::ChangeRolloutRequest* request,
                                            v1::Rollout* response) {
  return SetRolloutState(request, v1::Rollout::STATE_ABORTED, response);
}

grpc::Status FakeControlPlane::SetNewHosts(grpc::ServerContext*,
                                           const v1::SetNewHostsRequest* request,
                                           v1::Rollout* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  if (!rollout_) rollout_ = v1::Rollout();
  rollout_->set_new_hosts(request->new_hosts());
  *response = *rollout_;
  return grpc::Status::OK;
}

grpc::Status FakeControlPlane::SetHostEnforcement(grpc::ServerContext*,
                                                  const v1::SetHostEnforcementRequest* request,
                                                  v1::SetHostEnforcementResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  enforcement_requests_.push_back(*request);
  if (request->all()) {
    response->set_fleet_off(request->off());
    return grpc::Status::OK;
  }
  auto it = hosts_.find(request->host_id());
  if (it == hosts_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "host '" + request->host_id() + "' not found");
  }
  it->second.set_enforcement_off(request->off());
  *response->add_hosts() = it->second;
  return grpc::Status::OK;
}

std::vector<v1::SetHostEnforcementRequest> FakeControlPlane::enforcement_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enforcement_requests_;
}

std::vector<v1::StartRolloutRequest> FakeControlPlane::rollout_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rollout_requests_;
}

std::vector<v1::ChangeRolloutRequest> FakeControlPlane::rollout_changes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rollout_changes_;
}

int FakeControlPlane::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

std::vector<v1::TagVMRequest> FakeControlPlane::tag_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tag_requests_;
}

std::vector<v1::ListVMsRequest> FakeControlPlane::list_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return list_requests_;
}

FakeServer::FakeServer() {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  address_ = absl::StrCat("127.0.0.1:", port);
}

FakeServer::~FakeServer() { server_->Shutdown(); }

std::unique_ptr<v1::ControlPlane::StubInterface> FakeServer::NewStub() const {
  return v1::ControlPlane::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
}

std::string UnusedLoopbackAddress() {
  FakeServer released;
  return released.address();
}

}  // namespace cosched::cli::testing
