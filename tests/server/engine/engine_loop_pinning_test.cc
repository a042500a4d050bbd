// The policy engine's pins (docs/operating.md, "Pinning"): decided as a
// move, written into the VMs' assignments in the host's CPU ids, dropped by
// an operator's level, and never made for a VM others pin.
#include <vector>

#include "tests/server/engine/engine_loop_fixture.h"

namespace cosched::server::engine_testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The fixture's host numbers core c's CPUs 2c and 2c + 1.
std::vector<int> PinOf(const v1::VM& vm) {
  return {vm.assignment().pin().cpus().begin(), vm.assignment().pin().cpus().end()};
}

class EnginePinningTest : public EngineLoopTest {
 protected:
  // The lab's engine_auto_pin host: acme's 2-vCPU VM busy 90%, globex's
  // two 1-vCPU VMs busy half the time; both tenants auto, `vm` only.
  void BusyAndTwoSmall() {
    for (const char* tenant : {"acme", "globex"}) {
      ASSERT_OK(SetPolicy(tenant, v1::POLICY_MODE_AUTO, {v1::ISOLATION_LEVEL_VM}));
    }
    ASSERT_OK(Tag("big", "acme"));
    for (const char* vm : {"g-1", "g-2"}) ASSERT_OK(Tag(vm, "globex"));
    vcpus_ = {{"big", 2}};
    loads_ = {{"g-1", 0.5}, {"g-2", 0.5}};
    ASSERT_OK(Report({"big", "g-1", "g-2"}, 60, 0.9));
  }
};

TEST_F(EnginePinningTest, TheEnginePinsABusyVmToWholeCoresOfItsOwn) {
  ASSERT_NO_FATAL_FAILURE(BusyAndTwoSmall());
  MakeEngine();
  auto plan = engine_->Plan(v1::PlanRequest());
  ASSERT_OK(plan);
  ASSERT_EQ(plan->hosts_size(), 1);
  EXPECT_THAT(plan->hosts(0).reasons(0), HasSubstr("move 'busy-whole-cores-x1.00'"));
  ASSERT_EQ(plan->hosts(0).changes_size(), 3);
  EXPECT_TRUE(plan->hosts(0).changes(0).from_pin_cpus().empty());
  EXPECT_THAT(plan->hosts(0).changes(0).to_pin_cpus(), ElementsAre(0, 1));

  ASSERT_TRUE(engine_->ReplanHost(kHost));
  const v1::VM big = Vm("big");
  EXPECT_EQ(big.assignment().pin().host_id(), kHost);
  EXPECT_THAT(PinOf(big), ElementsAre(0, 1)) << "core 0";
  EXPECT_THAT(PinOf(Vm("g-1")), ElementsAre(2, 3)) << "core 1";
  EXPECT_THAT(PinOf(Vm("g-2")), ElementsAre(2, 3));
  EXPECT_EQ(big.assignment().trust_group(), "acme/vm/big") << "a pin changes no group";
  EXPECT_EQ(big.decision().decided_by(), v1::DECIDED_BY_ENGINE);
  EXPECT_THAT(big.decision().reasons(0),
              HasSubstr("pinned to core 0 (pinning 'busy-whole-cores-x1.00'"));
  EXPECT_GT(big.decision().predicted().gain(), options_.hysteresis.min_gain);

  // The host's next moves (unpinned, one thread per core) gain nothing
  // over it: a round of re-plans changes nothing.
  for (int pass = 0; pass < 3; ++pass) {
    now_ += std::chrono::minutes(1);
    EXPECT_EQ(engine_->RunPass(true), 0) << pass;
  }
  EXPECT_THAT(PinOf(Vm("big")), ElementsAre(0, 1));

  // Retagged without a level, g-1 keeps the engine's pin; tagged with one,
  // big is the operator's and unpinned.
  ASSERT_OK(Tag("g-1", "globex", v1::ISOLATION_LEVEL_UNSPECIFIED, {"web"}));
  EXPECT_THAT(PinOf(Vm("g-1")), ElementsAre(2, 3));
  ASSERT_OK(Tag("big", "acme", v1::ISOLATION_LEVEL_VM));
  EXPECT_FALSE(Vm("big").assignment().has_pin());
  EXPECT_EQ(Vm("big").decision().decided_by(), v1::DECIDED_BY_OPERATOR);
}

