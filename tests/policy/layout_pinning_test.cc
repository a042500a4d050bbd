// The engine's pinnings and moves (policy/layout_pinning.cc), and PlanHost
// taking them as csd's engine does.
#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/layout_rules.h"
#include "policy/tradeoff.h"
#include "tests/testing/parse_scenario.h"
#include "tests/testing/status_matchers.h"

namespace cosched::policy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Scenario Parse(const std::string& yaml) { return testing::ParseScenario(yaml); }

// The lab's engine_auto_pin host: one busy 2-vCPU VM of acme and two
// half-busy 1-vCPU VMs of globex on 2 cores, a cookie each.
constexpr char kBusyAndTwoSmall[] = R"(
name: busy-and-two-small
seed: 1
duration_s: 4
host: {cores: 2, threads_per_core: 2}
tenants:
  - {name: acme, isolation: vm, allow: [vm]}
  - {name: globex, isolation: vm, allow: [vm]}
vms:
  - {name: big, vcpus: 2, tenant: acme, workload: {kind: cpu, util: 0.9}}
  - {name: g, count: 2, vcpus: 1, tenant: globex, workload: {kind: cpu, util: 0.5}}
)";

std::vector<std::string> Names(const std::vector<Pinning>& pinnings) {
  std::vector<std::string> out;
  for (const Pinning& p : pinnings) out.push_back(p.name);
  return out;
}

TEST(PinningCandidates, BusyVmsGetWholeCoresAndScalesThatPinAlikeAreTriedOnce) {
  const Scenario s = Parse(kBusyAndTwoSmall);
  auto layout = DefaultLayout(s);
  ASSERT_OK(layout);
  auto pinnings = PinningCandidates(s, *layout, {true, true, true});
  ASSERT_OK(pinnings);
  // x1.25 and x1.50 of a 2-vCPU VM both need 2 cores: none is left.
  EXPECT_THAT(Names(*pinnings),
              ElementsAre("unpinned", "busy-whole-cores-x1.00", "one-thread-per-core"));
  const Pinning& busy = (*pinnings)[1];
  // CPU c is thread c / 2 of core c % 2.
  EXPECT_THAT(busy.pins[0], ElementsAre(0, 2)) << "big: core 0";
  EXPECT_THAT(busy.pins[1], ElementsAre(1, 3)) << "g-0: core 1";
  EXPECT_THAT(busy.pins[2], ElementsAre(1, 3));
  EXPECT_THAT((*pinnings)[2].pins[0], ElementsAre(0, 1));
  for (const auto& pin : (*pinnings)[0].pins) EXPECT_TRUE(pin.empty());
}

