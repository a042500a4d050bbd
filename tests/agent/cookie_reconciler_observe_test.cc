// The CookieReconciler observing (cs-agent.yaml enforce: observe): no
// cookie is written, and each VM says what enforcing would do from the
// cookies the kernel holds now.
#include <cerrno>
#include <map>

#include "agent/cookie_reconciler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/testing/core_sched_fake.h"
#include "tests/agent/cookie_reconciler_fixture.h"

namespace cosched::agent {
namespace {

using namespace cosched::agent::reconciler_testing;  // the shared fixture
using ::testing::HasSubstr;

class ObserveTest : public CookieReconcilerTest {
 protected:
  ReconcilerOptions Observing() {
    ReconcilerOptions o = Options();
    o.observe = true;
    return o;
  }
};

TEST_F(ObserveTest, WritesNothingAndSaysWhatEnforcingWouldReach) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                              FakeVm(kernel_, "vm-2", 200),
                                              FakeVm(kernel_, "vm-3", 300)};
  assignments_["vm-1"] = Assign("vm-1", "acme/tenant");
  assignments_["vm-2"] = Assign("vm-2", "acme/tenant");  // vm-3: none, fails closed
  CookieReconciler reconciler(&kernel_, Observing());
  for (int pass = 0; pass < 2; ++pass) {
    kernel_.ResetCallCounts();
    ReconcileResult r = reconciler.Reconcile(vms, Lookup());
    EXPECT_EQ(kernel_.write_calls(), 0) << pass;
    for (const auto& vm : vms) EXPECT_EQ(OnlyCookie(vm), 0u) << vm.vm_id;
    ASSERT_EQ(r.vms.size(), 3u);
    for (const VmOutcome& vm : r.vms) {
      EXPECT_EQ(vm.enforcement.state(), v1::ENFORCEMENT_STATE_OBSERVED) << vm.vm_id;
      EXPECT_EQ(vm.cookie, 0u) << vm.vm_id;
      // Emulator scope: main, 2 vCPUs, the IO thread, the vhost worker.
      EXPECT_EQ(vm.enforcement.threads_found(), 5) << vm.vm_id;
      EXPECT_EQ(vm.enforcement.threads_tagged(), 5) << vm.vm_id;
    }
    EXPECT_EQ(r.vms[0].enforcement.observed_state(), v1::ENFORCEMENT_STATE_ENFORCED);
    EXPECT_EQ(r.vms[0].enforcement.applied_trust_group(), "acme/tenant");
    EXPECT_EQ(r.vms[1].enforcement.observed_state(), v1::ENFORCEMENT_STATE_ENFORCED);
    EXPECT_EQ(r.vms[2].enforcement.observed_state(), v1::ENFORCEMENT_STATE_FAIL_CLOSED);
    EXPECT_THAT(r.vms[0].enforcement.last_error(),
                HasSubstr("no cookie written: enforcing would make it enforced"));
    // Two groups: a cookie each, then every other in-scope thread moved
    // (a SHARE_FROM and a SHARE_TO per move). Each pass starts from the
    // kernel as it is, so the second would write the same again.
    EXPECT_TRUE(r.stats.observed);
    EXPECT_EQ(r.stats.cookie_writes, 0);
    EXPECT_EQ(r.stats.threads_changed, 0);
    EXPECT_EQ(r.stats.observed_moves, 15 - 2);
    EXPECT_GE(r.stats.observed_writes, 2 + r.stats.observed_moves);
  }
}

