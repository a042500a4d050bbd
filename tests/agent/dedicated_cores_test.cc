#include "agent/dedicated_cores.h"

#include <cerrno>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/reconcile_loop.h"
#include "discovery/testing/static_vm_discovery.h"
#include "host/testing/core_sched_fake.h"
#include "host/testing/cpu_affinity_fake.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A topology whose core i has the CPUs cores[i].
v1::Topology Topo(const std::vector<std::vector<int>>& cores) {
  v1::Topology t;
  int id = 0;
  for (const std::vector<int>& cpus : cores) {
    v1::Core* core = t.add_cores();
    core->set_core_id(id++);
    for (int cpu : cpus) core->add_cpus(cpu);
  }
  return t;
}

// 2 cores x 2 siblings, numbered like the lab guest.
v1::Topology TwoByTwo() { return Topo({{0, 1}, {2, 3}}); }
// 4 cores x 2 siblings, numbered like most x86 servers.
v1::Topology FourByTwo() { return Topo({{0, 4}, {1, 5}, {2, 6}, {3, 7}}); }

DedicatedCoreRequest Dedicated(std::string id, int vcpus,
                               std::vector<int> held = {}) {
  return DedicatedCoreRequest{std::move(id), true, vcpus, std::move(held)};
}
DedicatedCoreRequest Shared(std::string id, int vcpus) {
  return DedicatedCoreRequest{std::move(id), false, vcpus, {}};
}

TEST(PlanDedicatedCoresTest, TwoVcpusGetOneWholeCore) {
  DedicatedCorePlan plan = PlanDedicatedCores(
      TwoByTwo(), {Dedicated("vm-1", 2), Shared("vm-2", 4)});
  ASSERT_EQ(plan.dedicated.size(), 1u);
  const DedicatedPlacement& p = plan.dedicated[0];
  EXPECT_OK(p.status) << p.status;
  EXPECT_EQ(p.vm_id, "vm-1");
  // Core 0 stays shared: the host's housekeeping usually runs there.
  EXPECT_THAT(p.cores, ElementsAre(1));
  EXPECT_EQ(p.cpus, host::CpuSet({2, 3}));
  EXPECT_EQ(plan.shared, host::CpuSet({0, 1}));
  EXPECT_EQ(plan.host_cpus, host::CpuSet({0, 1, 2, 3}));
  EXPECT_TRUE(plan.any_placed());
  EXPECT_EQ(DescribePlacement(p), "dedicated core 1 (CPUs 2-3)");
}

TEST(PlanDedicatedCoresTest, OneCoreAlwaysStaysForEveryoneElse) {
  DedicatedCorePlan plan =
      PlanDedicatedCores(TwoByTwo(), {Dedicated("vm-1", 4)});
  ASSERT_EQ(plan.dedicated.size(), 1u);
  const DedicatedPlacement& p = plan.dedicated[0];
  EXPECT_TRUE(absl::IsResourceExhausted(p.status)) << p.status;
  EXPECT_EQ(p.status.message(),
            "dedicated: vm-1 needs 2 whole cores, 1 free of 2 (one core stays "
            "for the host and other VMs)");
  EXPECT_THAT(p.cores, IsEmpty());
  EXPECT_EQ(plan.shared, plan.host_cpus);
  EXPECT_FALSE(plan.any_placed());
}

TEST(PlanDedicatedCoresTest, ShortageNamesWhoHoldsTheCores) {
  DedicatedCorePlan plan = PlanDedicatedCores(
      FourByTwo(), {Dedicated("vm-7", 4), Dedicated("vm-3", 4, {0, 2})});
  ASSERT_EQ(plan.dedicated.size(), 2u);
  EXPECT_EQ(plan.dedicated[0].vm_id, "vm-3");
  EXPECT_THAT(plan.dedicated[0].cores, ElementsAre(0, 2));
  EXPECT_EQ(plan.dedicated[1].status.message(),
            "dedicated: vm-7 needs 2 whole cores, 1 free of 4 (cores 0,2 held "
            "by vm-3; one core stays for the host and other VMs)");
  EXPECT_THAT(plan.dedicated[1].cores, IsEmpty());
  EXPECT_EQ(plan.shared, host::CpuSet({1, 3, 5, 7}));
}

