// The policy engine end to end on a mini cluster: csd regroups an auto
// tenant's VMs, the agent puts them on one cookie, a fixed tenant's VM and
// an operator-tagged VM keep theirs, a restarted csd holds the decisions,
// and a TagVM racing the re-plan it triggers is not lost.
#include <chrono>
#include <map>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "nlohmann/json.hpp"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/mini_cluster.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::MiniClusterOptions options;
    // Every change the engine sees is applied at once: the test is about
    // the path, the hysteresis has its own tests.
    options.csd.engine.hysteresis.min_dwell = 0s;
    auto cluster = testing::MiniCluster::Start(std::move(options));
    ASSERT_OK(cluster);
    cluster_ = std::move(*cluster);
    testing::MiniHostOptions host;
    host.host_id = "hv-1";
    auto added = cluster_->AddHost(host);
    ASSERT_OK(added);
    host_ = *added;
  }

  void SetPolicy(const std::string& tenant, v1::PolicyMode mode) {
    v1::SetTenantPolicyRequest request;
    request.mutable_policy()->set_tenant_id(tenant);
    request.mutable_policy()->set_default_isolation(v1::ISOLATION_LEVEL_VM);
    request.mutable_policy()->add_allowed_isolation(v1::ISOLATION_LEVEL_VM);
    request.mutable_policy()->add_allowed_isolation(v1::ISOLATION_LEVEL_TENANT);
    request.mutable_policy()->set_mode(mode);
    v1::TenantPolicy stored;
    grpc::ClientContext context;
    ASSERT_OK(cluster_->control().SetTenantPolicy(&context, request, &stored));
  }

  void Tag(const std::string& vm, const std::string& tenant,
           v1::IsolationLevel level = v1::ISOLATION_LEVEL_UNSPECIFIED,
           const std::vector<std::string>& classes = {}) {
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id(tenant);
    request.set_isolation(level);
    for (const std::string& c : classes) request.add_interference_classes(c);
    v1::TagVMResponse response;
    grpc::ClientContext context;
    ASSERT_OK(cluster_->control().TagVM(&context, request, &response));
  }

  v1::VM GetVm(const std::string& id) {
    v1::GetVMRequest request;
    request.set_vm_id(id);
    v1::VM vm;
    grpc::ClientContext context;
    (void)cluster_->control().GetVM(&context, request, &vm);
    return vm;
  }

  std::unique_ptr<testing::MiniCluster> cluster_;
  testing::MiniHost* host_ = nullptr;
};

