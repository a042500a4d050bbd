// The hard rules (policy/layout_rules.h): each one caught when broken, and
// kept by the engine's own plans on randomly generated hosts.
#include "policy/layout_rules.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/trust_group.h"
#include "tests/testing/status_matchers.h"

namespace cosched::policy {
namespace {

using ::testing::HasSubstr;

v1::TenantPolicy Policy(const std::string& tenant, std::vector<v1::IsolationLevel> allowed) {
  v1::TenantPolicy p;
  p.set_tenant_id(tenant);
  p.set_default_isolation(allowed.front());
  for (auto level : allowed) p.add_allowed_isolation(level);
  return p;
}

// Two cores of two threads (CPUs 0,2 on core 0 and 1,3 on core 1); VMs
// a1, a2 of acme and g1 of globex, two vCPUs each.
Scenario Host() {
  Scenario s;
  s.cores = 2;
  s.threads_per_core = 2;
  for (auto [name, tenant] : {std::pair{"a1", "acme"}, {"a2", "acme"}, {"g1", "globex"}}) {
    VmSpec vm;
    vm.name = name;
    vm.tenant = tenant;
    vm.vcpus = 2;
    s.vms.push_back(vm);
  }
  s.tenants.push_back({Policy("acme", {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}), {}});
  s.tenants.push_back({Policy("globex", {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_DEDICATED}), {}});
  return s;
}

VmDecision D(const std::string& vm, const std::string& tenant, v1::IsolationLevel level,
             const std::string& group, std::vector<int> pins = {}) {
  VmDecision d;
  d.vm = vm;
  d.tenant = tenant;
  d.isolation = level;
  d.trust_group = group;
  d.pin_cpus = std::move(pins);
  return d;
}

constexpr auto kVm = v1::ISOLATION_LEVEL_VM;
constexpr auto kTenant = v1::ISOLATION_LEVEL_TENANT;
constexpr auto kDedicated = v1::ISOLATION_LEVEL_DEDICATED;

TEST(LayoutRulesTest, AcceptsALayoutThatKeepsEveryRule) {
  EXPECT_OK(CheckLayout(Host(), {D("a1", "acme", kTenant, "acme/tenant"),
                                 D("a2", "acme", kTenant, "acme/tenant"),
                                 D("g1", "globex", kVm, "globex/vm/g1")}));
}

TEST(LayoutRulesTest, RefusesTwoTenantsInOneGroup) {
  absl::Status s = CheckLayout(Host(), {D("a1", "acme", kTenant, "acme/tenant"),
                                        D("a2", "acme", kTenant, "acme/tenant"),
                                        D("g1", "globex", kVm, "acme/tenant")});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("VM 'g1' of tenant 'globex' is in group 'acme/tenant'"));
}

TEST(LayoutRulesTest, RefusesALevelTheTenantDoesNotAllow) {
  absl::Status s = CheckLayout(Host(), {D("a1", "acme", kVm, "acme/vm/a1"),
                                        D("a2", "acme", kVm, "acme/vm/a2"),
                                        D("g1", "globex", kTenant, "globex/tenant")});
  EXPECT_THAT(s.message(), HasSubstr("VM 'g1' is at level tenant, which tenant 'globex' does not allow"));
}

TEST(LayoutRulesTest, RefusesConflictingClassesInOneGroup) {
  Scenario host = Host();
  host.vms[0].classes = {"avx512"};
  host.vms[1].classes = {"latency-critical"};
  host.conflicts = {{"avx512", "latency-critical"}};
  absl::Status s = CheckLayout(host, {D("a1", "acme", kTenant, "acme/tenant"),
                                      D("a2", "acme", kTenant, "acme/tenant"),
                                      D("g1", "globex", kVm, "globex/vm/g1")});
  EXPECT_THAT(s.message(), HasSubstr("group 'acme/tenant' holds class 'avx512' (VM 'a1') and the "
                                     "conflicting class 'latency-critical' (VM 'a2')"));
  // Apart, they keep the rule.
  EXPECT_OK(CheckLayout(host, {D("a1", "acme", kTenant, "acme/tenant/avx512"),
                               D("a2", "acme", kTenant, "acme/tenant/latency-critical"),
                               D("g1", "globex", kVm, "globex/vm/g1")}));
}

TEST(LayoutRulesTest, DedicatedNeedsWholeCoresNobodyElseRunsOn) {
  const Scenario host = Host();
  // g1 on core 1 (CPUs 1 and 3), the others on core 0.
  EXPECT_OK(CheckLayout(host, {D("a1", "acme", kVm, "acme/vm/a1", {0, 2}),
                               D("a2", "acme", kVm, "acme/vm/a2", {0, 2}),
                               D("g1", "globex", kDedicated, "globex/dedicated/g1", {1, 3})}));
  // Its core's first thread only (a layout without SMT) is still its own.
  EXPECT_OK(CheckLayout(host, {D("a1", "acme", kVm, "acme/vm/a1", {0}),
                               D("a2", "acme", kVm, "acme/vm/a2", {0}),
                               D("g1", "globex", kDedicated, "globex/dedicated/g1", {1})}));
  // Spread over two cores, it holds neither whole.
  EXPECT_THAT(CheckLayout(host, {D("a1", "acme", kVm, "acme/vm/a1", {0, 2}),
                                 D("a2", "acme", kVm, "acme/vm/a2", {0, 2}),
                                 D("g1", "globex", kDedicated, "globex/dedicated/g1", {1, 2})})
                  .message(),
              HasSubstr("dedicated VM 'g1' of 2 vCPUs must hold exactly 1 whole cores; it is pinned to 2"));
  // Another VM may run there.
  EXPECT_THAT(CheckLayout(host, {D("a1", "acme", kVm, "acme/vm/a1", {0, 3}),
                                 D("a2", "acme", kVm, "acme/vm/a2", {0, 2}),
                                 D("g1", "globex", kDedicated, "globex/dedicated/g1", {1, 3})})
                  .message(),
              HasSubstr("VM 'a1' may run on CPU 3, on core 1 of dedicated VM 'g1'"));
  EXPECT_THAT(CheckLayout(host, {D("a1", "acme", kVm, "acme/vm/a1"),
                                 D("a2", "acme", kVm, "acme/vm/a2", {0, 2}),
                                 D("g1", "globex", kDedicated, "globex/dedicated/g1", {1, 3})})
                  .message(),
              HasSubstr("VM 'a1' is not pinned"));
}

TEST(LayoutRulesTest, DedicatedLeavesOneCoreShared) {
  Scenario host = Host();
  host.vms[2].vcpus = 4;  // g1 would need both cores
  EXPECT_THAT(CheckLayout(host, {D("a1", "acme", kVm, "acme/vm/a1", {0, 2}),
                                 D("a2", "acme", kVm, "acme/vm/a2", {0, 2}),
                                 D("g1", "globex", kDedicated, "globex/dedicated/g1",
                                   {0, 1, 2, 3})})
                  .message(),
              HasSubstr("dedicated VMs hold 2 of 2 cores; at most 1 may be given away"));
}

TEST(LayoutRulesTest, RefusesALayoutOfOtherVms) {
  absl::Status s = CheckLayout(Host(), {D("a1", "acme", kVm, "acme/vm/a1")});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("layout has 1 VMs; the host has 3"));
}