TEST(PlanDedicatedCoresTest, TwoDedicatedVms) {
  DedicatedCorePlan plan = PlanDedicatedCores(
      FourByTwo(),
      {Dedicated("vm-b", 4), Shared("vm-c", 8), Dedicated("vm-a", 2)});
  ASSERT_EQ(plan.dedicated.size(), 2u);
  EXPECT_EQ(plan.dedicated[0].vm_id, "vm-a");
  EXPECT_THAT(plan.dedicated[0].cores, ElementsAre(3));
  EXPECT_EQ(plan.dedicated[0].cpus, host::CpuSet({3, 7}));
  EXPECT_EQ(plan.dedicated[1].vm_id, "vm-b");
  EXPECT_THAT(plan.dedicated[1].cores, ElementsAre(1, 2));
  EXPECT_EQ(plan.dedicated[1].cpus, host::CpuSet({1, 2, 5, 6}));
  EXPECT_EQ(plan.shared, host::CpuSet({0, 4}));
  EXPECT_EQ(DescribePlacement(plan.dedicated[1]),
            "dedicated cores 1-2 (CPUs 1-2,5-6)");
}

TEST(PlanDedicatedCoresTest, ExistingPlacementIsKeptWhenAnotherVmAppears) {
  // vm-b was placed first (alone it got core 3); vm-a sorts before it but
  // does not take its core.
  DedicatedCorePlan plan = PlanDedicatedCores(
      FourByTwo(), {Dedicated("vm-a", 2), Dedicated("vm-b", 2, {3})});
  ASSERT_EQ(plan.dedicated.size(), 2u);
  EXPECT_THAT(plan.dedicated[0].cores, ElementsAre(2));
  EXPECT_THAT(plan.dedicated[1].cores, ElementsAre(3));

  // The same input in another order gives the same plan.
  DedicatedCorePlan again = PlanDedicatedCores(
      FourByTwo(), {Dedicated("vm-b", 2, {3}), Dedicated("vm-a", 2)});
  EXPECT_THAT(again.dedicated[0].cores, ElementsAre(2));
  EXPECT_THAT(again.dedicated[1].cores, ElementsAre(3));
}

TEST(PlanDedicatedCoresTest, OddVcpuCountRoundsUpToWholeCores) {
  DedicatedCorePlan plan =
      PlanDedicatedCores(FourByTwo(), {Dedicated("vm-1", 3)});
  ASSERT_EQ(plan.dedicated.size(), 1u);
  EXPECT_THAT(plan.dedicated[0].cores, ElementsAre(2, 3));
  EXPECT_EQ(plan.dedicated[0].cpus, host::CpuSet({2, 3, 6, 7}));
}

TEST(PlanDedicatedCoresTest, HeldCoresBeyondNeedAreGivenBack) {
  DedicatedCorePlan plan =
      PlanDedicatedCores(FourByTwo(), {Dedicated("vm-1", 2, {1, 2})});
  EXPECT_THAT(plan.dedicated[0].cores, ElementsAre(1));
  EXPECT_EQ(plan.shared, host::CpuSet({0, 2, 3, 4, 6, 7}));
}

TEST(PlanDedicatedCoresTest, NoDedicatedVmPlacesNothing) {
  DedicatedCorePlan plan =
      PlanDedicatedCores(TwoByTwo(), {Shared("vm-1", 2), Shared("vm-2", 2)});
  EXPECT_THAT(plan.dedicated, IsEmpty());
  EXPECT_FALSE(plan.any_placed());
  EXPECT_EQ(plan.shared, host::CpuSet({0, 1, 2, 3}));
}

TEST(PlanDedicatedCoresTest, SingleCoreHostHasNothingToDedicate) {
  DedicatedCorePlan plan =
      PlanDedicatedCores(Topo({{0, 1}}), {Dedicated("vm-1", 1)});
  EXPECT_TRUE(absl::IsResourceExhausted(plan.dedicated[0].status));
  EXPECT_THAT(plan.dedicated[0].status.message(),
              HasSubstr("needs 1 whole core, 0 free of 1"));
}

