// Identities, roles and the audit trail over real mutual TLS: agents act
// only for the host in their certificate, ControlPlane callers only within
// their role (from the certificate or a bearer token), and every change is
// in the audit trail that `csctl audit` reads. Certificates are made here
// with openssl.
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "host/pseudo_fs.h"
#include "host/testing/core_sched_fake.h"

#include "cli/csctl.h"
#include "common/transport.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "discovery/testing/static_vm_discovery.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "host/testing/fake_host.h"
#include "host/testing/pseudo_fs_fake.h"
#include "nlohmann/json.hpp"
#include "server/api/authz.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_pki.h"

namespace cosched {
namespace {

using ::testing::HasSubstr;

constexpr char kDomain[] = "spiffe://cosched-test";

class AuthzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pki_.MakeCa("ca")) << "openssl failed: see " << dir_.path() << "/openssl.log";
    ASSERT_TRUE(pki_.MakeCert("ca", "csd", "DNS:localhost,IP:127.0.0.1"));
    for (const char* host : {"host-a", "host-b"}) {
      ASSERT_TRUE(pki_.MakeCert("ca", host,
                                std::string("URI:") + kDomain + "/host/" + host));
    }
    ASSERT_TRUE(pki_.MakeCert("ca", "viewer", "DNS:viewer.example", "viewer-1"));
    ASSERT_TRUE(pki_.MakeCert("ca", "operator", std::string("URI:") + kDomain + "/user/op"));
    ASSERT_TRUE(pki_.MakeCert("ca", "admin", "DNS:admin.example", "admin-1"));
    ASSERT_TRUE(pki_.MakeCert("ca", "cli", "DNS:cli.example", "cli"));

