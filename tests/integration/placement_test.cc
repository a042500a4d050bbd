// Place and ExplainVM against a real in-process csd (durable store,
// ephemeral loopback port): hosts register their topology and report VMs
// as agents would, VMs are tagged through the ControlPlane, and the answers
// are checked against what the placement rules and the policy engine say.
// Also csctl place / explain on top of it.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <sstream>
#include <tuple>

#include "cli/csctl.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "policy/tradeoff.h"
#include "tests/testing/mini_cluster.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }

  void Start(const std::string& plaintext_role = "admin") {
    testing::MiniClusterOptions options;
    options.csd.authz.plaintext_role = plaintext_role;
    options.csd.class_conflicts = {{"avx512", "latency-critical"}};
    auto cluster = testing::MiniCluster::Start(std::move(options));
    ASSERT_OK(cluster);
    cluster_ = std::move(*cluster);
  }

  // csd again on the same data dir, with another plaintext role.
  void Restart(const std::string& plaintext_role = "admin") {
    cluster_->csd_options().authz.plaintext_role = plaintext_role;
    ASSERT_OK(cluster_->RestartCsd());
  }

  v1::ControlPlane::Stub& control() { return cluster_->control(); }
  v1::AgentService::Stub& agent_service() { return cluster_->agent_service(); }

  // `cores` cores of two siblings, numbered like Linux on x86 (core c has
  // CPUs c and c + cores), so that CPU ids differ from core indexes.
  // With `smt` false, one CPU per core (a host booted with nosmt).
  void Register(const std::string& host, int cores, bool smt = true) {
    v1::RegisterRequest request;
    request.set_host_id(host);
    for (int c = 0; c < cores; ++c) {
      v1::Core* core = request.mutable_topology()->add_cores();
      core->set_core_id(c);
      core->add_cpus(c);
      if (smt) core->add_cpus(c + cores);
    }
    request.mutable_capabilities()->set_smt_active(smt);
    // What the agent of a core-scheduling kernel says (with SMT off it
    // says ENODEV: no siblings to keep apart).
    request.mutable_capabilities()->set_core_sched(
        smt ? v1::CORE_SCHED_SUPPORT_SUPPORTED : v1::CORE_SCHED_SUPPORT_NO_SMT);
    grpc::ClientContext context;
    v1::RegisterResponse response;
    grpc::Status s = agent_service().Register(&context, request, &response);
    ASSERT_OK(s) << s.error_message();
  }

  // The host's agent reports `vms` (id, vCPUs).
  void Report(const std::string& host, const std::vector<std::pair<std::string, int>>& vms) {
    v1::ReportRequest request;
    request.set_host_id(host);
    for (const auto& [id, vcpus] : vms) {
      v1::VMObservation* o = request.add_vms();
      o->set_vm_id(id);
      o->mutable_enforcement()->set_vcpus(vcpus);
    }
    grpc::ClientContext context;
    v1::ReportResponse response;
    grpc::Status s = agent_service().Report(&context, request, &response);
    ASSERT_OK(s) << s.error_message();
  }

  void Tag(const std::string& vm, const std::string& tenant, v1::IsolationLevel level,
           std::vector<std::string> classes = {}) {
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id(tenant);
    request.set_isolation(level);
    for (auto& c : classes) request.add_interference_classes(c);
    grpc::ClientContext context;
    v1::TagVMResponse response;
    grpc::Status s = control().TagVM(&context, request, &response);
    ASSERT_OK(s) << s.error_message();
  }

  void SetPolicy(const std::string& tenant, v1::IsolationLevel level,
                 std::optional<double> budget = std::nullopt) {
    v1::SetTenantPolicyRequest request;
    request.mutable_policy()->set_tenant_id(tenant);
    request.mutable_policy()->set_default_isolation(level);
    if (budget) request.mutable_policy()->set_forced_idle_budget_pct(*budget);
    grpc::ClientContext context;
    v1::TenantPolicy response;
    grpc::Status s = control().SetTenantPolicy(&context, request, &response);
    ASSERT_OK(s) << s.error_message();
  }

  grpc::Status Place(const v1::PlaceRequest& request, v1::PlaceResponse* response) {
    grpc::ClientContext context;
    return control().Place(&context, request, response);
  }

  grpc::Status Explain(const std::string& vm, v1::ExplainVMResponse* response) {
    grpc::ClientContext context;
    v1::ExplainVMRequest request;
    request.set_vm_id(vm);
    return control().ExplainVM(&context, request, response);
  }

  static v1::PlaceRequest Request(int vcpus, v1::IsolationLevel level,
                                  std::vector<std::string> classes = {}) {
    v1::PlaceRequest r;
    r.set_tenant_id("acme");
    r.set_vcpus(vcpus);
    r.set_isolation(level);
    for (auto& c : classes) r.add_interference_classes(c);
    return r;
  }

  int Csctl(std::vector<std::string> args, std::string* out) {
    std::vector<std::string> argv = {"csctl", "--server", cluster_->csd_address()};
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

  // host-a: 5 cores, 3 of them taken by a dedicated 6-vCPU VM, so one can
  // still be given away (one always stays shared, as the agent keeps it).
  // host-b: 3 cores, empty: two can be given away.
  void TwoHosts() {
    Register("host-a", 5);
    Register("host-b", 3);
    Tag("gold", "bank", v1::ISOLATION_LEVEL_DEDICATED);
    Report("host-a", {{"gold", 6}});
  }

  std::unique_ptr<testing::MiniCluster> cluster_;
};