// Enforcement against the fake kernel: vm-d (dedicated) has vCPUs 101, 102
// and emulator thread 100; vm-o has vCPU 201 and emulator thread 200.
class DedicatedCoreEnforcerTest : public ::testing::Test {
 protected:
  DedicatedCoreEnforcerTest()
      : kernel_(host::CpuSet{0, 1, 2, 3}), enforcer_(&kernel_, TwoByTwo()) {
    for (int tid : {100, 101, 102, 200, 201}) kernel_.AddThread(tid);
  }

  std::vector<DedicatedVmThreads> Vms(bool dedicated) {
    return {DedicatedVmThreads{"vm-d", dedicated, {101, 102}, {100}, {}},
            DedicatedVmThreads{"vm-o", false, {201}, {200}, {}}};
  }

  static const DedicatedVmOutcome& Of(const DedicatedCoreResult& r,
                                      const std::string& vm_id) {
    for (const DedicatedVmOutcome& o : r.vms) {
      if (o.vm_id == vm_id) return o;
    }
    ADD_FAILURE() << "no outcome for " << vm_id;
    return r.vms.front();
  }

  host::FakeCpuAffinity kernel_;
  DedicatedCoreEnforcer enforcer_;
};

TEST_F(DedicatedCoreEnforcerTest, ConfinesAndThenWritesOnlyDifferences) {
  DedicatedCoreResult r = enforcer_.Enforce(Vms(true));
  EXPECT_EQ(kernel_.CpusOf(101), host::CpuSet({2, 3}));
  EXPECT_EQ(kernel_.CpusOf(102), host::CpuSet({2, 3}));
  for (int tid : {100, 200, 201}) EXPECT_EQ(kernel_.CpusOf(tid), host::CpuSet({0, 1}));
  EXPECT_EQ(r.stats.affinity_writes, 5);
  const DedicatedVmOutcome& d = Of(r, "vm-d");
  EXPECT_OK(d.status) << d.status;
  EXPECT_EQ(d.note, "dedicated core 1 (CPUs 2-3)");
  EXPECT_THAT(d.cores, ElementsAre(1));
  EXPECT_EQ(d.vcpus, 2);
  EXPECT_EQ(d.vcpus_confined, 2);
  EXPECT_EQ(d.threads_unconfined, 0);
  EXPECT_OK(Of(r, "vm-o").status);
  EXPECT_TRUE(Of(r, "vm-o").note.empty());

  kernel_.ResetCallCounts();
  r = enforcer_.Enforce(Vms(true));
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(r.stats.affinity_writes, 0);
  EXPECT_EQ(kernel_.read_calls(), 5);
  EXPECT_OK(Of(r, "vm-d").status);
}

TEST_F(DedicatedCoreEnforcerTest, OnlyReadsTheVcpusWhenNoVmIsDedicatedOrPinned) {
  kernel_.AddThread(200, host::CpuSet{3});  // pinned by another tool
  DedicatedCoreResult r = enforcer_.Enforce(Vms(false));
  EXPECT_EQ(kernel_.read_calls(), 3);  // vCPUs 101, 102, 201: vcpu_affinity
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(kernel_.CpusOf(200), host::CpuSet({3}));
  ASSERT_EQ(r.vms.size(), 2u);
  for (const DedicatedVmOutcome& o : r.vms) EXPECT_OK(o.status);
}

TEST_F(DedicatedCoreEnforcerTest, GivesCpusBackWhenNoLongerDedicated) {
  kernel_.AddThread(200, host::CpuSet{0, 2});  // pinned by another tool
  enforcer_.Enforce(Vms(true));
  EXPECT_EQ(kernel_.CpusOf(200), host::CpuSet({0}));  // its pinning, minus core 1

  DedicatedCoreResult r = enforcer_.Enforce(Vms(false));
  EXPECT_EQ(r.stats.threads_restored, 5);
  for (int tid : {100, 101, 102, 201}) {
    EXPECT_EQ(kernel_.CpusOf(tid), host::CpuSet({0, 1, 2, 3})) << tid;
  }
  EXPECT_EQ(kernel_.CpusOf(200), host::CpuSet({0, 2}));
  for (const DedicatedVmOutcome& o : r.vms) EXPECT_OK(o.status);

  // Everything given back: later passes only read the vCPUs.
  kernel_.ResetCallCounts();
  enforcer_.Enforce(Vms(false));
  EXPECT_EQ(kernel_.read_calls(), 3);
  EXPECT_EQ(kernel_.write_calls(), 0);
}