TEST_F(EnginePinningTest, ADryRunTenantsVmsStayWhereTheyAre) {
  ASSERT_NO_FATAL_FAILURE(BusyAndTwoSmall());
  ASSERT_OK(SetPolicy("globex", v1::POLICY_MODE_AUTO, {v1::ISOLATION_LEVEL_VM}, false));
  MakeEngine();
  // The engine plans what it may apply: acme's VM on core 0 of its own,
  // predicted with globex's unpinned beside it.
  ASSERT_TRUE(engine_->ReplanHost(kHost));
  EXPECT_THAT(PinOf(Vm("big")), ElementsAre(0, 1));
  for (const char* vm : {"g-1", "g-2"}) EXPECT_FALSE(Vm(vm).assignment().has_pin()) << vm;
  EXPECT_EQ(Vm("g-1").decision().decided_by(), v1::DECIDED_BY_OPERATOR);
}

TEST_F(EnginePinningTest, AVmOthersPinIsPredictedThereAndNeverPinned) {
  // libvirt pins them as the engine would have: nothing is left to move.
  pinned_by_others_ = {{"big", {0, 1}}, {"g-1", {2, 3}}, {"g-2", {2, 3}}};
  ASSERT_NO_FATAL_FAILURE(BusyAndTwoSmall());
  MakeEngine();
  EXPECT_FALSE(engine_->ReplanHost(kHost));
  for (const char* vm : {"big", "g-1", "g-2"}) EXPECT_FALSE(Vm(vm).assignment().has_pin()) << vm;
  auto plan = engine_->Plan(v1::PlanRequest());
  ASSERT_OK(plan);
  ASSERT_EQ(plan->hosts_size(), 1);
  EXPECT_EQ(plan->hosts(0).changes_size(), 0);
  EXPECT_THAT(plan->hosts(0).reasons(0), HasSubstr("no move changes it"));
}

TEST_F(EnginePinningTest, APinOfAnotherHostDoesNotHoldHere) {
  ASSERT_NO_FATAL_FAILURE(BusyAndTwoSmall());
  MakeEngine();
  ASSERT_TRUE(engine_->ReplanHost(kHost));
  // The three move to hv-2, alike: hv-1's pins name hv-1, so on hv-2 they
  // run unpinned until the engine pins them there.
  ASSERT_NO_FATAL_FAILURE(Register("hv-2"));
  ASSERT_OK(Report({}));
  report_host_ = "hv-2";
  ASSERT_OK(Report({"big", "g-1", "g-2"}, 60, 0.9));
  ASSERT_EQ(Vm("big").host_id(), "hv-2");
  EXPECT_EQ(Vm("big").assignment().pin().host_id(), kHost);
  EXPECT_TRUE(engine_->ReplanHost("hv-2"));
  EXPECT_EQ(Vm("big").assignment().pin().host_id(), "hv-2");
  EXPECT_THAT(PinOf(Vm("big")), ElementsAre(0, 1));
  EXPECT_THAT(Vm("big").decision().reasons(0), HasSubstr("pinned to core 0"));
}

TEST(HostCpus, TheScenariosNumberingToTheHostsAndBack) {
  // Linux numbers siblings apart: core 0 is CPUs 0 and 4, core 1 is 1 and 5.
  v1::Topology topology;
  for (int c = 0; c < 2; ++c) {
    v1::Core* core = topology.add_cores();
    core->add_cpus(c + 4);
    core->add_cpus(c);
  }
  // Scenario CPU c: thread c / 2 of core c % 2.
  EXPECT_THAT(HostCpusOf(topology, {0, 2}), ElementsAre(0, 4));
  EXPECT_THAT(HostCpusOf(topology, {1, 3}), ElementsAre(1, 5));
  EXPECT_THAT(HostCpusOf(topology, {0, 1, 9}), ElementsAre(0, 1)) << "no CPU 9 here";
  EXPECT_THAT(ScenarioCpusOf(topology, {4, 1}), ElementsAre(1, 2));
  EXPECT_THAT(ScenarioCpusOf(topology, {7}), ElementsAre()) << "not on the host";
  EXPECT_THAT(HostCpusOf(v1::Topology(), {0}), ElementsAre());
}

}  // namespace
}  // namespace cosched::server::engine_testing