TEST_F(ObserveTest, AfterEnforcingItWouldWriteOnlyForWhatChanged) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                              FakeVm(kernel_, "vm-2", 200)};
  assignments_["vm-1"] = Assign("vm-1", "acme/tenant");
  assignments_["vm-2"] = Assign("vm-2", "acme/tenant");
  CookieReconciler reconciler(&kernel_, Options());
  reconciler.Reconcile(vms, Lookup());
  const uint64_t acme = OnlyCookie(vms[0]);
  ASSERT_NE(acme, 0u);

  // A reload to observe: the cookies set stay, and nothing more is due.
  reconciler.SetPolicy(/*fail_open=*/false, /*clear_on_hazard=*/false, /*observe=*/true);
  kernel_.ResetCallCounts();
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(r.stats.observed_writes, 0);
  EXPECT_EQ(r.vms[0].enforcement.observed_state(), v1::ENFORCEMENT_STATE_ENFORCED);

  // A new VM of the group: it alone would be moved into acme's cookie,
  // which enforcing would adopt from the kernel.
  vms.push_back(FakeVm(kernel_, "vm-3", 300));
  assignments_["vm-3"] = Assign("vm-3", "acme/tenant");
  r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(r.stats.observed_moves, 5);
  EXPECT_EQ(OnlyCookie(vms[2]), 0u);
  EXPECT_EQ(OnlyCookie(vms[0]), acme);

  // Back to on: now it is written, into the group's existing cookie.
  reconciler.SetPolicy(false, false, /*observe=*/false);
  r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(OnlyCookie(vms[2]), acme);
  EXPECT_EQ(r.vms[2].enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_FALSE(r.stats.observed);
  EXPECT_EQ(r.stats.threads_changed, 5);
}

TEST_F(ObserveTest, ItShowsAFailureEnforcingWouldMeet) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100)};
  assignments_["vm-1"] = Assign("vm-1", "acme/tenant");
  kernel_.SetTaskErrno(102, EPERM);  // a vCPU thread the agent may not touch
  CookieReconciler reconciler(&kernel_, Observing());
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  const v1::VMEnforcement& e = r.vms[0].enforcement;
  EXPECT_EQ(e.state(), v1::ENFORCEMENT_STATE_OBSERVED);
  EXPECT_EQ(e.observed_state(), v1::ENFORCEMENT_STATE_PARTIAL);
  EXPECT_EQ(e.threads_untaggable(), 1);
  EXPECT_THAT(e.last_error(), HasSubstr("enforcing would make it partial"));
  EXPECT_THAT(e.last_error(), HasSubstr("102"));
}

TEST_F(ObserveTest, EnforcementOffTakesNoCookieOffWhileObserving) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100, 2, /*cookie=*/55)};
  assignments_["vm-1"] = Assign("vm-1", "acme/tenant");
  v1::HostEnablement off;
  off.set_state(v1::HostEnablement::STATE_OFF);
  off.set_reason("an operator switched enforcement off on this host");
  ReconcilerOptions options = Observing();
  options.enablement = [&off] { return off; };
  CookieReconciler reconciler(&kernel_, options);
  kernel_.ResetCallCounts();
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(OnlyCookie(vms[0]), 55u);
  EXPECT_TRUE(r.enforcement_off);
  EXPECT_EQ(r.vms[0].enforcement.observed_state(), v1::ENFORCEMENT_STATE_OFF);
  EXPECT_GT(r.stats.observed_writes, 0);
}

// A canary observes while a staged rollout holds it: what it shows is what
// enforcing would do once the rollout enables it.
TEST_F(ObserveTest, WhileARolloutHoldsTheHostItShowsWhatEnablingWouldDo) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100)};
  assignments_["vm-1"] = Assign("vm-1", "acme/tenant");
  v1::HostEnablement held;
  held.set_state(v1::HostEnablement::STATE_NOT_ENABLED);
  held.set_reason("new hosts wait for a rollout");
  ReconcilerOptions options = Observing();
  options.enablement = [&held] { return held; };
  CookieReconciler reconciler(&kernel_, options);
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(r.vms[0].enforcement.observed_state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_THAT(r.vms[0].enforcement.last_error(),
              HasSubstr("once csd enables cookies here (now not enabled), enforcing would make "
                        "it enforced"));
}

}  // namespace
}  // namespace cosched::agent