TEST_F(PlacementTest, DedicatedGoesWhereWholeCoresAreFree) {
  TwoHosts();
  v1::PlaceResponse r;
  ASSERT_OK(Place(Request(4, v1::ISOLATION_LEVEL_DEDICATED), &r));
  // host-a has one core to give left; host-b has the two a 4-vCPU VM needs.
  EXPECT_EQ(r.host_id(), "host-b");
  EXPECT_THAT(r.cores(), ElementsAre(0, 1));
  EXPECT_THAT(r.cpus(), ElementsAre(0, 1, 3, 4));  // both siblings of each
  EXPECT_EQ(r.isolation(), v1::ISOLATION_LEVEL_DEDICATED);
  ASSERT_EQ(r.candidates_size(), 1);
  EXPECT_EQ(r.candidates(0).host_id(), "host-b");
  EXPECT_THAT(r.reason(), HasSubstr("aligned to whole cores"));

  // Two vCPUs fit the core left on host-a too: both are ranked.
  ASSERT_OK(Place(Request(2, v1::ISOLATION_LEVEL_DEDICATED), &r));
  EXPECT_EQ(r.candidates_size(), 2);
  // Best fit: host-a's last core to give (core 3: CPUs 3 and 8).
  EXPECT_EQ(r.host_id(), "host-a");
  EXPECT_THAT(r.cpus(), ElementsAre(3, 8));

  // Six vCPUs: no host has three cores to give.
  grpc::Status s = Place(Request(6, v1::ISOLATION_LEVEL_DEDICATED), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("2 without 3 whole free cores"));
}

// A host with SMT off has one CPU per core: a dedicated VM needs a whole
// core per vCPU there, and gets as many CPUs as it has vCPUs.
TEST_F(PlacementTest, DedicatedOnAHostWithSmtOffGetsACpuPerVcpu) {
  Register("nosmt", 3, /*smt=*/false);
  v1::PlaceResponse r;
  ASSERT_OK(Place(Request(2, v1::ISOLATION_LEVEL_DEDICATED), &r));
  EXPECT_EQ(r.host_id(), "nosmt");
  EXPECT_THAT(r.cores(), ElementsAre(0, 1));
  EXPECT_THAT(r.cpus(), ElementsAre(0, 1));
  grpc::Status s = Place(Request(3, v1::ISOLATION_LEVEL_DEDICATED), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("1 without enough whole free cores"));
  // SMT turned on at the next boot: the same host id, two CPUs per core.
  Register("nosmt", 3, /*smt=*/true);
  ASSERT_OK(Place(Request(3, v1::ISOLATION_LEVEL_DEDICATED), &r));
  EXPECT_THAT(r.cpus(), ElementsAre(0, 1, 3, 4));
}

