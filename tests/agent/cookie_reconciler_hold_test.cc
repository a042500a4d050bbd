// The CookieReconciler when it must not tag as usual: a hazard holds the
// cookies (or, with on_hazard: clear, takes them off), csd says cookies are
// waived or not enabled yet, or an operator switched enforcement off.
#include <map>

#include "agent/cookie_reconciler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/testing/core_sched_fake.h"
#include "tests/agent/cookie_reconciler_fixture.h"

namespace cosched::agent {
namespace {

using namespace cosched::agent::reconciler_testing;  // the shared fixture

v1::Hazard SchedExt() {
  v1::Hazard h;
  h.set_name("sched_ext");
  h.set_detail("sched_ext state 'enabled', scheduler 'scx_rusty'");
  return h;
}

TEST_F(CookieReconcilerTest, AHazardHoldsTheCookiesAsTheyAre) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                              FakeVm(kernel_, "vm-2", 200)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  CookieReconciler reconciler(&kernel_, WithHazards());
  reconciler.Reconcile(vms, Lookup());
  const uint64_t c1 = OnlyCookie(vms[0]);

  hazards_ = {SchedExt()};
  assignments_["vm-1"] = Assign("vm-1", "a/tenant", v1::ISOLATION_LEVEL_TENANT);
  kernel_.ResetCallCounts();
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(OnlyCookie(vms[0]), c1);
  for (const VmOutcome& vm : r.vms) {
    EXPECT_EQ(vm.enforcement.state(), v1::ENFORCEMENT_STATE_HELD) << vm.vm_id;
    EXPECT_EQ(vm.enforcement.last_error(),
              "tagging held: sched_ext state 'enabled', scheduler 'scx_rusty'; the VM's "
              "threads keep the cookies they have");
  }
}

TEST_F(CookieReconcilerTest, OnHazardClearTakesEveryCookieOffOnceAndRetagsAfter) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                              FakeVm(kernel_, "vm-2", 200)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  CookieReconciler reconciler(&kernel_, WithHazards(/*clear_on_hazard=*/true));
  reconciler.Reconcile(vms, Lookup());
  const uint64_t before = OnlyCookie(vms[0]);
  ASSERT_NE(before, 0u);
  ASSERT_NE(OnlyCookie(vms[1]), 0u);  // failed closed

  hazards_ = {SchedExt()};
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(OnlyCookie(vms[0]), 0u);
  EXPECT_EQ(OnlyCookie(vms[1]), 0u);
  EXPECT_EQ(kernel_.CookieOf(kAgentTid), 0u);
  for (const VmOutcome& vm : r.vms) {
    EXPECT_EQ(vm.enforcement.state(), v1::ENFORCEMENT_STATE_HELD) << vm.vm_id;
    EXPECT_THAT(vm.enforcement.last_error(),
                ::testing::EndsWith("; on_hazard: clear took every cookie off"));
  }
  // Cleared once: later passes under the hazard write nothing, and a new
  // VM is not tagged.
  vms.push_back(FakeVm(kernel_, "vm-3", 300));
  kernel_.ResetCallCounts();
  r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(OnlyCookie(vms[2]), 0u);

  hazards_.clear();
  r = reconciler.Reconcile(vms, Lookup());
  const uint64_t after = OnlyCookie(vms[0]);
  EXPECT_NE(after, 0u);
  EXPECT_NE(OnlyCookie(vms[2]), 0u);
  EXPECT_NE(OnlyCookie(vms[2]), after);
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
}

TEST_F(CookieReconcilerTest, OnHazardClearSaysWhichThreadsKeptTheirCookie) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  CookieReconciler reconciler(&kernel_, WithHazards(/*clear_on_hazard=*/true));
  reconciler.Reconcile(vms, Lookup());
  kernel_.SetTaskErrno(101, EPERM);
  hazards_ = {SchedExt()};
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_NE(kernel_.CookieOf(101), 0u);
  EXPECT_EQ(kernel_.CookieOf(100), 0u);
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_HELD);
  EXPECT_THAT(r.vms[0].enforcement.last_error(),
              ::testing::HasSubstr("on_hazard: clear could not take the cookie off 1 threads"));
}

TEST_F(CookieReconcilerTest, WaivedWritesNothingAndSaysCsdsReason) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  v1::HostEnablement enablement;
  ReconcilerOptions options = Options();
  options.enablement = [&enablement] { return enablement; };
  CookieReconciler reconciler(&kernel_, options);
  reconciler.Reconcile(vms, Lookup());
  const uint64_t c1 = OnlyCookie(vms[0]);
  ASSERT_NE(c1, 0u);

  enablement.set_state(v1::HostEnablement::STATE_WAIVED);
  enablement.set_reason("enforce: when-vulnerable waives cookies on this host: its CPUs report not affected by l1tf, mds");
  vms.push_back(FakeVm(kernel_, "vm-2", 200));
  kernel_.ResetCallCounts();
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(OnlyCookie(vms[0]), c1);
  EXPECT_EQ(OnlyCookie(vms[1]), 0u);
  for (const VmOutcome& vm : r.vms) {
    EXPECT_EQ(vm.enforcement.state(), v1::ENFORCEMENT_STATE_WAIVED) << vm.vm_id;
    EXPECT_EQ(vm.enforcement.last_error(),
              "cookies waived: enforce: when-vulnerable waives cookies on this host: its CPUs "
              "report not affected by l1tf, mds; the VM's threads keep the cookies they have");
  }

  // A hazard is named before it.
  options.hazards = [] { return std::vector<v1::Hazard>{SchedExt()}; };
  CookieReconciler held(&kernel_, options);
  r = held.Reconcile(vms, Lookup());
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_HELD);

  // csd says enforce again: tagging resumes.
  enablement.set_state(v1::HostEnablement::STATE_ENFORCE);
  r = reconciler.Reconcile(vms, Lookup());
  EXPECT_NE(OnlyCookie(vms[1]), 0u);
  EXPECT_EQ(r.vms[1].enforcement.state(), v1::ENFORCEMENT_STATE_FAIL_CLOSED);
}