// vcpu_affinity: where others pin a VM's vCPUs, before any change of ours,
// for csd's engine to predict it there.
TEST_F(DedicatedCoreEnforcerTest, ReportsWhereOthersPinTheVcpus) {
  kernel_.AddThread(201, host::CpuSet{1});  // pinned by another tool
  DedicatedCoreResult r = enforcer_.Enforce(Vms(false));
  EXPECT_EQ(Of(r, "vm-o").vcpu_affinity, host::CpuSet({1}));
  EXPECT_TRUE(Of(r, "vm-d").vcpu_affinity.empty()) << "every CPU: not pinned";
  r = enforcer_.Enforce(Vms(true));
  EXPECT_EQ(kernel_.CpusOf(101), host::CpuSet({2, 3}));
  EXPECT_TRUE(Of(r, "vm-d").vcpu_affinity.empty()) << "its dedicated cores are ours";
  EXPECT_EQ(Of(r, "vm-o").vcpu_affinity, host::CpuSet({1}));
  std::vector<DedicatedVmThreads> pinned = Vms(false);
  pinned[0].pin = host::CpuSet{0, 2};
  r = enforcer_.Enforce(pinned);
  EXPECT_EQ(kernel_.CpusOf(101), host::CpuSet({0, 2}));
  EXPECT_TRUE(Of(r, "vm-d").vcpu_affinity.empty()) << "the pin is ours";
  v1::VMEnforcement e;
  MergeDedicatedOutcome(Of(r, "vm-d"), e);
  EXPECT_THAT(e.pinned_cpus(), ElementsAre(0, 2));
  EXPECT_TRUE(e.vcpu_affinity().empty());
  MergeDedicatedOutcome(Of(r, "vm-o"), e);
  EXPECT_THAT(e.vcpu_affinity(), ElementsAre(1));
  EXPECT_TRUE(e.pinned_cpus().empty());
}

TEST_F(DedicatedCoreEnforcerTest, DoesNotFightALaterPinningByAnotherTool) {
  enforcer_.Enforce(Vms(true));
  ASSERT_OK(kernel_.Set(200, host::CpuSet{1}));  // someone re-pins it
  kernel_.ResetCallCounts();
  enforcer_.Enforce(Vms(true));
  EXPECT_EQ(kernel_.write_calls(), 0);
  enforcer_.Enforce(Vms(false));
  EXPECT_EQ(kernel_.CpusOf(200), host::CpuSet({1}));  // theirs, not restored
  EXPECT_EQ(kernel_.CpusOf(201), host::CpuSet({0, 1, 2, 3}));
}

TEST_F(DedicatedCoreEnforcerTest, ACpusetThatNarrowsTheSetDoesNotCauseRewrites) {
  kernel_.SetAllowed(101, host::CpuSet{2});
  enforcer_.Enforce(Vms(true));
  EXPECT_EQ(kernel_.CpusOf(101), host::CpuSet({2}));
  kernel_.ResetCallCounts();
  DedicatedCoreResult r = enforcer_.Enforce(Vms(true));
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(Of(r, "vm-d").vcpus_confined, 2);
}