TEST_F(EngineTest, AnAutoTenantIsRegroupedAndRestartedCsdHoldsTheDecisions) {
  SetPolicy("acme", v1::POLICY_MODE_AUTO);
  SetPolicy("globex", v1::POLICY_MODE_FIXED);
  // Six busy single-vCPU VMs on 2 cores of 2 threads.
  const std::vector<std::string> managed = {"a-1", "a-2", "a-3", "a-4"};
  std::map<std::string, int> pid;
  int next_pid = 1000;
  for (const char* vm : {"a-1", "a-2", "a-3", "a-4", "a-op", "g-1"}) {
    pid[vm] = next_pid;
    host_->AddVm(vm, next_pid, 1);
    next_pid += 10;
  }
  Tag("a-op", "acme", v1::ISOLATION_LEVEL_VM);
  Tag("g-1", "globex");
  for (const std::string& vm : managed) Tag(vm, "acme");
  // Races the re-plan the tags above triggered: a-3 gets a class.
  Tag("a-3", "acme", v1::ISOLATION_LEVEL_UNSPECIFIED, {"avx512"});

  ASSERT_TRUE(Eventually(
      [&] {
        return GetVm("a-1").assignment().trust_group() == "acme/tenant" &&
               GetVm("a-3").assignment().trust_group() == "acme/tenant/avx512";
      },
      20s))
      << GetVm("a-1").DebugString() << GetVm("a-3").DebugString();
  for (const std::string& vm : managed) {
    EXPECT_EQ(GetVm(vm).decision().decided_by(), v1::DECIDED_BY_ENGINE) << vm;
  }
  EXPECT_EQ(GetVm("a-3").interference_classes_size(), 1) << "the racing TagVM is kept";
  EXPECT_EQ(GetVm("a-op").assignment().trust_group(), "acme/vm/a-op");
  EXPECT_EQ(GetVm("g-1").assignment().trust_group(), "globex/vm/g-1");

  // The agent enforces the engine's groups: one cookie for a-1, a-2, a-4.
  ASSERT_TRUE(Eventually([&] {
    const uint64_t acme = host_->VmCookie(pid["a-1"]);
    return acme != 0 && host_->VmCookie(pid["a-2"]) == acme &&
           host_->VmCookie(pid["a-4"]) == acme && host_->VmCookie(pid["a-3"]) != 0 &&
           host_->VmCookie(pid["a-3"]) != acme && host_->VmCookie(pid["a-op"]) != 0 &&
           host_->VmCookie(pid["a-op"]) != acme && host_->VmCookie(pid["g-1"]) != 0 &&
           host_->VmCookie(pid["g-1"]) != acme &&
           host_->VmCookie(pid["g-1"]) != host_->VmCookie(pid["a-op"]);
  }));

  // csctl plan --report: the host's applied plan, predicted against measured.
  auto report = [&] {
    cli::CommandOptions json;
    json.server = cluster_->csd_address();
    json.format = cli::OutputFormat::kJson;
    std::ostringstream out, err;
    EXPECT_EQ(cli::RunPlan(cluster_->control(), {.report = true}, json, out, err), cli::kExitOk)
        << err.str();
    return nlohmann::json::parse(out.str());
  };
  nlohmann::json reported = report();
  ASSERT_EQ(reported["hosts"].size(), 1u) << reported.dump();
  EXPECT_EQ(reported["hosts"][0]["host_id"], "hv-1");
  EXPECT_GE(reported["hosts"][0]["vms"].get<int>(), 1);
  EXPECT_GT(reported["hosts"][0]["predicted"]["gain"].get<double>(), 0);
  EXPECT_EQ(reported["summary"]["hosts"], 1);

  std::map<std::string, int64_t> revisions;
  for (const std::string& vm : managed) revisions[vm] = GetVm(vm).assignment().revision();
  cluster_->StopCsd();
  ASSERT_OK(cluster_->RestartCsd());
  // The agent is back and has reported to the new csd (which re-plans the
  // host on that Report): the engine would change nothing (its next move,
  // a pinning, does not pay), and nothing changed.
  ASSERT_TRUE(Eventually([&] {
    v1::GetHostRequest request;
    request.set_host_id("hv-1");
    v1::Host host;
    grpc::ClientContext context;
    return cluster_->control().GetHost(&context, request, &host).ok() && host.connected();
  }));
  v1::PlanResponse plan;
  grpc::ClientContext context;
  ASSERT_OK(cluster_->control().Plan(&context, v1::PlanRequest(), &plan));
  ASSERT_EQ(plan.hosts_size(), 1);
  EXPECT_FALSE(plan.hosts(0).would_apply()) << plan.DebugString();
  for (const std::string& vm : managed) {
    const v1::VM now = GetVm(vm);
    EXPECT_EQ(now.assignment().revision(), revisions[vm]) << vm;
    EXPECT_EQ(now.decision().decided_by(), v1::DECIDED_BY_ENGINE) << vm;
  }
  EXPECT_EQ(GetVm("a-1").assignment().trust_group(), "acme/tenant");
  // The plan's prediction and baseline are in the store: the report holds
  // them after the restart.
  nlohmann::json after = report();
  ASSERT_EQ(after["hosts"].size(), 1u) << after.dump();
  EXPECT_EQ(after["hosts"][0]["decided_at"], reported["hosts"][0]["decided_at"]);
  EXPECT_EQ(after["hosts"][0]["predicted"], reported["hosts"][0]["predicted"]);
  EXPECT_EQ(after["hosts"][0]["before"], reported["hosts"][0]["before"]);
}