// A host a staged rollout has not enabled takes the waived path: no
// cookie made or moved, not even a fail-closed one for a VM without an
// assignment, and the cookies already set stay.
TEST_F(CookieReconcilerTest, NotEnabledWritesNothingAndSaysCsdsReason) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  v1::HostEnablement enablement;
  ReconcilerOptions options = Options();
  options.enablement = [&enablement] { return enablement; };
  CookieReconciler reconciler(&kernel_, options);
  reconciler.Reconcile(vms, Lookup());
  const uint64_t c1 = OnlyCookie(vms[0]);
  ASSERT_NE(c1, 0u);

  enablement.set_state(v1::HostEnablement::STATE_NOT_ENABLED);
  enablement.set_reason("rollout r-7 (running, stage 1 of 3 at 10%) has not enabled this host yet");
  assignments_["vm-2"] = Assign("vm-2", "a/vm/vm-2");
  vms.push_back(FakeVm(kernel_, "vm-2", 200));
  vms.push_back(FakeVm(kernel_, "vm-3", 300));  // no assignment: would be fail-closed
  kernel_.ResetCallCounts();
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(OnlyCookie(vms[0]), c1);
  EXPECT_EQ(OnlyCookie(vms[1]), 0u);
  EXPECT_EQ(OnlyCookie(vms[2]), 0u);
  for (const VmOutcome& vm : r.vms) {
    EXPECT_EQ(vm.enforcement.state(), v1::ENFORCEMENT_STATE_NOT_ENABLED) << vm.vm_id;
    EXPECT_EQ(vm.enforcement.last_error(),
              "cookies not enabled: rollout r-7 (running, stage 1 of 3 at 10%) has not enabled "
              "this host yet; the VM's threads keep the cookies they have");
  }

  // The rollout reaches the host: tagging starts.
  enablement.set_state(v1::HostEnablement::STATE_ENFORCE);
  enablement.clear_reason();
  r = reconciler.Reconcile(vms, Lookup());
  EXPECT_NE(OnlyCookie(vms[1]), 0u);
  EXPECT_EQ(r.vms[1].enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
}

// Issue #33 item 4: the off switch takes every cookie off (fail-closed
// ones and impostors' included), makes none while it holds, also under a
// hazard, and on again restores the groups.
TEST_F(CookieReconcilerTest, OffTakesEveryCookieOffAndOnRestoresTheGroups) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                              FakeVm(kernel_, "vm-2", 200),
                                              FakeVm(kernel_, "vm-3", 300)};
  vms[2].MarkImpostor("it runs /tmp/q, not an allowed VMM binary");
  assignments_["vm-1"] = Assign("vm-1", "acme/tenant");
  assignments_["vm-2"] = Assign("vm-2", "acme/tenant");
  v1::HostEnablement enablement;
  ReconcilerOptions options = WithHazards();
  options.enablement = [&enablement] { return enablement; };
  CookieReconciler reconciler(&kernel_, options);
  reconciler.Reconcile(vms, Lookup());
  const uint64_t acme = OnlyCookie(vms[0]);
  ASSERT_NE(acme, 0u);
  ASSERT_EQ(OnlyCookie(vms[1]), acme);
  ASSERT_NE(OnlyCookie(vms[2]), 0u);

  enablement.set_state(v1::HostEnablement::STATE_OFF);
  enablement.set_reason("an operator switched enforcement off on this host");
  hazards_ = {SchedExt()};
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  for (size_t i = 0; i < vms.size(); ++i) {
    EXPECT_EQ(OnlyCookie(vms[i]), 0u) << i;
    EXPECT_EQ(r.vms[i].enforcement.state(), v1::ENFORCEMENT_STATE_OFF) << i;
    EXPECT_EQ(r.vms[i].enforcement.last_error(),
              "enforcement off: an operator switched enforcement off on this host; every cookie "
              "was taken off")
        << i;
  }
  // While it holds nothing is written, not even for a new VM.
  vms.push_back(FakeVm(kernel_, "vm-4", 400));
  kernel_.ResetCallCounts();
  reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(OnlyCookie(vms[3]), 0u);

  hazards_.clear();
  enablement.set_state(v1::HostEnablement::STATE_ENFORCE);
  enablement.clear_reason();
  r = reconciler.Reconcile(vms, Lookup());
  const uint64_t again = OnlyCookie(vms[0]);
  EXPECT_NE(again, 0u);
  EXPECT_EQ(OnlyCookie(vms[1]), again);
  EXPECT_NE(OnlyCookie(vms[2]), 0u);
  EXPECT_NE(OnlyCookie(vms[2]), again);
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
}

}  // namespace
}  // namespace cosched::agent