TEST_F(PlacementTest, UntagAndMovesFreeCores) {
  TwoHosts();
  // The dedicated VM leaves host-a (its agent no longer reports it).
  Report("host-a", {});
  v1::PlaceResponse r;
  ASSERT_OK(Place(Request(8, v1::ISOLATION_LEVEL_DEDICATED), &r));
  EXPECT_EQ(r.host_id(), "host-a");
  EXPECT_EQ(r.cores_size(), 4);
  // It comes back, then is untagged: the cores are free again.
  Report("host-a", {{"gold", 6}});
  EXPECT_EQ(Place(Request(8, v1::ISOLATION_LEVEL_DEDICATED), &r).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  grpc::ClientContext context;
  v1::UntagVMRequest untag;
  untag.set_vm_id("gold");
  v1::UntagVMResponse ignored;
  ASSERT_OK(control().UntagVM(&context, untag, &ignored));
  EXPECT_OK(Place(Request(8, v1::ISOLATION_LEVEL_DEDICATED), &r));
}

TEST_F(PlacementTest, UnpinnedVmsAvoidConflictingClasses) {
  Register("avx-host", 8);
  Register("quiet-host", 8);
  Tag("gemm", "hpc", v1::ISOLATION_LEVEL_VM, {"avx512"});
  Report("avx-host", {{"gemm", 4}});
  Tag("batch", "other", v1::ISOLATION_LEVEL_VM);
  // quiet-host is busier, so only the conflict keeps the VM off avx-host.
  Report("quiet-host", {{"batch", 8}});

  v1::PlaceRequest request = Request(2, v1::ISOLATION_LEVEL_VM, {"latency-critical"});
  request.set_pin(false);
  v1::PlaceResponse r;
  ASSERT_OK(Place(request, &r));
  EXPECT_EQ(r.host_id(), "quiet-host");
  EXPECT_TRUE(r.cores().empty());
  ASSERT_EQ(r.candidates_size(), 1);

  // Without the conflicting class, the emptier avx-host wins.
  request.clear_interference_classes();
  ASSERT_OK(Place(request, &r));
  EXPECT_EQ(r.host_id(), "avx-host");

  // Only the conflicting host left: refused, naming the constraint.
  Report("quiet-host", {});
  grpc::ClientContext context;
  v1::UntagVMRequest untag;
  untag.set_vm_id("batch");
  v1::UntagVMResponse ignored;
  ASSERT_OK(control().UntagVM(&context, untag, &ignored));
  Register("quiet-host", 0);  // its agent now reports no topology
  request.add_interference_classes("latency-critical");
  grpc::Status s = Place(request, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("1 with a conflicting class"));
}

TEST_F(PlacementTest, RefusesBadInputNamingTheField) {
  Register("host-a", 4);
  struct Case {
    std::function<void(v1::PlaceRequest&)> mutate;
    std::string field;
  };
  std::vector<Case> cases = {
      {[](v1::PlaceRequest& r) { r.set_vcpus(0); }, "vcpus must be between 1 and 1024"},
      {[](v1::PlaceRequest& r) { r.set_vcpus(1025); }, "vcpus must be between 1 and 1024"},
      {[](v1::PlaceRequest& r) { r.set_tenant_id("bad tenant"); }, "tenant_id"},
      {[](v1::PlaceRequest& r) { r.add_interference_classes("no/slash"); },
       "interference_classes"},
      {[](v1::PlaceRequest& r) { r.set_isolation(static_cast<v1::IsolationLevel>(42)); },
       "isolation must be one of"},
      {[](v1::PlaceRequest& r) { r.set_load(1.5); }, "load must be between 0 and 1"},
      {[](v1::PlaceRequest& r) { r.set_load(std::nan("")); }, "load must be between 0 and 1"},
  };
  for (const Case& c : cases) {
    v1::PlaceRequest request = Request(2, v1::ISOLATION_LEVEL_VM);
    c.mutate(request);
    v1::PlaceResponse r;
    grpc::Status s = Place(request, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_THAT(s.error_message(), HasSubstr(c.field));
  }
  // A level the tenant's policy forbids.
  v1::SetTenantPolicyRequest set;
  set.mutable_policy()->set_tenant_id("acme");
  set.mutable_policy()->set_default_isolation(v1::ISOLATION_LEVEL_VM);
  set.mutable_policy()->add_allowed_isolation(v1::ISOLATION_LEVEL_VM);
  grpc::ClientContext context;
  v1::TenantPolicy stored;
  ASSERT_OK(control().SetTenantPolicy(&context, set, &stored));
  v1::PlaceResponse r;
  grpc::Status s = Place(Request(2, v1::ISOLATION_LEVEL_DEDICATED), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("'dedicated' is not allowed"));
  // Unset level: the tenant's default.
  ASSERT_OK(Place(Request(2, v1::ISOLATION_LEVEL_UNSPECIFIED), &r));
  EXPECT_EQ(r.isolation(), v1::ISOLATION_LEVEL_VM);
}

TEST_F(PlacementTest, NoHostsIsResourceExhausted) {
  v1::PlaceResponse r;
  grpc::Status s = Place(Request(2, v1::ISOLATION_LEVEL_VM), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("no host"));
}

TEST_F(PlacementTest, ViewerMayExplainButNotPlace) {
  TwoHosts();
  Restart("viewer");
  v1::PlaceResponse r;
  grpc::Status s = Place(Request(2, v1::ISOLATION_LEVEL_VM), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("Place needs role operator"));
  v1::ExplainVMResponse e;
  EXPECT_OK(Explain("gold", &e));
}

TEST_F(PlacementTest, PlacementViewSurvivesRestart) {
  TwoHosts();
  Register("host-c", 8);
  Tag("web-1", "acme", v1::ISOLATION_LEVEL_TENANT, {"web"});
  Tag("web-2", "acme", v1::ISOLATION_LEVEL_TENANT, {"web"});
  Tag("db", "other", v1::ISOLATION_LEVEL_VM);
  Report("host-c", {{"web-1", 2}, {"web-2", 4}, {"db", 3}});
  std::vector<v1::PlaceRequest> requests = {
      Request(2, v1::ISOLATION_LEVEL_DEDICATED), Request(4, v1::ISOLATION_LEVEL_VM),
      Request(3, v1::ISOLATION_LEVEL_TENANT, {"web"})};
  requests[2].set_pin(false);
  std::vector<std::string> before;
  for (const auto& request : requests) {
    v1::PlaceResponse r;
    ASSERT_OK(Place(request, &r));
    before.push_back(r.ShortDebugString());
  }
  Restart();
  for (size_t i = 0; i < requests.size(); ++i) {
    v1::PlaceResponse r;
    ASSERT_OK(Place(requests[i], &r));
    EXPECT_EQ(r.ShortDebugString(), before[i]) << i;
  }
}

TEST_F(PlacementTest, ExplainReturnsTheEnginesDecision) {
  Register("host-a", 4);
  SetPolicy("acme", v1::ISOLATION_LEVEL_TENANT, 20);
  SetPolicy("bank", v1::ISOLATION_LEVEL_VM, 35);
  Tag("web-1", "acme", v1::ISOLATION_LEVEL_UNSPECIFIED);
  Tag("web-2", "acme", v1::ISOLATION_LEVEL_UNSPECIFIED);
  Tag("ledger", "bank", v1::ISOLATION_LEVEL_UNSPECIFIED);
  Report("host-a", {{"web-1", 2}, {"web-2", 2}, {"ledger", 4}});

  v1::ExplainVMResponse e;
  grpc::Status s = Explain("web-1", &e);
  ASSERT_OK(s) << s.error_message();

  // The same host as a scenario, planned by the engine directly.
  policy::Scenario scenario;
  scenario.name = "host-a";
  scenario.duration_s = 5;
  scenario.cores = 4;
  scenario.conflicts = {{"avx512", "latency-critical"}};
  for (const auto& [vm, tenant, vcpus] :
       std::vector<std::tuple<std::string, std::string, int>>{
           {"ledger", "bank", 4}, {"web-1", "acme", 2}, {"web-2", "acme", 2}}) {
    policy::VmSpec spec;
    spec.name = vm;
    spec.tenant = tenant;
    spec.vcpus = vcpus;
    scenario.vms.push_back(spec);
  }
  for (const auto& [tenant, level, budget] :
       std::vector<std::tuple<std::string, v1::IsolationLevel, double>>{
           {"acme", v1::ISOLATION_LEVEL_TENANT, 20}, {"bank", v1::ISOLATION_LEVEL_VM, 35}}) {
    policy::TenantSpec spec;
    spec.policy.set_tenant_id(tenant);
    spec.policy.set_default_isolation(level);
    spec.forced_idle_budget_pct = budget;
    scenario.tenants.push_back(spec);
  }
  auto plan = policy::PlanHost(scenario);
  ASSERT_OK(plan);
  const policy::VmDecision& d = plan->vms[1];
  ASSERT_EQ(d.vm, "web-1");

  EXPECT_EQ(e.host_id(), "host-a");
  EXPECT_EQ(e.host_vms(), 3);
  EXPECT_EQ(e.vcpus(), 2);
  EXPECT_DOUBLE_EQ(e.load(), 1.0);  // no stats reported
  EXPECT_EQ(e.isolation(), d.isolation);
  EXPECT_EQ(e.isolation(), v1::ISOLATION_LEVEL_TENANT);
  EXPECT_EQ(e.trust_group(), d.trust_group);
  std::vector<int> pins(e.pin_cpus().begin(), e.pin_cpus().end());
  std::vector<int> expected_pins = d.pin_cpus;  // same numbering as the host
  std::sort(expected_pins.begin(), expected_pins.end());
  EXPECT_EQ(pins, expected_pins);
  EXPECT_EQ(std::vector<std::string>(e.reasons().begin(), e.reasons().end()), d.reasons);
  EXPECT_EQ(e.chosen_layout(), plan->chosen);
  EXPECT_EQ(e.layouts_size(), static_cast<int>(plan->candidates.size()));
  // The least of the tenants' budgets.
  ASSERT_TRUE(e.has_forced_idle_budget_pct());
  EXPECT_DOUBLE_EQ(e.forced_idle_budget_pct(), 20);
  EXPECT_EQ(e.current().isolation(), v1::ISOLATION_LEVEL_TENANT);

  // Unknown VM; VM no agent reported.
  EXPECT_EQ(Explain("nope", &e).error_code(), grpc::StatusCode::NOT_FOUND);
  Tag("pending", "acme", v1::ISOLATION_LEVEL_VM);
  s = Explain("pending", &e);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("on no host"));
  EXPECT_EQ(Explain("bad id", &e).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(PlacementTest, CsctlPlaceAndExplain) {
  TwoHosts();
  std::string out;
  ASSERT_EQ(Csctl({"place", "--vcpus", "4", "--tenant", "acme", "--isolation",
                   "dedicated", "-o", "json"},
                  &out),
            0)
      << out;
  auto json = nlohmann::json::parse(out);
  EXPECT_EQ(json["host_id"], "host-b");
  EXPECT_EQ(json["cpus"], nlohmann::json({0, 1, 3, 4}));
  EXPECT_EQ(json["isolation"], "dedicated");
  EXPECT_EQ(json["candidates"].size(), 1u);

  ASSERT_EQ(Csctl({"place", "--vcpus", "2", "--tenant", "acme", "--no-pin",
                   "--class", "web", "--load", "0.5"},
                  &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("host:"));
  EXPECT_THAT(out, HasSubstr("(not pinned)"));
  EXPECT_THAT(out, HasSubstr("RANK"));

  EXPECT_EQ(Csctl({"place", "--vcpus", "0"}, &out), cli::kExitUsage);
  EXPECT_THAT(out, HasSubstr("--vcpus must be between 1 and 1024"));
  EXPECT_EQ(Csctl({"place", "--vcpus", "2", "--load", "3"}, &out), cli::kExitUsage);
  EXPECT_THAT(out, HasSubstr("--load must be between 0 and 1"));
  EXPECT_EQ(Csctl({"place", "--vcpus", "64", "--isolation", "dedicated"}, &out),
            cli::kExitRpcError);
  EXPECT_THAT(out, HasSubstr("no host can take a 64-vCPU VM"));

  ASSERT_EQ(Csctl({"explain", "gold", "-o", "json"}, &out), 0) << out;
  json = nlohmann::json::parse(out);
  EXPECT_EQ(json["vm_id"], "gold");
  EXPECT_EQ(json["host_id"], "host-a");
  EXPECT_EQ(json["current"]["isolation"], "dedicated");
  EXPECT_EQ(json["vcpus"], 6);
  EXPECT_FALSE(json["proposed_reasons"].empty());
  EXPECT_TRUE(json["forced_idle_budget_pct"].is_null());

  ASSERT_EQ(Csctl({"explain", "gold"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("trust group:"));
  EXPECT_THAT(out, HasSubstr("LAYOUT"));
  EXPECT_EQ(Csctl({"explain", "nope"}, &out), cli::kExitRpcError);
  EXPECT_THAT(out, HasSubstr("vm 'nope' is not tagged"));
  EXPECT_EQ(Csctl({"explain"}, &out), cli::kExitUsage);

  // The tenant budget round-trips through csctl policy.
  ASSERT_EQ(Csctl({"policy", "set", "acme", "--default", "vm", "--forced-idle-budget",
                   "12.5", "-o", "json"},
                  &out),
            0)
      << out;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(out)["forced_idle_budget_pct"].get<double>(), 12.5);
  ASSERT_EQ(Csctl({"policy", "get", "acme"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("12.5%"));
  ASSERT_EQ(Csctl({"policy", "ls"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("IDLE-BUDGET"));
  EXPECT_EQ(Csctl({"policy", "set", "acme", "--default", "vm", "--forced-idle-budget",
                   "101"},
                  &out),
            cli::kExitUsage);
  EXPECT_THAT(out, HasSubstr("--forced-idle-budget must be between 0 and 100"));
}

TEST_F(PlacementTest, CsctlHostsDrainUndrainAndRemove) {
  Register("host-a", 4);
  Register("host-b", 4);
  Tag("web-1", "acme", v1::ISOLATION_LEVEL_VM);
  Report("host-a", {{"web-1", 2}});
  Report("host-b", {});
  std::string out;
  ASSERT_EQ(Csctl({"hosts", "drain", "host-b"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("host-b is draining"));
  ASSERT_EQ(Csctl({"hosts", "get", "host-b", "-o", "json"}, &out), 0) << out;
  auto json = nlohmann::json::parse(out);
  EXPECT_EQ(json["draining"], true);
  EXPECT_EQ(json["unplaceable_reason"], "draining");
  ASSERT_EQ(Csctl({"hosts", "ls"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("DRAINING"));
  for (int i = 0; i < 3; ++i) {
    v1::PlaceResponse placed;
    ASSERT_OK(Place(Request(2, v1::ISOLATION_LEVEL_VM), &placed));
    EXPECT_EQ(placed.host_id(), "host-a");
  }
  ASSERT_EQ(Csctl({"hosts", "undrain", "host-b"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("no longer draining"));

  // Removal is refused while the host reports VMs, and says which.
  EXPECT_EQ(Csctl({"hosts", "rm", "host-a"}, &out), cli::kExitRpcError);
  EXPECT_THAT(out, HasSubstr("web-1"));
  ASSERT_EQ(Csctl({"hosts", "rm", "host-b", "-o", "json"}, &out), 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["host_id"], "host-b");
  EXPECT_EQ(Csctl({"hosts", "get", "host-b"}, &out), cli::kExitRpcError);
  EXPECT_THAT(out, HasSubstr("not found"));
  for (const char* verb : {"drain", "undrain", "rm"}) {
    EXPECT_EQ(Csctl({"hosts", verb, "nope"}, &out), cli::kExitRpcError) << verb;
    EXPECT_THAT(out, HasSubstr("not found"));
  }
  EXPECT_EQ(Csctl({"hosts", "drain", "bad id!"}, &out), cli::kExitUsage);
  EXPECT_THAT(out, HasSubstr("host_id"));
}

// A host with SMT on and no usable core scheduling is never chosen for a VM
// that needs isolation, whatever its room.
TEST_F(PlacementTest, HostsThatCannotIsolateAreNeverChosen) {
  v1::RegisterRequest request;
  request.set_host_id("old-kernel");
  for (int c = 0; c < 8; ++c) {
    v1::Core* core = request.mutable_topology()->add_cores();
    core->add_cpus(c);
    core->add_cpus(c + 8);
  }
  request.mutable_capabilities()->set_smt_active(true);
  request.mutable_capabilities()->set_core_sched(v1::CORE_SCHED_SUPPORT_NO_KERNEL_SUPPORT);
  {
    grpc::ClientContext context;
    v1::RegisterResponse response;
    ASSERT_OK(agent_service().Register(&context, request, &response));
  }
  Register("small", 2);
  for (v1::IsolationLevel level : {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}) {
    v1::PlaceResponse placed;
    grpc::Status s = Place(Request(2, level), &placed);
    ASSERT_OK(s) << s.error_message();
    EXPECT_EQ(placed.host_id(), "small");
  }
  v1::PlaceResponse placed;
  grpc::Status s = Place(Request(4, v1::ISOLATION_LEVEL_DEDICATED), &placed);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("1 unable to isolate"));
}

}  // namespace
}  // namespace cosched
