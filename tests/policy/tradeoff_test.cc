#include "policy/tradeoff.h"

#include "policy/layout_rules.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/engine_hosts.h"
#include "tests/testing/parse_scenario.h"
#include "tests/testing/status_matchers.h"

namespace cosched::policy {
namespace {

using ::testing::HasSubstr;

Scenario Parse(const std::string& yaml) { return testing::ParseScenario(yaml); }

constexpr char kTwoTenants[] = R"(
name: tenants
seed: 1
duration_s: 1
host: {cores: 8}
tenants:
  - {name: acme, isolation: vm, allow: [vm, tenant]}
  - {name: beta, isolation: vm, allow: [vm, tenant]}
  - {name: strict, isolation: vm, allow: [vm]}
conflicts: [[avx512, latency-critical]]
vms:
  - {name: a, count: 2, vcpus: 2, tenant: acme, workload: {kind: cpu, util: 0.3}}
  - {name: a-avx, vcpus: 2, tenant: acme, classes: [avx512], workload: {kind: avx, util: 0.3}}
  - {name: a-lat, vcpus: 2, tenant: acme, classes: [latency-critical], workload: {kind: cpu, util: 0.3}}
  - {name: b, count: 2, vcpus: 2, tenant: beta, workload: {kind: cpu, util: 0.3}}
  - {name: s, count: 2, vcpus: 1, tenant: strict, workload: {kind: cpu, util: 0.3}}
)";

// The grouping rules alone: the relaxed levels whatever their predicted
// gain (a gain is never below -1).
PlanOptions AlwaysRelax() {
  PlanOptions options;
  options.level_min_gain = -1;
  return options;
}

TEST(PlanHost, GroupsWithinTenantsNeverAcross) {
  Scenario s = Parse(kTwoTenants);
  auto plan = PlanHost(s, SimParams(), AlwaysRelax());
  ASSERT_OK(plan);
  std::map<std::string, std::string> group;
  for (const auto& d : plan->vms) group[d.vm] = d.trust_group;
  EXPECT_EQ(group["a-0"], group["a-1"]);
  EXPECT_EQ(group["b-0"], group["b-1"]);
  EXPECT_NE(group["a-0"], group["b-0"]);
  // Conflicting classes: separate groups, even within one tenant.
  EXPECT_NE(group["a-avx"], group["a-lat"]);
  EXPECT_NE(group["a-avx"], group["a-0"]);
  // A tenant that allows only `vm`: one group per VM.
  EXPECT_NE(group["s-0"], group["s-1"]);
  // Groups never hold two tenants.
  std::map<std::string, std::set<std::string>> tenants_of;
  for (const auto& d : plan->vms) tenants_of[d.trust_group].insert(d.tenant);
  for (const auto& [g, t] : tenants_of) EXPECT_EQ(t.size(), 1u) << g;
}

TEST(PlanHost, ExplainsEveryDecision) {
  auto plan = PlanHost(Parse(kTwoTenants), SimParams(), AlwaysRelax());
  ASSERT_OK(plan);
  for (const auto& d : plan->vms) EXPECT_FALSE(d.reasons.empty()) << d.vm;
  EXPECT_THAT(plan->vms[0].reasons[0], HasSubstr("tenant 'acme' allows `tenant`"));
  EXPECT_THAT(plan->vms[3].reasons, ::testing::Contains(HasSubstr("class 'latency-critical'")));
  EXPECT_THAT(plan->vms[6].reasons[0], HasSubstr("does not allow `tenant`"));
  ASSERT_FALSE(plan->reasons.empty());
  EXPECT_THAT(plan->reasons[0], HasSubstr("chose '"));
  EXPECT_GE(plan->candidates.size(), 2u);
}

TEST(PlanHost, DedicatedGetsWholeCoresNobodyElseUses) {
  Scenario s = Parse(std::string(kTwoTenants) +
                     "  - {name: d, vcpus: 3, tenant: gold, workload: {kind: cpu}}\n");
  v1::TenantPolicy gold;
  gold.set_tenant_id("gold");
  gold.set_default_isolation(v1::ISOLATION_LEVEL_DEDICATED);
  s.tenants.push_back({gold, std::nullopt});
  auto plan = PlanHost(s);
  ASSERT_OK(plan);
  const VmDecision& d = plan->vms.back();
  EXPECT_EQ(d.isolation, v1::ISOLATION_LEVEL_DEDICATED);
  EXPECT_EQ(d.pin_cpus, (std::vector<int>{6, 7, 14, 15}));  // cores 6-7
  // Said in cores: the CPU ids are the simulator's, which csd's hosts
  // need not share (their own are in the VM's pin).
  EXPECT_THAT(d.reasons, ::testing::Contains("dedicated: whole cores 6-7, used by no other VM"));
  for (size_t v = 0; v + 1 < plan->vms.size(); ++v) {
    ASSERT_FALSE(plan->vms[v].pin_cpus.empty()) << plan->vms[v].vm;
    for (int cpu : plan->vms[v].pin_cpus) EXPECT_LT(cpu % 8, 6) << plan->vms[v].vm;
  }
}

TEST(PlanHost, DedicatedThatDoesNotFitIsAnError) {
  Scenario s = Parse(std::string(kTwoTenants) +
                     "  - {name: d, vcpus: 16, tenant: gold, workload: {kind: cpu}}\n");
  v1::TenantPolicy gold;
  gold.set_tenant_id("gold");
  gold.set_default_isolation(v1::ISOLATION_LEVEL_DEDICATED);
  s.tenants.push_back({gold, std::nullopt});
  auto plan = PlanHost(s);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(), HasSubstr("needs 8 whole free cores"));
}