TEST_F(EngineTest, ADryRunIsPlannedAndShownWithCsctlAndAppliesNothing) {
  cli::CommandOptions csctl;
  csctl.server = cluster_->csd_address();
  cli::CommandOptions json = csctl;
  json.format = cli::OutputFormat::kJson;
  std::ostringstream out, err;
  // csctl policy set acme --default vm --allow vm,tenant --mode auto --no-apply
  ASSERT_EQ(cli::RunPolicySet(cluster_->control(),
                              {.tenant_id = "acme",
                               .default_isolation = "vm",
                               .allowed_isolation = {"vm", "tenant"},
                               .mode = "auto",
                               .no_apply = true},
                              csctl, out, err),
            cli::kExitOk)
      << err.str();
  const std::vector<std::string> vms = {"a-1", "a-2", "a-3", "a-4"};
  std::vector<int> pids;
  for (size_t i = 0; i < vms.size(); ++i) {
    pids.push_back(2000 + 10 * static_cast<int>(i));
    host_->AddVm(vms[i], pids.back(), 1);
    Tag(vms[i], "acme");
  }
  // The agent reports every VM enforced in the operator's layout (a group
  // per VM), and each Report re-planned the host.
  ASSERT_TRUE(Eventually([&] {
    for (const std::string& vm : vms) {
      const v1::VM got = GetVm(vm);
      if (got.host_id() != "hv-1" ||
          got.enforcement().applied_trust_group() != "acme/vm/" + vm) {
        return false;
      }
    }
    return true;
  }));
  std::set<uint64_t> cookies;
  for (int pid : pids) cookies.insert(host_->VmCookie(pid));
  EXPECT_EQ(cookies.size(), vms.size());
  const int64_t revision = GetVm("a-1").assignment().revision();

  std::ostringstream planned;
  ASSERT_EQ(cli::RunPlan(cluster_->control(), {.dry_run = true, .tenant_id = "acme"}, json,
                         planned, err),
            cli::kExitOk)
      << err.str();
  nlohmann::json plan = nlohmann::json::parse(planned.str());
  ASSERT_EQ(plan.size(), 1u) << plan.dump();
  EXPECT_EQ(plan[0]["host_id"], "hv-1");
  EXPECT_EQ(plan[0]["changes"].size(), 4u);
  EXPECT_EQ(plan[0]["changes"][0]["to"]["trust_group"], "acme/tenant");
  EXPECT_EQ(plan[0]["would_apply"], false);
  EXPECT_GT(plan[0]["predicted_gain"].get<double>(), 0.03);

  std::ostringstream explained;
  ASSERT_EQ(cli::RunExplainVm(cluster_->control(), "a-1", json, explained, err), cli::kExitOk)
      << err.str();
  nlohmann::json explain = nlohmann::json::parse(explained.str());
  EXPECT_EQ(explain["decided_by"], "operator");
  EXPECT_TRUE(explain["decided_at"].is_string());
  for (const char* key :
       {"decided_by", "decided_at", "reasons", "predicted", "measured", "proposed_reasons"}) {
    EXPECT_TRUE(explain.contains(key)) << key;
  }
  for (const std::string& vm : vms) {
    EXPECT_EQ(GetVm(vm).assignment().trust_group(), "acme/vm/" + vm);
  }
  EXPECT_EQ(GetVm("a-1").assignment().revision(), revision);

  // What held the plan back was the dry run alone.
  ASSERT_EQ(cli::RunPolicySet(cluster_->control(),
                              {.tenant_id = "acme",
                               .default_isolation = "vm",
                               .allowed_isolation = {"vm", "tenant"},
                               .mode = "auto"},
                              csctl, out, err),
            cli::kExitOk)
      << err.str();
  ASSERT_TRUE(Eventually([&] {
    uint64_t acme = host_->VmCookie(pids[0]);
    for (int pid : pids) {
      if (acme == 0 || host_->VmCookie(pid) != acme) return false;
    }
    return true;
  }));
  EXPECT_EQ(GetVm("a-4").decision().decided_by(), v1::DECIDED_BY_ENGINE);
}

}  // namespace
}  // namespace cosched