    server::CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = dir_.Sub("data");
    options.tls.set_cert_file(dir_.Sub("csd.crt"));
    options.tls.set_key_file(dir_.Sub("csd.key"));
    options.tls.set_ca_file(dir_.Sub("ca.crt"));
    options.authz.trust_domain = "cosched-test";
    options.authz.roles.push_back(Binding("viewer", "", "viewer-1"));
    options.authz.roles.push_back(Binding("operator", std::string(kDomain) + "/user/op", ""));
    options.authz.roles.push_back(Binding("admin", "", "admin-1"));
    for (const char* role : {"viewer", "operator"}) {
      v1::TokenBinding token;
      token.set_role(role);
      token.set_sha256(server::Sha256Hex(std::string("token-of-") + role));
      token.set_name(std::string(role) + "-bot");
      options.authz.tokens.push_back(token);
    }
    auto csd = server::CsdServer::Start(options);
    ASSERT_OK(csd);
    csd_ = std::move(*csd);
  }

  static v1::RoleBinding Binding(const std::string& role, const std::string& spiffe_id,
                                 const std::string& cn) {
    v1::RoleBinding binding;
    binding.set_role(role);
    if (!spiffe_id.empty()) binding.add_spiffe_ids(spiffe_id);
    if (!cn.empty()) binding.add_common_names(cn);
    return binding;
  }

  std::shared_ptr<grpc::Channel> Channel(const std::string& client) {
    v1::TlsConfig tls;
    tls.set_ca_file(dir_.Sub("ca.crt"));
    tls.set_cert_file(dir_.Sub(client + ".crt"));
    tls.set_key_file(dir_.Sub(client + ".key"));
    auto credentials = MakeChannelCredentials(csd_->address(), tls, false);
    EXPECT_OK(credentials);
    return grpc::CreateChannel(csd_->address(), *credentials);
  }

  static std::unique_ptr<grpc::ClientContext> Context(const std::string& token = "") {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
    return context;
  }

  static v1::RegisterRequest RegisterRequest(const std::string& host) {
    v1::RegisterRequest request;
    request.set_host_id(host);
    request.mutable_topology()->add_cores()->add_cpus(0);
    return request;
  }

  grpc::Status Tag(const std::string& client, const std::string& vm,
                   const std::string& token = "") {
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    v1::TagVMResponse response;
    return v1::ControlPlane::NewStub(Channel(client))
        ->TagVM(Context(token).get(), request, &response);
  }

  grpc::Status SetPolicy(const std::string& client) {
    v1::SetTenantPolicyRequest request;
    request.mutable_policy()->set_tenant_id("acme");
    request.mutable_policy()->set_default_isolation(v1::ISOLATION_LEVEL_TENANT);
    v1::TenantPolicy response;
    return v1::ControlPlane::NewStub(Channel(client))
        ->SetTenantPolicy(Context().get(), request, &response);
  }

  grpc::Status ListVms(const std::string& client, const std::string& token = "") {
    v1::ListVMsRequest request;
    v1::ListVMsResponse response;
    return v1::ControlPlane::NewStub(Channel(client))
        ->ListVMs(Context(token).get(), request, &response);
  }

  // Runs csctl against csd with `args` after the TLS flags of `client`.
  int Csctl(const std::string& client, std::vector<std::string> args, std::string* out) {
    std::vector<std::string> argv = {"csctl",  "--server", csd_->address(),
                                     "--ca",   dir_.Sub("ca.crt"),
                                     "--cert", dir_.Sub(client + ".crt"),
                                     "--key",  dir_.Sub(client + ".key")};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<const char*> raw;
    for (const auto& a : argv) raw.push_back(a.c_str());
    cli::CsctlEnvironment env;
    env.get_env = [](const std::string&) { return std::string(); };
    env.file_exists = [](const std::string&) { return false; };
    env.make_stub = cli::MakeControlPlaneStub;
    std::ostringstream o, e;
    int code = cli::RunCsctl(static_cast<int>(raw.size()), raw.data(), env, o, e);
    *out = o.str() + e.str();
    return code;
  }

  // An agent on a fake host of one core with two CPUs, over mutual TLS
  // with the certificate of `client`.
  agent::AgentOptions AgentOptionsWithCertOf(const std::string& client) {
    auto fs = host::MakeFakeHost(
        {.cores = 1, .smt_active = std::nullopt, .schedstats = std::nullopt});
    agent::AgentOptions options;
    options.session.server_address = csd_->address();
    options.session.tls.set_ca_file(dir_.Sub("ca.crt"));
    options.session.tls.set_cert_file(dir_.Sub(client + ".crt"));
    options.session.tls.set_key_file(dir_.Sub(client + ".key"));
    options.state_dir = dir_.Sub("agent-state");
    options.session.backoff_initial = std::chrono::milliseconds(20);
    options.session.backoff_max = std::chrono::milliseconds(200);
    options.host_fs = fs;
    return options;
  }

  cosched::testing::TempDir dir_;
  cosched::testing::TestPki pki_{dir_.path()};
  std::unique_ptr<server::CsdServer> csd_;
};

TEST_F(AuthzTest, AgentCannotRegisterWatchOrReportForAnotherHost) {
  auto agent = v1::AgentService::NewStub(Channel("host-a"));
  v1::RegisterResponse registered;
  grpc::Status own = agent->Register(Context().get(), RegisterRequest("host-a"), &registered);
  ASSERT_OK(own) << own.error_message();
  // host-b exists, so only identity can refuse what follows.
  ASSERT_TRUE(v1::AgentService::NewStub(Channel("host-b"))
                  ->Register(Context().get(), RegisterRequest("host-b"), &registered)
                  .ok());

  grpc::Status other =
      agent->Register(Context().get(), RegisterRequest("host-b"), &registered);
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(other.error_message(), HasSubstr("'host-a'"));
  EXPECT_THAT(other.error_message(), HasSubstr("'host-b'"));

  v1::WatchAssignmentsRequest watch;
  watch.set_host_id("host-b");
  auto context = Context();
  auto reader = agent->WatchAssignments(context.get(), watch);
  v1::WatchAssignmentsResponse message;
  EXPECT_FALSE(reader->Read(&message));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);

  v1::ReportRequest report;
  report.set_host_id("host-b");
  report.add_vms()->set_vm_id("vm-stolen");
  v1::ReportResponse reported;
  EXPECT_EQ(agent->Report(Context().get(), report, &reported).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  report.set_host_id("host-a");
  EXPECT_OK(agent->Report(Context().get(), report, &reported));

  // Its own watch is served.
  watch.set_host_id("host-a");
  auto own_context = Context();
  auto own_reader = agent->WatchAssignments(own_context.get(), watch);
  EXPECT_TRUE(own_reader->Read(&message));
  own_context->TryCancel();
  own_reader->Finish();
}