TEST(PlanHost, ForcedIdleBudgetIsReported) {
  Scenario s = Parse(kTwoTenants);
  s.forced_idle_budget_pct = 0;
  auto plan = PlanHost(s);
  ASSERT_OK(plan);
  ASSERT_TRUE(plan->forced_idle_budget_pct.has_value());
  EXPECT_THAT(plan->reasons.back(), HasSubstr("forced-idle budget 0.0%"));
  // The nosmt-like layout has no forced idle at all, so it is within.
  bool any_within = false;
  for (const auto& c : plan->candidates) any_within |= c.within_budget;
  EXPECT_TRUE(any_within);
  for (const auto& c : plan->candidates) {
    if (c.name == plan->chosen) {
      EXPECT_TRUE(c.within_budget);
    }
  }
}

// Four busy-ish 1-vCPU VMs of one tenant on 2 cores: a cookie each leaves
// siblings idle whenever the other VM of a core sleeps; one cookie for the
// tenant lets them share.
constexpr char kFourOfOneTenant[] = R"(
name: four
seed: 3
duration_s: 2
host: {cores: 2}
tenants:
  - {name: acme, isolation: vm, allow: [vm, tenant], forced_idle_budget_pct: 2}
vms:
  - {name: a, count: 4, vcpus: 1, tenant: acme, workload: {kind: cpu, util: 0.6}}
)";

TEST(ChooseGroups, TakesTheMostRelaxedAllowedLevelWithoutPinning) {
  auto groups = ChooseGroups(Parse(kFourOfOneTenant));
  ASSERT_OK(groups);
  ASSERT_EQ(groups->size(), 4u);
  for (const VmDecision& d : *groups) {
    EXPECT_EQ(d.isolation, v1::ISOLATION_LEVEL_TENANT) << d.vm;
    EXPECT_EQ(d.trust_group, "acme/tenant") << d.vm;
    EXPECT_TRUE(d.pin_cpus.empty()) << d.vm;
    EXPECT_FALSE(d.reasons.empty()) << d.vm;
  }
}