// A random host: 2-6 cores, up to 8 VMs of three tenants with random
// allowed levels, classes of which two conflict, and random loads.
Scenario RandomHost(std::mt19937_64& rng, int index) {
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  Scenario s;
  s.name = absl::StrCat("random-", index);
  s.seed = rng();
  s.duration_s = 0.2;
  s.cores = 2 + pick(5);
  s.threads_per_core = 2;
  s.conflicts = {{"avx512", "latency-critical"}};
  const std::vector<v1::IsolationLevel> levels = {v1::ISOLATION_LEVEL_VM,
                                                  v1::ISOLATION_LEVEL_TENANT,
                                                  v1::ISOLATION_LEVEL_NONE,
                                                  v1::ISOLATION_LEVEL_DEDICATED};
  const std::vector<std::string> tenants = {"acme", "globex", "initech"};
  for (const std::string& tenant : tenants) {
    std::vector<v1::IsolationLevel> allowed;
    for (auto level : levels) {
      if (pick(2) == 0) allowed.push_back(level);
    }
    if (allowed.empty()) allowed.push_back(levels[pick(4)]);
    s.tenants.push_back({Policy(tenant, allowed), {}});
  }
  const std::vector<std::vector<std::string>> class_sets = {
      {}, {"avx512"}, {"latency-critical"}, {"avx512", "batch"}};
  const int vms = 1 + pick(8);
  for (int v = 0; v < vms; ++v) {
    VmSpec vm;
    vm.name = absl::StrCat("vm-", v);
    vm.tenant = tenants[pick(3)];
    vm.vcpus = 1 + pick(4);
    vm.classes = class_sets[pick(4)];
    vm.workload.util = 0.1 + 0.1 * pick(10);
    s.vms.push_back(vm);
  }
  return s;
}

TEST(LayoutRulesTest, EnginePlansKeepEveryRuleOnRandomHosts) {
  std::mt19937_64 rng(20261202);
  PlanOptions options;
  options.predict_s = 0.2;
  int planned = 0, refused = 0;
  for (int i = 0; i < 1000; ++i) {
    const Scenario host = RandomHost(rng, i);
    auto plan = PlanHost(host, SimParams(), options);
    if (!plan.ok()) {
      // Only a dedicated VM that cannot get whole cores may stop a plan.
      ASSERT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition) << plan.status();
      ASSERT_THAT(plan.status().message(), HasSubstr("dedicated")) << plan.status();
      ++refused;
      continue;
    }
    ++planned;
    ASSERT_OK(CheckLayout(host, plan->vms)) << host.name;
  }
  // The generator must exercise the engine, not only its refusals.
  EXPECT_GT(planned, 700);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace cosched::policy