TEST(PinningCandidates, OnlyVmsThatMayMoveAreRepinned) {
  Scenario s = Parse(kBusyAndTwoSmall);
  s.vms[1].pin_cpus = {3};  // g-*: pinned by others (libvirt) to CPU 3
  auto layout = DefaultLayout(s);
  ASSERT_OK(layout);
  auto pinnings = PinningCandidates(s, *layout, {true, false, true});
  ASSERT_OK(pinnings);
  for (const Pinning& p : *pinnings) {
    EXPECT_THAT(p.pins[1], ElementsAre(3)) << p.name << ": the scenario's pin is kept";
    EXPECT_THAT(p.pins[2], ElementsAre(3)) << p.name;
  }
  auto none = PinningCandidates(s, *layout, {false, false, false});
  ASSERT_OK(none);
  EXPECT_THAT(Names(*none), ElementsAre("unpinned"));
  EXPECT_EQ(PinningCandidates(s, *layout, {true}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PinningCandidates, DedicatedVmsKeepTheirCoresAndOthersStayOffThem) {
  Scenario s = Parse(R"(
name: with-dedicated
seed: 1
duration_s: 1
host: {cores: 4}
tenants:
  - {name: acme, isolation: vm, allow: [vm]}
vms:
  - {name: d, vcpus: 2, tenant: gold, workload: {kind: cpu}}
  - {name: big, vcpus: 2, tenant: acme, workload: {kind: cpu, util: 0.9}}
  - {name: small, vcpus: 1, tenant: acme, workload: {kind: cpu, util: 0.2}}
)");
  v1::TenantPolicy gold;
  gold.set_tenant_id("gold");
  gold.set_default_isolation(v1::ISOLATION_LEVEL_DEDICATED);
  s.tenants.push_back({gold, std::nullopt});
  auto layout = DefaultLayout(s);
  ASSERT_OK(layout);
  auto pinnings = PinningCandidates(s, *layout, {true, true, true});
  ASSERT_OK(pinnings);
  for (const Pinning& p : *pinnings) {
    EXPECT_THAT(p.pins[0], ElementsAre(3, 7)) << p.name << ": d on core 3";
    for (size_t v = 1; v < 3; ++v) {
      for (int cpu : p.pins[v]) EXPECT_NE(cpu % 4, 3) << p.name;
    }
  }
}

TEST(EngineMoves, GroupsFirstThenEveryPinningThatChangesSomething) {
  const Scenario s = Parse(R"(
name: four-and-one
seed: 1
duration_s: 1
host: {cores: 4}
tenants:
  - {name: acme, isolation: vm, allow: [vm, tenant]}
vms:
  - {name: a, count: 2, vcpus: 2, tenant: acme, workload: {kind: cpu, util: 0.8}}
  - {name: s, vcpus: 1, tenant: acme, workload: {kind: cpu, util: 0.2}}
)");
  auto current = DefaultLayout(s);
  ASSERT_OK(current);
  auto moves = EngineMoves(s, *current, {true, true, true});
  ASSERT_OK(moves);
  std::vector<std::string> names;
  for (const LayoutProposal& m : *moves) names.push_back(m.move);
  // x1.25 would give each busy VM 2 cores, and leave none for the other.
  EXPECT_THAT(names, ElementsAre("groups", "busy-whole-cores-x1.00", "one-thread-per-core"));
  for (const LayoutProposal& m : *moves) EXPECT_TRUE(m.changes) << m.move;
  // A pinning keeps the levels and says why each VM moved.
  const LayoutProposal& busy = (*moves)[1];
  EXPECT_EQ(busy.planned[0].trust_group, (*current)[0].trust_group);
  EXPECT_THAT(busy.planned[0].reasons.back(),
              HasSubstr("pinned to core 0 (pinning 'busy-whole-cores-x1.00'"));
  EXPECT_THAT(busy.planned[2].reasons.back(), HasSubstr("pinned to cores 2-3"));
  EXPECT_OK(CheckLayout(s, busy.planned));

  // Pinned so, that pinning is no move; unpinning is.
  std::vector<VmDecision> pinned = busy.planned;
  auto from_pinned = EngineMoves(s, pinned, {true, true, true});
  ASSERT_OK(from_pinned);
  names.clear();
  for (const LayoutProposal& m : *from_pinned) names.push_back(m.move);
  EXPECT_THAT(names, ElementsAre("groups", "unpinned", "one-thread-per-core"));
  EXPECT_THAT((*from_pinned)[0].planned[0].pin_cpus, ElementsAre(0, 4))
      << "the groups move keeps the pins";
  // VMs the engine does not manage: neither regrouped nor pinned.
  auto unmanaged = EngineMoves(s, *current, {false, false, false});
  ASSERT_OK(unmanaged);
  EXPECT_TRUE(unmanaged->empty());
}

TEST(PlanHost, PinsWhereAMovePaysAndSettles) {
  auto plan = PlanHost(Parse(kBusyAndTwoSmall));
  ASSERT_OK(plan);
  EXPECT_EQ(plan->chosen, "busy-whole-cores-x1.00");
  EXPECT_THAT(plan->vms[0].pin_cpus, ElementsAre(0, 2));
  EXPECT_THAT(plan->vms[1].pin_cpus, ElementsAre(1, 3));
  EXPECT_THAT(plan->vms[0].reasons, ::testing::Contains(HasSubstr("pinned to core 0")));
  // The pinning taken, then each other move once, none of which gains.
  ASSERT_GE(plan->candidates.size(), 3u);
  EXPECT_EQ(plan->candidates[0].name, "busy-whole-cores-x1.00");
  EXPECT_THAT(plan->reasons[0], HasSubstr("took 'busy-whole-cores-x1.00'"));
  EXPECT_EQ(plan->config.pin_cpus[0], plan->vms[0].pin_cpus);
  // policy_may_pin: false leaves every VM unpinned.
  Scenario no_pins = Parse(kBusyAndTwoSmall);
  no_pins.policy_may_pin = false;
  auto unpinned = PlanHost(no_pins);
  ASSERT_OK(unpinned);
  EXPECT_EQ(unpinned->chosen, "default");
  for (const VmDecision& d : unpinned->vms) EXPECT_TRUE(d.pin_cpus.empty()) << d.vm;
}

}  // namespace
}  // namespace cosched::policy