// As csd's engine on a fresh host: the relaxed level only where it pays.
TEST(PlanHost, KeepsTheDefaultLevelWhereTheRelaxedGroupsHoldTheSameVms) {
  auto plan = PlanHost(Parse(R"(
name: alone
seed: 1
duration_s: 1
host: {cores: 2}
tenants:
  - {name: acme, isolation: vm, allow: [vm, tenant]}
vms:
  - {name: a, vcpus: 2, tenant: acme, workload: {kind: cpu, util: 1}}
  - {name: b, vcpus: 1, tenant: beta, workload: {kind: cpu, util: 1}}
)"));
  ASSERT_OK(plan);
  ASSERT_EQ(plan->vms.size(), 2u);
  EXPECT_EQ(plan->vms[0].isolation, v1::ISOLATION_LEVEL_VM);
  EXPECT_EQ(plan->vms[0].trust_group, "acme/vm/a");
  EXPECT_THAT(plan->vms[0].reasons[0],
              HasSubstr("keeps its tenant's default level `vm` (group 'acme/vm/a') over `tenant`"));
  EXPECT_THAT(plan->vms[0].reasons[0], HasSubstr("the groups would hold the same VMs"));
  EXPECT_EQ(plan->vms[1].trust_group, "beta/vm/b") << "beta has the built-in default";
}

TEST(PlanHost, TakesTheTenantsGroupWhereItPays) {
  Scenario s = Parse(kFourOfOneTenant);
  auto defaults = DefaultLayout(s);
  ASSERT_OK(defaults);
  auto proposal = ProposeLayout(s, *defaults, std::vector<bool>(4, true));
  ASSERT_OK(proposal);
  ASSERT_TRUE(proposal->changes);
  EXPECT_FALSE(proposal->same_grouping);
  EXPECT_GE(proposal->gain, PlanOptions().level_min_gain);
  auto plan = PlanHost(s);
  ASSERT_OK(plan);
  for (const VmDecision& d : plan->vms) EXPECT_EQ(d.trust_group, "acme/tenant") << d.vm;
}

TEST(ProposeLayout, ChangesOnlyManagedVmsAndPredictsBothLayouts) {
  Scenario s = Parse(kFourOfOneTenant);
  auto defaults = DefaultLayout(s);
  ASSERT_OK(defaults);
  EXPECT_EQ((*defaults)[0].trust_group, "acme/vm/a-0");
  auto proposal = ProposeLayout(s, *defaults, {true, true, false, false});
  ASSERT_OK(proposal);
  EXPECT_TRUE(proposal->changes);
  EXPECT_EQ(proposal->planned[0].trust_group, "acme/tenant");
  EXPECT_EQ(proposal->planned[1].trust_group, "acme/tenant");
  EXPECT_EQ(proposal->planned[2].trust_group, "acme/vm/a-2");
  EXPECT_GT(proposal->now.predicted_throughput, 0);
  EXPECT_GT(proposal->next.predicted_throughput, 0);
  EXPECT_DOUBLE_EQ(proposal->gain, proposal->next.predicted_throughput /
                                       proposal->now.predicted_throughput -
                                   1);
  auto unchanged = ProposeLayout(s, proposal->planned, {true, true, false, false});
  ASSERT_OK(unchanged);
  EXPECT_FALSE(unchanged->changes);
  EXPECT_EQ(ProposeLayout(s, *defaults, {true}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PredictLayout, OneGroupPerTenantForcesLessIdleThanOnePerVm) {
  Scenario s = Parse(kFourOfOneTenant);
  auto relaxed = ChooseGroups(s);
  ASSERT_OK(relaxed);
  std::vector<VmDecision> per_vm = *relaxed;
  for (VmDecision& d : per_vm) {
    d.isolation = v1::ISOLATION_LEVEL_VM;
    d.trust_group = "acme/vm/" + d.vm;
  }
  auto vm_score = PredictLayout(s, per_vm);
  auto tenant_score = PredictLayout(s, *relaxed);
  ASSERT_OK(vm_score);
  ASSERT_OK(tenant_score);
  EXPECT_GT(vm_score->predicted_forced_idle_pct, 2.0);
  EXPECT_FALSE(vm_score->within_budget);
  EXPECT_LT(tenant_score->predicted_forced_idle_pct, vm_score->predicted_forced_idle_pct);
  EXPECT_GT(tenant_score->predicted_throughput, vm_score->predicted_throughput);
  EXPECT_OK(CheckLayout(s, per_vm));
}

TEST(PredictLayout, DedicatedVmsGetWholeCoresAndTheLayoutPassesTheRules) {
  Scenario s = Parse(std::string(kTwoTenants) +
                     "  - {name: d, vcpus: 3, tenant: gold, workload: {kind: cpu}}\n");
  v1::TenantPolicy gold;
  gold.set_tenant_id("gold");
  gold.set_default_isolation(v1::ISOLATION_LEVEL_DEDICATED);
  s.tenants.push_back({gold, std::nullopt});
  auto layout = ChooseGroups(s);
  ASSERT_OK(layout);
  EXPECT_TRUE(layout->back().pin_cpus.empty());
  ASSERT_OK(PredictLayout(s, *layout));
  EXPECT_EQ(layout->back().pin_cpus, (std::vector<int>{6, 7, 14, 15}));
  EXPECT_OK(CheckLayout(s, *layout));
  std::vector<VmDecision> short_layout(layout->begin(), layout->end() - 1);
  EXPECT_EQ(PredictLayout(s, short_layout).status().code(), absl::StatusCode::kInvalidArgument);
}

// A host of 32 cores with 20 VMs of 2 vCPUs busy 20-90% of the time, two of
// its four tenants allowed tenant level (csd's engine_pass_bench's hosts),
// or, with `cores` 2 and 5 one-vCPU VMs, one as small as the lab's.
Scenario ScreenHost(int cores, int vms, int vcpus, uint64_t seed) {
  return testing::EngineHost(
      cores, vms, vcpus, 2, [](int v) { return 0.2 + 0.7 * ((v * 37) % 10) / 10.0; }, seed);
}

// The proposal of every VM at its relaxed level, from every VM at level vm.
struct Proposed {
  std::vector<VmDecision> current;
  LayoutProposal proposal;
};
Proposed Propose(const Scenario& s, PlanOptions options) {
  Proposed p;
  auto groups = ChooseGroups(s);
  EXPECT_OK(groups);
  p.current = *groups;
  for (VmDecision& d : p.current) {
    d.isolation = v1::ISOLATION_LEVEL_VM;
    d.trust_group = d.tenant + "/vm/" + d.vm;
  }
  p.proposal.planned = *groups;
  EXPECT_OK(PredictProposal(s, p.current, p.proposal, SimParams(), options));
  return p;
}

TEST(PredictProposal, TheScreenSettlesAClearAnswerEarly) {
  const Scenario s = ScreenHost(32, 20, 2, 1);
  PlanOptions options;
  options.predict_s = 2;
  options.screen_s = 0.5;
  options.level_min_gain = 0.5;  // far above anything regrouping gains here
  Proposed screened = Propose(s, options);
  EXPECT_TRUE(screened.proposal.screened);
  // 0.5 s of a 2-s run whose first 0.2 s are warm-up.
  EXPECT_NEAR(screened.proposal.now.simulated_s, 0.3, 1e-9);
  EXPECT_NEAR(screened.proposal.next.simulated_s, 0.3, 1e-9);
  options.screen_s = 0;
  Proposed full = Propose(s, options);
  EXPECT_FALSE(full.proposal.screened);
  EXPECT_NEAR(full.proposal.now.simulated_s, 1.8, 1e-9);
  // The same side of level_min_gain either way.
  EXPECT_LT(screened.proposal.gain, 0.5);
  EXPECT_LT(full.proposal.gain, 0.5);
}

TEST(PredictProposal, ACloseCallRunsTheWholePrediction) {
  const Scenario s = ScreenHost(32, 20, 2, 1);
  PlanOptions options;
  options.predict_s = 2;
  options.screen_s = 0.5;
  options.level_min_gain = 0.5;
  const double screened_gain = Propose(s, options).proposal.gain;
  // A threshold right at the screen's gain: the screen cannot settle it.
  options.level_min_gain = screened_gain + 0.01;
  Proposed close = Propose(s, options);
  EXPECT_FALSE(close.proposal.screened);
  options.screen_s = 0;
  Proposed full = Propose(s, options);
  EXPECT_EQ(close.proposal.gain, full.proposal.gain);
  EXPECT_EQ(close.proposal.now.predicted_forced_idle_pct,
            full.proposal.now.predicted_forced_idle_pct);
  EXPECT_EQ(close.proposal.next.predicted_throughput, full.proposal.next.predicted_throughput);
}

// The same distance from level_min_gain settles a large host's screen and
// not a small one's, which simulated a few percent of the work.
TEST(PredictProposal, TheScreensMarginWidensOnASmallHost) {
  PlanOptions options;
  options.predict_s = 2;
  options.screen_s = 0.5;
  for (const auto& [s, settles] : std::vector<std::pair<Scenario, bool>>{
           {ScreenHost(32, 20, 2, 1), true}, {ScreenHost(2, 5, 1, 1), false}}) {
    SCOPED_TRACE(s.cores);
    options.level_min_gain = 0.5;
    const double gain = Propose(s, options).proposal.gain;
    // 3 points away: beyond the 2-point margin, within a widened one.
    options.level_min_gain = gain + 0.03;
    EXPECT_EQ(Propose(s, options).proposal.screened, settles);
  }
}

TEST(PredictProposal, AForcedIdleNearTheBudgetRunsTheWholePrediction) {
  Scenario s = ScreenHost(32, 20, 2, 1);
  PlanOptions options;
  options.predict_s = 2;
  options.screen_s = 0.5;
  options.level_min_gain = 0.5;
  const LayoutProposal first = Propose(s, options).proposal;
  ASSERT_TRUE(first.screened);
  s.forced_idle_budget_pct = first.now.predicted_forced_idle_pct + 0.5;
  EXPECT_FALSE(Propose(s, options).proposal.screened);
  s.forced_idle_budget_pct = first.now.predicted_forced_idle_pct +
                             first.next.predicted_forced_idle_pct + 5;
  EXPECT_TRUE(Propose(s, options).proposal.screened);
}

TEST(ParseMode, KnowsTheFiveModes) {
  for (const char* name : {"smt", "nosmt", "vm", "tenant", "policy"}) {
    auto m = ParseMode("--modes", name);
    ASSERT_OK(m);
    EXPECT_STREQ(ModeName(*m), name);
  }
  EXPECT_THAT(ParseMode("--modes", "fast").status().message(),
              HasSubstr("--modes 'fast' must be one of"));
}

}  // namespace
}  // namespace cosched::policy