TEST_F(DedicatedCoreEnforcerTest, PermissionErrorIsReportedPerVm) {
  kernel_.SetThreadErrno(101, EPERM);
  DedicatedCoreResult r = enforcer_.Enforce(Vms(true));
  const DedicatedVmOutcome& d = Of(r, "vm-d");
  EXPECT_TRUE(absl::IsPermissionDenied(d.status)) << d.status;
  EXPECT_THAT(d.status.message(), HasSubstr("1 of 2 vCPU threads confined"));
  EXPECT_THAT(d.status.message(), HasSubstr("CAP_SYS_NICE"));
  EXPECT_EQ(d.vcpus_confined, 1);
  EXPECT_OK(Of(r, "vm-o").status);

  v1::VMEnforcement e;
  e.set_state(v1::ENFORCEMENT_STATE_ENFORCED);
  MergeDedicatedOutcome(d, e);
  EXPECT_EQ(e.state(), v1::ENFORCEMENT_STATE_PARTIAL);
  EXPECT_THAT(e.last_error(), HasSubstr("CAP_SYS_NICE"));
}

TEST_F(DedicatedCoreEnforcerTest, AnotherVmsThreadLeftOnTheCoresIsReported) {
  kernel_.SetThreadErrno(200, EPERM);
  DedicatedCoreResult r = enforcer_.Enforce(Vms(true));
  const DedicatedVmOutcome& d = Of(r, "vm-d");
  EXPECT_EQ(d.vcpus_confined, 2);
  EXPECT_EQ(d.threads_unconfined, 1);
  EXPECT_THAT(d.status.message(),
              HasSubstr("1 other thread may still run on CPUs 2-3"));
  const DedicatedVmOutcome& o = Of(r, "vm-o");
  EXPECT_EQ(o.threads_unconfined, 1);
  EXPECT_THAT(o.status.message(),
              HasSubstr("1 thread could not be kept off CPUs 2-3"));

  // Only the dedicated VM's state is lowered: the other's cookie holds.
  v1::VMEnforcement de, oe;
  de.set_state(v1::ENFORCEMENT_STATE_ENFORCED);
  oe.set_state(v1::ENFORCEMENT_STATE_ENFORCED);
  oe.set_last_error("earlier");
  MergeDedicatedOutcome(d, de);
  MergeDedicatedOutcome(o, oe);
  EXPECT_EQ(de.state(), v1::ENFORCEMENT_STATE_PARTIAL);
  EXPECT_EQ(oe.state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_THAT(oe.last_error(), HasSubstr("earlier; dedicated cores: "));
}

TEST_F(DedicatedCoreEnforcerTest, NoFreeCoreFailsTheDedicatedVm) {
  std::vector<DedicatedVmThreads> vms = {
      DedicatedVmThreads{"vm-d", true, {101, 102, 103, 104}, {100}, {}}};
  for (int tid : {103, 104}) kernel_.AddThread(tid);
  DedicatedCoreResult r = enforcer_.Enforce(vms);
  const DedicatedVmOutcome& d = Of(r, "vm-d");
  EXPECT_TRUE(absl::IsResourceExhausted(d.status)) << d.status;
  EXPECT_THAT(d.note, HasSubstr("needs 2 whole cores, 1 free of 2"));
  EXPECT_EQ(kernel_.write_calls(), 0);

  v1::VMEnforcement e;
  e.set_state(v1::ENFORCEMENT_STATE_ENFORCED);
  MergeDedicatedOutcome(d, e);
  EXPECT_EQ(e.state(), v1::ENFORCEMENT_STATE_FAILED);
  EXPECT_THAT(e.last_error(), HasSubstr("needs 2 whole cores"));
}

TEST(DedicatedCoreEnforcerStabilityTest, KeepsItsCoresWhenAnotherVmArrives) {
  host::FakeCpuAffinity kernel(host::CpuSet{0, 1, 2, 3, 4, 5, 6, 7});
  for (int tid : {100, 101, 102, 301, 302}) kernel.AddThread(tid);
  DedicatedCoreEnforcer enforcer(&kernel, FourByTwo());
  DedicatedCoreResult r =
      enforcer.Enforce({DedicatedVmThreads{"vm-b", true, {101, 102}, {100}, {}}});
  ASSERT_EQ(r.vms.size(), 1u);
  EXPECT_THAT(r.vms[0].cores, ElementsAre(3));
  r = enforcer.Enforce({DedicatedVmThreads{"vm-b", true, {101, 102}, {100}, {}},
                        DedicatedVmThreads{"vm-a", true, {301, 302}, {}, {}}});
  ASSERT_EQ(r.vms.size(), 2u);
  EXPECT_EQ(r.vms[0].vm_id, "vm-a");
  EXPECT_THAT(r.vms[0].cores, ElementsAre(2));
  EXPECT_EQ(r.vms[0].note, "dedicated core 2 (CPUs 2,6)");
  EXPECT_THAT(r.vms[1].cores, ElementsAre(3));
  EXPECT_EQ(kernel.CpusOf(301), host::CpuSet({2, 6}));
  EXPECT_EQ(kernel.CpusOf(101), host::CpuSet({3, 7}));
  EXPECT_EQ(kernel.CpusOf(100), host::CpuSet({0, 1, 4, 5}));
}

TEST_F(DedicatedCoreEnforcerTest, ThreadsThatExitAreNotErrors) {
  enforcer_.Enforce(Vms(true));
  kernel_.RemoveThread(102);
  kernel_.RemoveThread(200);
  DedicatedCoreResult r = enforcer_.Enforce(Vms(true));
  EXPECT_OK(Of(r, "vm-d").status) << Of(r, "vm-d").status;
  EXPECT_EQ(Of(r, "vm-d").vcpus, 1);
  EXPECT_OK(Of(r, "vm-o").status);
}

// The policy engine's pins (Assignment.pin): a pinned VM's vCPU threads,
// and nothing else, are confined to the pin; the CPUs go back with it.
TEST_F(DedicatedCoreEnforcerTest, PinnedVcpusAreConfinedAndGivenBackWhenUnpinned) {
  std::vector<DedicatedVmThreads> vms = Vms(false);
  vms[1].pin = host::CpuSet{2, 3};
  DedicatedCoreResult r = enforcer_.Enforce(vms);
  EXPECT_EQ(kernel_.CpusOf(201), host::CpuSet({2, 3}));
  for (int tid : {100, 101, 102, 200}) {
    EXPECT_EQ(kernel_.CpusOf(tid), host::CpuSet({0, 1, 2, 3})) << tid;
  }
  EXPECT_EQ(r.stats.affinity_writes, 1);
  const DedicatedVmOutcome& o = Of(r, "vm-o");
  EXPECT_OK(o.status) << o.status;
  EXPECT_EQ(o.pinned, host::CpuSet({2, 3}));
  EXPECT_EQ(o.vcpus, 1);
  EXPECT_EQ(o.vcpus_confined, 1);
  EXPECT_TRUE(Of(r, "vm-d").pinned.empty());

  kernel_.ResetCallCounts();
  enforcer_.Enforce(vms);
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(kernel_.read_calls(), 3);  // the vCPUs only

  // Pinned elsewhere: moved once more.
  vms[1].pin = host::CpuSet{0, 1};
  enforcer_.Enforce(vms);
  EXPECT_EQ(kernel_.CpusOf(201), host::CpuSet({0, 1}));

  vms[1].pin = host::CpuSet();
  r = enforcer_.Enforce(vms);
  EXPECT_EQ(kernel_.CpusOf(201), host::CpuSet({0, 1, 2, 3}));
  EXPECT_EQ(r.stats.threads_restored, 1);
  kernel_.ResetCallCounts();
  enforcer_.Enforce(vms);
  EXPECT_EQ(kernel_.read_calls(), 3);
  EXPECT_EQ(kernel_.write_calls(), 0);
}

TEST_F(DedicatedCoreEnforcerTest, APinKeepsOffDedicatedCores) {
  std::vector<DedicatedVmThreads> vms = Vms(true);
  vms[1].pin = host::CpuSet{1, 2, 3};
  DedicatedCoreResult r = enforcer_.Enforce(vms);
  EXPECT_EQ(kernel_.CpusOf(101), host::CpuSet({2, 3}));
  EXPECT_EQ(kernel_.CpusOf(201), host::CpuSet({1}));
  EXPECT_EQ(kernel_.CpusOf(200), host::CpuSet({0, 1}));
  EXPECT_OK(Of(r, "vm-o").status);
  EXPECT_EQ(Of(r, "vm-o").pinned, host::CpuSet({1}));

  // A pin on the dedicated VM's cores alone: not pinned, and said so.
  vms[1].pin = host::CpuSet{2, 3};
  r = enforcer_.Enforce(vms);
  EXPECT_EQ(kernel_.CpusOf(201), host::CpuSet({0, 1}));
  const DedicatedVmOutcome& o = Of(r, "vm-o");
  EXPECT_TRUE(o.pinned.empty());
  EXPECT_THAT(std::string(o.status.message()),
              HasSubstr("pin: CPUs 2-3 are all on other VMs' dedicated cores"));
  v1::VMEnforcement e;
  e.set_state(v1::ENFORCEMENT_STATE_ENFORCED);
  MergeDedicatedOutcome(o, e);
  EXPECT_EQ(e.state(), v1::ENFORCEMENT_STATE_ENFORCED);  // its cookie holds
  EXPECT_THAT(e.last_error(), HasSubstr("pin: CPUs 2-3"));
}

TEST_F(DedicatedCoreEnforcerTest, APinThatCannotBeSetIsReported) {
  kernel_.SetThreadErrno(201, EPERM);
  std::vector<DedicatedVmThreads> vms = Vms(false);
  vms[1].pin = host::CpuSet{2, 3};
  DedicatedCoreResult r = enforcer_.Enforce(vms);
  const DedicatedVmOutcome& o = Of(r, "vm-o");
  EXPECT_EQ(o.vcpus_confined, 0);
  EXPECT_THAT(std::string(o.status.message()),
              HasSubstr("pin: 0 of 1 vCPU threads confined to CPUs 2-3"));
}

// The reconcile loop runs the enforcer after each cookie pass and folds its
// outcome into the VMs' reports.
class ReconcileLoopDedicatedTest : public ::testing::Test {
 protected:
  ReconcileLoopDedicatedTest()
      : affinity(host::CpuSet{0, 1, 2, 3}),
        reconciler(&cookies, Supported()),
        enforcer(&affinity, TwoByTwo()) {}

  static ReconcilerOptions Supported() {
    ReconcilerOptions o;
    o.probe.support = v1::CORE_SCHED_SUPPORT_SUPPORTED;
    return o;
  }

  // A VM with an emulator thread (pid) and `vcpus` vCPU threads (pid + n).
  discovery::DiscoveredVm vm(const std::string& id, int pid, int vcpus) {
    discovery::DiscoveredVm v;
    v.vm_id = id;
    v.qemu_pid = pid;
    v.threads.push_back({pid, pid, "qemu-system-x86",
                         discovery::DiscoveredThread::Kind::kEmulator});
    cookies.AddTask(pid, pid);
    affinity.AddThread(pid);
    for (int i = 1; i <= vcpus; ++i) {
      v.threads.push_back({pid + i, pid, absl::StrCat("CPU ", i - 1, "/KVM"),
                           discovery::DiscoveredThread::Kind::kVcpu});
      cookies.AddTask(pid + i, pid);
      affinity.AddThread(pid + i);
    }
    return v;
  }

  host::FakeCoreSched cookies;
  host::FakeCpuAffinity affinity;
  CookieReconciler reconciler;
  DedicatedCoreEnforcer enforcer;
};

TEST_F(ReconcileLoopDedicatedTest, DedicatedVmGetsItsCoreAndReportsShortage) {
  using namespace std::chrono_literals;
  discovery::StaticVmDiscovery discovery;
  // vm-a asks for 4 vCPUs' worth of cores: more than a 2-core host can give.
  discovery.SetVms({vm("vm-a", 300, 4), vm("vm-d", 100, 2), vm("vm-o", 200, 1)});
  auto lookup = [](const discovery::DiscoveredVm& v) -> std::optional<v1::Assignment> {
    v1::Assignment a;
    a.set_vm_id(v.vm_id);
    a.set_trust_group(absl::StrCat("t/", v.vm_id));
    const bool dedicated = v.vm_id != "vm-o";
    a.set_isolation(dedicated ? v1::ISOLATION_LEVEL_DEDICATED
                              : v1::ISOLATION_LEVEL_VM);
    a.set_dedicated_cores(dedicated);
    return a;
  };
  ReconcileLoopOptions options;
  options.rescan_interval = 1h;
  ReconcileLoop loop(options, &discovery, &reconciler, lookup, nullptr,
                     &enforcer);
  loop.Start();
  ASSERT_TRUE(loop.WaitForPasses(1, 5s));
  // The first pass places VMs by id: vm-a, first, finds 1 core it could
  // have; from the second on, vm-d holds it.
  std::optional<ReconcileResult> first = loop.last_result();
  ASSERT_TRUE(first.has_value());
  for (const VmOutcome& out : first->vms) {
    if (out.vm_id != "vm-a") continue;
    EXPECT_EQ(out.enforcement.last_error(),
              "dedicated: vm-a needs 2 whole cores, 1 free of 2 (one core "
              "stays for the host and other VMs)");
  }
  affinity.ResetCallCounts();
  loop.Trigger();
  ASSERT_TRUE(loop.WaitForPasses(2, 5s));
  loop.Stop();
  EXPECT_EQ(affinity.write_calls(), 0);

  EXPECT_EQ(affinity.CpusOf(101), host::CpuSet({2, 3}));
  EXPECT_EQ(affinity.CpusOf(201), host::CpuSet({0, 1}));
  EXPECT_EQ(affinity.CpusOf(301), host::CpuSet({0, 1}));
  absl::StatusOr<std::vector<v1::VMObservation>> observations =
      loop.Observations();
  ASSERT_OK(observations);
  std::map<std::string, v1::VMEnforcement> by_vm;
  for (const v1::VMObservation& obs : *observations) {
    by_vm[obs.vm_id()] = obs.enforcement();
  }
  EXPECT_EQ(by_vm["vm-d"].state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_EQ(by_vm["vm-d"].last_error(), "");
  EXPECT_EQ(by_vm["vm-o"].state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_EQ(by_vm["vm-a"].state(), v1::ENFORCEMENT_STATE_FAILED);
  EXPECT_EQ(by_vm["vm-a"].last_error(),
            "dedicated: vm-a needs 2 whole cores, 0 free of 2 (core 1 held by "
            "vm-d; one core stays for the host and other VMs)");
  std::vector<DedicatedVmOutcome> dedicated = loop.last_dedicated();
  ASSERT_EQ(dedicated.size(), 3u);
  EXPECT_EQ(dedicated[1].vm_id, "vm-d");
  EXPECT_EQ(dedicated[1].note, "dedicated core 1 (CPUs 2-3)");
}

// A pin applies on the host it names only: a VM that migrated runs
// unpinned until the engine plans its new host.
TEST_F(ReconcileLoopDedicatedTest, APinAppliesOnTheHostItNames) {
  using namespace std::chrono_literals;
  discovery::StaticVmDiscovery discovery;
  discovery.SetVms({vm("vm-100", 100, 1), vm("vm-200", 200, 1)});
  auto lookup = [](const discovery::DiscoveredVm& v) -> std::optional<v1::Assignment> {
    v1::Assignment a;
    a.set_vm_id(v.vm_id);
    a.set_isolation(v1::ISOLATION_LEVEL_VM);
    a.set_trust_group(absl::StrCat("t/", v.vm_id));
    a.mutable_pin()->set_host_id(v.vm_id == "vm-100" ? "h1" : "h2");
    a.mutable_pin()->add_cpus(1);
    a.mutable_pin()->add_cpus(3);
    return a;
  };
  ReconcileLoopOptions options;
  options.rescan_interval = 1h;
  options.host_id = "h1";
  ReconcileLoop loop(options, &discovery, &reconciler, lookup, nullptr, &enforcer);
  loop.Start();
  ASSERT_TRUE(loop.WaitForPasses(1, 5s));
  loop.Stop();
  EXPECT_EQ(affinity.CpusOf(101), host::CpuSet({1, 3}));
  EXPECT_EQ(affinity.CpusOf(201), host::CpuSet({0, 1, 2, 3}));
}

}  // namespace
}  // namespace cosched::agent
