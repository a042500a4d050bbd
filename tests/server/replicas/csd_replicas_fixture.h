// The fixture of csd_replicas_test: two or more csd replicas on one real
// etcd member (etcd-server), and the clients an agent and an operator use
// on each. In a named namespace: both files of the test share the one
// fixture class, as googletest requires of a test suite.
#ifndef COSCHED_TESTS_SERVER_REPLICAS_CSD_REPLICAS_FIXTURE_H_
#define COSCHED_TESTS_SERVER_REPLICAS_CSD_REPLICAS_FIXTURE_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cosched/store/etcd_records.pb.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "cosched/v1/replica.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/eventually.h"
#include "tests/testing/partition_proxy.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/trusted_plaintext.h"

namespace cosched::server::replicas_testing {

using std::chrono::seconds;
using std::chrono::system_clock;
using cosched::testing::Eventually;

// A replica and its clients.
struct Replica {
  std::unique_ptr<CsdServer> csd;
  std::unique_ptr<v1::ControlPlane::Stub> control;
  std::unique_ptr<v1::AgentService::Stub> agent;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
};

// An agent's assignment stream on one replica.
struct Stream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::WatchAssignmentsResponse>> reader;
};

class CsdReplicasTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(etcd_.Start()); }

  // A replica whose store reaches etcd at `endpoint` (default: directly).
  // `tweak` changes the options before it starts.
  Replica Start(const std::string& endpoint = "",
                const std::function<void(CsdOptions&)>& tweak = nullptr) {
    CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = dir_.Sub("unused");
    options.metrics_listen = "";
    testing::TrustPlaintextCallers(options.authz);
    // The engine applies what it sees at once: the hysteresis has tests of
    // its own.
    options.engine.hysteresis.min_dwell = std::chrono::seconds(0);
    options.peer_timeout = absl::Milliseconds(300);
    store::EtcdStoreOptions store;
    store.client = etcd_.ClientOptions();
    if (!endpoint.empty()) store.client.endpoints = {endpoint};
    store.prefix = "/cosched";
    options.etcd_store = store;
    if (tweak) tweak(options);
    Replica replica;
    auto csd = CsdServer::Start(options);
    EXPECT_TRUE(csd.ok()) << csd.status();
    if (!csd.ok()) return replica;
    replica.csd = std::move(*csd);
    auto channel =
        grpc::CreateChannel(replica.csd->address(), grpc::InsecureChannelCredentials());
    replica.control = v1::ControlPlane::NewStub(channel);
    replica.agent = v1::AgentService::NewStub(channel);
    replica.health = grpc::health::v1::Health::NewStub(channel);
    return replica;
  }

  // Registers `host` (two cores of two CPUs) and reports `vms` there, each
  // with two vCPUs.
  static void RegisterAndReport(Replica& r, const std::string& host,
                                const std::vector<std::string>& vms, int vcpus = 2) {
    {
      grpc::ClientContext context;
      v1::RegisterRequest request;
      request.set_host_id(host);
      for (int c = 0; c < 2; ++c) {
        v1::Core* core = request.mutable_topology()->add_cores();
        core->set_core_id(c);
        core->add_cpus(2 * c);
        core->add_cpus(2 * c + 1);
      }
      v1::RegisterResponse response;
      ASSERT_OK(r.agent->Register(&context, request, &response));
    }
    grpc::ClientContext context;
    v1::ReportRequest request;
    request.set_host_id(host);
    for (const std::string& vm : vms) {
      v1::VMObservation* o = request.add_vms();
      o->set_vm_id(vm);
      o->mutable_enforcement()->set_vcpus(vcpus);
    }
    v1::ReportResponse response;
    ASSERT_OK(r.agent->Report(&context, request, &response));
  }

  // Reports a one-second window, ending a second ago, in which `vm` ran
  // `run_ms` on `host` (registered on `r` by RegisterAndReport).
  static void ReportWindow(Replica& r, const std::string& host, const std::string& vm,
                           int64_t run_ms) {
    grpc::ClientContext context;
    v1::ReportRequest request;
    request.set_host_id(host);
    v1::VMObservation* o = request.add_vms();
    o->set_vm_id(vm);
    o->mutable_enforcement()->set_vcpus(2);
    v1::StatsWindow* w = request.add_stats();
    w->set_end_unix_ns(absl::ToUnixNanos(absl::Now() - absl::Seconds(1)));
    w->set_start_unix_ns(w->end_unix_ns() - 1000000000);
    v1::VMStats* stats = w->add_vms();
    stats->set_vm_id(vm);
    stats->mutable_share()->set_run_ns(run_ms * 1000000);
    stats->mutable_share()->set_same_ns(run_ms * 1000000 - 1000);
    stats->mutable_share()->set_foreign_ns(1000);
    stats->mutable_share()->set_foreign_intervals(1);
    stats->mutable_share()->set_longest_foreign_ns(run_ms);
    v1::ReportResponse response;
    ASSERT_OK(r.agent->Report(&context, request, &response));
  }

  static grpc::Status Stats(Replica& r, v1::GetStatsRequest request, v1::GetStatsResponse* out) {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(10));
    return r.control->GetStats(&context, request, out);
  }

  static grpc::Status Tag(Replica& r, const std::string& vm, v1::TagVMResponse* out) {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(10));
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id("acme");
    request.set_isolation(v1::ISOLATION_LEVEL_VM);
    return r.control->TagVM(&context, request, out);
  }

  // Puts `tenant` in mode auto, allowing levels vm and tenant.
  static grpc::Status SetAutoPolicy(Replica& r, const std::string& tenant) {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(10));
    v1::SetTenantPolicyRequest request;
    v1::TenantPolicy* policy = request.mutable_policy();
    policy->set_tenant_id(tenant);
    policy->set_default_isolation(v1::ISOLATION_LEVEL_VM);
    policy->add_allowed_isolation(v1::ISOLATION_LEVEL_VM);
    policy->add_allowed_isolation(v1::ISOLATION_LEVEL_TENANT);
    policy->set_mode(v1::POLICY_MODE_AUTO);
    v1::TenantPolicy response;
    return r.control->SetTenantPolicy(&context, request, &response);
  }

  // Tags `vm` for `tenant` without a level: the engine's to decide.
  static grpc::Status TagForEngine(Replica& r, const std::string& vm,
                                   const std::string& tenant = "acme") {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(10));
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id(tenant);
    v1::TagVMResponse response;
    return r.control->TagVM(&context, request, &response);
  }

  static bool DecidedByEngine(Replica& r, const std::string& vm) {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(10));
    v1::GetVMRequest request;
    request.set_vm_id(vm);
    v1::VM response;
    return r.control->GetVM(&context, request, &response).ok() &&
           response.decision().decided_by() == v1::DECIDED_BY_ENGINE;
  }

  static grpc::Status Explain(Replica& r, const std::string& vm, v1::ExplainVMResponse* out,
                              bool local_only = false) {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(30));
    v1::ExplainVMRequest request;
    request.set_vm_id(vm);
    request.set_local_only(local_only);
    return r.control->ExplainVM(&context, request, out);
  }

  // Plan's report: each host's applied plan against what was measured.
  static grpc::Status PlanReport(Replica& r, v1::PlanResponse* out, bool local_only = false) {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(30));
    v1::PlanRequest request;
    request.set_report(true);
    request.set_local_only(local_only);
    return r.control->Plan(&context, request, out);
  }

  static std::unique_ptr<Stream> Watch(Replica& r, const std::string& host) {
    auto stream = std::make_unique<Stream>();
    stream->context.set_deadline(system_clock::now() + seconds(60));
    v1::WatchAssignmentsRequest request;
    request.set_host_id(host);
    stream->reader = r.agent->WatchAssignments(&stream->context, request);
    return stream;
  }

  static grpc::health::v1::HealthCheckResponse::ServingStatus Health(Replica& r) {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(2));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    if (!r.health->Check(&context, request, &response).ok()) {
      return grpc::health::v1::HealthCheckResponse::UNKNOWN;
    }
    return response.status();
  }

  // A Report of `host` to `r` naming only `vm` (2 vCPUs), enforced in
  // `state` at `applied` revision.
  static void ReportEnforcement(Replica& r, const std::string& host, const std::string& vm,
                                v1::EnforcementState state, int64_t applied) {
    grpc::ClientContext context;
    v1::ReportRequest request;
    request.set_host_id(host);
    request.set_applied_revision(applied);
    v1::VMObservation* o = request.add_vms();
    o->set_vm_id(vm);
    o->mutable_enforcement()->set_vcpus(2);
    o->mutable_enforcement()->set_state(state);
    v1::ReportResponse response;
    EXPECT_OK(r.agent->Report(&context, request, &response));
  }

  // GetVM on `r`; an empty VM when it fails.
  static v1::VM GetVmOn(Replica& r, const std::string& vm_id) {
    grpc::ClientContext context;
    v1::GetVMRequest request;
    request.set_vm_id(vm_id);
    v1::VM vm;
    (void)r.control->GetVM(&context, request, &vm);
    return vm;
  }

  static std::string PlaceOn(Replica& r) {
    grpc::ClientContext context;
    v1::PlaceRequest request;
    request.set_tenant_id("other");
    request.set_vcpus(2);
    request.set_pin(false);
    request.set_isolation(v1::ISOLATION_LEVEL_VM);
    v1::PlaceResponse response;
    grpc::Status s = r.control->Place(&context, request, &response);
    return s.ok() ? response.host_id() : absl::StrCat("error: ", s.error_message());
  }

  // The port of the test's etcd member, for a proxy in front of it.
  int EtcdPort() const {
    const std::string endpoint = etcd_.endpoint();
    return std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  }

  // A replica that reaches etcd through `proxy` and ends its agents'
  // streams once etcd has been away for `end_streams_after`.
  Replica StartBehind(const testing::PartitionProxy& proxy, absl::Duration end_streams_after) {
    return Start(proxy.address(), [end_streams_after](CsdOptions& options) {
      options.end_streams_after_store_lost = end_streams_after;
    });
  }

  // Sets the fleet's new_hosts through `r`.
  static void SetNewHosts(Replica& r, v1::NewHosts value) {
    v1::SetNewHostsRequest request;
    request.set_new_hosts(value);
    grpc::ClientContext context;
    v1::Rollout record;
    EXPECT_OK(r.control->SetNewHosts(&context, request, &record));
  }

  // Starts a rollout on `r` of `percents`, each soaking `soak_seconds`.
  static v1::Rollout StartRollout(Replica& r, const std::vector<int>& percents,
                                  int64_t soak_seconds) {
    v1::StartRolloutRequest start;
    for (int percent : percents) start.add_stage_percents(percent);
    start.set_soak_seconds(soak_seconds);
    grpc::ClientContext context;
    v1::Rollout rollout;
    EXPECT_OK(r.control->StartRollout(&context, start, &rollout));
    return rollout;
  }

  testing::EtcdMember etcd_;
  testing::TempDir dir_;
};

}  // namespace cosched::server::replicas_testing

#endif  // COSCHED_TESTS_SERVER_REPLICAS_CSD_REPLICAS_FIXTURE_H_