TEST_F(AuthzTest, AgentCertificateHasNoControlPlaneRole) {
  grpc::Status status = ListVms("host-a");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("has role none"));
}

TEST_F(AuthzTest, ViewerReadsButCannotTagOperatorTagsOnlyAdminSetsPolicy) {
  EXPECT_OK(ListVms("viewer"));
  grpc::Status viewer_tag = Tag("viewer", "vm-1");
  EXPECT_EQ(viewer_tag.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(viewer_tag.error_message(), HasSubstr("cn:viewer-1 has role viewer"));

  EXPECT_OK(Tag("operator", "vm-1"));
  EXPECT_EQ(SetPolicy("operator").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_OK(SetPolicy("admin"));
  // A certificate that no binding names reads nothing.
  EXPECT_EQ(ListVms("cli").error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AuthzTest, BearerTokenGivesItsRole) {
  EXPECT_OK(ListVms("cli", "token-of-viewer"));
  EXPECT_EQ(Tag("cli", "vm-1", "token-of-viewer").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_OK(Tag("cli", "vm-1", "token-of-operator"));
  EXPECT_EQ(ListVms("cli", "token-of-nobody").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  // csctl sends its token from --token.
  std::string out;
  EXPECT_EQ(Csctl("cli", {"--token", "token-of-operator", "tag", "vm-2"}, &out), 0) << out;
  EXPECT_EQ(Csctl("cli", {"--token", "token-of-viewer", "tag", "vm-3"}, &out), 1);
  EXPECT_THAT(out, HasSubstr("token:viewer-bot has role viewer"));
}

TEST_F(AuthzTest, ChangesAreInTheAuditTrailThatCsctlShows) {
  ASSERT_OK(Tag("operator", "vm-1"));
  ASSERT_OK(Tag("operator", "vm-1"));  // the same again: no change
  ASSERT_OK(SetPolicy("admin"));
  v1::RegisterResponse registered;
  ASSERT_TRUE(v1::AgentService::NewStub(Channel("host-a"))
                  ->Register(Context().get(), RegisterRequest("host-a"), &registered)
                  .ok());
  // Refused calls change nothing and leave no record.
  ASSERT_FALSE(Tag("viewer", "vm-9").ok());

  std::string out;
  ASSERT_EQ(Csctl("viewer", {"audit", "-o", "json"}, &out), 0) << out;
  auto records = nlohmann::json::parse(out);
  ASSERT_EQ(records.size(), 3u) << out;  // the operator's retag changed nothing
  EXPECT_EQ(records[0]["method"], "Register");
  EXPECT_EQ(records[0]["who"], std::string(kDomain) + "/host/host-a");
  EXPECT_EQ(records[0]["role"], "host");
  EXPECT_EQ(records[1]["method"], "SetTenantPolicy");
  EXPECT_EQ(records[1]["who"], "cn:admin-1");
  EXPECT_EQ(records[1]["after"]["tenant_id"], "acme");
  EXPECT_EQ(records[2]["method"], "TagVM");
  EXPECT_EQ(records[2]["who"], std::string(kDomain) + "/user/op");
  EXPECT_EQ(records[2]["role"], "operator");
  EXPECT_TRUE(records[2]["before"].is_null());
  EXPECT_EQ(records[2]["after"]["vm_id"], "vm-1");
  EXPECT_GT(records[2]["revision"].get<int64_t>(), 0);

  ASSERT_EQ(Csctl("viewer", {"audit", "--vm", "vm-1"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("TagVM"));
  EXPECT_THAT(out, HasSubstr("/user/op"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("SetTenantPolicy")));

  // Reading the trail needs a role.
  EXPECT_EQ(Csctl("host-a", {"audit"}, &out), 1);
  EXPECT_THAT(out, HasSubstr("ListAuditRecords needs role viewer"));
}

// An agent whose host_id is not its certificate's host: csd refuses every
// call, and the agent says what to fix (not that csd is unreachable).
TEST_F(AuthzTest, AgentWithAnotherHostsIdIsToldToFixItsConfig) {
  agent::AgentOptions options = AgentOptionsWithCertOf("host-a");
  options.host_id = "host-b";
  options.core_sched = std::make_shared<host::FakeCoreSched>();
  options.vm_discovery = std::make_shared<discovery::StaticVmDiscovery>();
  agent::Agent agent(options);
  ASSERT_OK(agent.Start());
  // Bounded poll for the first refused Register, not a timing assertion.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (agent.csd_refusal().empty() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string refusal = agent.csd_refusal();
  EXPECT_THAT(refusal, HasSubstr("as host 'host-b'"));
  EXPECT_THAT(refusal, HasSubstr("host_id in cs-agent.yaml"));
  EXPECT_THAT(refusal, HasSubstr("spiffe://<csd trust_domain>/host/<host_id>"));
  agent.Stop();
}

TEST_F(AuthzTest, AgentOverMutualTlsRegistersAndEnforcesItsHost) {
  auto kernel = std::make_shared<host::FakeCoreSched>();
  auto discovery = std::make_shared<discovery::StaticVmDiscovery>();
  discovery::DiscoveredVm vm;
  vm.vm_id = "vm-1";
  vm.qemu_pid = 100;
  vm.threads = {{100, 100, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator},
                {101, 100, "CPU 0/KVM", discovery::DiscoveredThread::Kind::kVcpu}};
  for (const auto& t : vm.threads) kernel->AddTask(t.tid, 100);
  discovery->SetVms({vm});

  agent::AgentOptions options = AgentOptionsWithCertOf("host-a");
  options.host_id = "host-a";
  options.session.report_interval = std::chrono::milliseconds(100);
  options.loop.rescan_interval = std::chrono::milliseconds(100);
  options.core_sched = kernel;
  options.vm_discovery = discovery;
  agent::Agent agent(options);
  ASSERT_OK(agent.Start());

  // Once the agent's report placed vm-1 on host-a, a tag reaches it.
  auto admin = v1::ControlPlane::NewStub(Channel("admin"));
  auto placed = [&] {
    v1::TagVMRequest request;
    request.set_vm_id("vm-1");
    v1::TagVMResponse response;
    grpc::Status status = admin->TagVM(Context().get(), request, &response);
    EXPECT_OK(status) << status.error_message();
    return response.vm().host_id() == "host-a";
  };
  // Bounded poll for the agent's first report, not a timing assertion.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!placed() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  v1::GetVMRequest get;
  get.set_vm_id("vm-1");
  v1::VM got;
  ASSERT_OK(admin->GetVM(Context().get(), get, &got));
  ASSERT_EQ(got.host_id(), "host-a");
  EXPECT_TRUE(agent.WaitForRevision(got.assignment().revision(), std::chrono::seconds(30)));
  ASSERT_TRUE(agent.FindAssignment("vm-1").has_value());
  EXPECT_EQ(agent.csd_refusal(), "") << "a host csd accepts is not refused";
  agent.Stop();
}

}  // namespace
}  // namespace cosched
