// The CookieReconciler on a fake kernel while it tags: groups, adoption
// after a restart, scopes, errors and blind read-back. When tagging is held,
// waived, not enabled or switched off: cookie_reconciler_hold_test.cc.
#include "agent/cookie_reconciler.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/testing/core_sched_fake.h"
#include "tests/agent/cookie_reconciler_fixture.h"

namespace cosched::agent {
namespace {

using namespace cosched::agent::reconciler_testing;  // the shared fixture

TEST_F(CookieReconcilerTest, OneCookiePerGroupAndNothingLeftOnTheAgent) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                   FakeVm(kernel_, "vm-2", 200)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  assignments_["vm-2"] = Assign("vm-2", "b/vm/vm-2");
  CookieReconciler reconciler(&kernel_, Options());
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());

  uint64_t c1 = OnlyCookie(vms[0]), c2 = OnlyCookie(vms[1]);
  EXPECT_NE(c1, 0u);
  EXPECT_NE(c2, 0u);
  EXPECT_NE(c1, c2);
  EXPECT_EQ(kernel_.CookieOf(kAgentTid), 0u);
  ASSERT_EQ(r.vms.size(), 2u);
  for (const auto& vm : r.vms) {
    EXPECT_EQ(vm.enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
    EXPECT_EQ(vm.enforcement.threads_found(), 5);
    EXPECT_EQ(vm.enforcement.threads_tagged(), 5);
    EXPECT_EQ(vm.enforcement.threads_wrong(), 0);
    // For csd's placement: the vCPU threads among them.
    EXPECT_EQ(vm.enforcement.vcpus(), 2);
  }
  EXPECT_EQ(r.vms[0].enforcement.applied_trust_group(), "a/vm/vm-1");
  EXPECT_EQ(r.vms[0].cookie, c1);
}

TEST_F(CookieReconcilerTest, NothingChangedMeansNoWrites) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                   FakeVm(kernel_, "vm-2", 200)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  assignments_["vm-2"] = Assign("vm-2", "b/vm/vm-2");
  CookieReconciler reconciler(&kernel_, Options());
  reconciler.Reconcile(vms, Lookup());
  kernel_.ResetCallCounts();
  ReconcileResult again = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(again.stats.cookie_writes, 0);
  EXPECT_EQ(again.stats.threads_changed, 0);
}

TEST_F(CookieReconcilerTest, TenantGroupSharesOneCookie) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                   FakeVm(kernel_, "vm-2", 200),
                                   FakeVm(kernel_, "vm-3", 300)};
  assignments_["vm-1"] = Assign("vm-1", "a/tenant", v1::ISOLATION_LEVEL_TENANT);
  assignments_["vm-2"] = Assign("vm-2", "a/tenant", v1::ISOLATION_LEVEL_TENANT);
  assignments_["vm-3"] = Assign("vm-3", "b/vm/vm-3");
  CookieReconciler reconciler(&kernel_, Options());
  reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(OnlyCookie(vms[0]), OnlyCookie(vms[1]));
  EXPECT_NE(OnlyCookie(vms[0]), OnlyCookie(vms[2]));
}

TEST_F(CookieReconcilerTest, LevelNoneClearsCookies) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100, 2, /*cookie=*/77)};
  assignments_["vm-1"] = Assign("vm-1", "", v1::ISOLATION_LEVEL_NONE);
  CookieReconciler reconciler(&kernel_, Options());
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(OnlyCookie(vms[0]), 0u);
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
}

TEST_F(CookieReconcilerTest, UnassignedVmFailsClosedOrIsLeftWhenFailOpen) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                   FakeVm(kernel_, "vm-2", 200)};
  CookieReconciler closed(&kernel_, Options());
  ReconcileResult r = closed.Reconcile(vms, Lookup());
  EXPECT_NE(OnlyCookie(vms[0]), 0u);
  EXPECT_NE(OnlyCookie(vms[0]), OnlyCookie(vms[1]));
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_FAIL_CLOSED);
  EXPECT_EQ(r.vms[0].enforcement.applied_trust_group(), "");

  host::FakeCoreSched other;
  std::vector<discovery::DiscoveredVm> open_vms = {FakeVm(other, "vm-3", 300)};
  ReconcilerOptions o = Options();
  o.fail_open = true;
  CookieReconciler open(&other, o);
  r = open.Reconcile(open_vms, Lookup());
  EXPECT_EQ(other.write_calls(), 0);
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_PENDING);
}

TEST_F(CookieReconcilerTest, UnnamedQemusFailClosedApart) {
  // QEMU without -name or -uuid: no id, yet each gets a cookie of its own.
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "", 100), FakeVm(kernel_, "", 200)};
  CookieReconciler reconciler(&kernel_, Options());
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_NE(OnlyCookie(vms[0]), 0u);
  EXPECT_NE(OnlyCookie(vms[1]), 0u);
  EXPECT_NE(OnlyCookie(vms[0]), OnlyCookie(vms[1]));
  EXPECT_EQ(r.vms[0].group, "~fail-closed-pid/100");
  EXPECT_EQ(r.vms[1].group, "~fail-closed-pid/200");
}

// Issue #32 item 10: before, a QEMU without a name (pid 100) and a VM named
// "pid-100" both fell closed into "~fail-closed/pid-100", one cookie.
TEST_F(CookieReconcilerTest, AnUnnamedQemuNeverSharesAFailClosedCookieWithANamedVm) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "", 100),
                                              FakeVm(kernel_, "pid-100", 200)};
  CookieReconciler reconciler(&kernel_, Options());
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_NE(r.vms[0].group, r.vms[1].group);
  EXPECT_NE(OnlyCookie(vms[0]), 0u);
  EXPECT_NE(OnlyCookie(vms[0]), OnlyCookie(vms[1]));
}

// A kernel whose task `reuse_tid` becomes another process's, holding a
// cookie of its own, right before the next SHARE_FROM of it: the group's
// anchor exited and its tid was reused between the pass's check of the
// anchor and the courier's copy.
class AnchorTidReusedKernel : public host::FakeCoreSched {
 public:
  static constexpr uint64_t kStranger = 0x5151;
  int reuse_tid = 0;

  absl::Status ShareFrom(int tid) override {
    if (tid == reuse_tid) {
      reuse_tid = 0;
      RemoveTask(tid);
      AddTask(tid, 9000, 9000, kStranger);
    }
    return FakeCoreSched::ShareFrom(tid);
  }
};

// Issue #32 item 10: before, the courier shared whatever cookie it took.
TEST_F(CookieReconcilerTest, ACourierThatTookAnotherCookieSharesNothing) {
  AnchorTidReusedKernel kernel;
  discovery::DiscoveredVm vm = FakeVm(kernel, "vm-1", 100);
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  CookieReconciler reconciler(&kernel, Options());
  reconciler.Reconcile({vm}, Lookup());
  const uint64_t group = kernel.CookieOf(100);
  ASSERT_NE(group, 0u);
  // vm-1 starts a thread; the anchor's tid goes to a stranger meanwhile.
  vm.threads.push_back(discovery::DiscoveredThread{150, 100, "worker", Kind::kEmulator});
  kernel.AddTask(150, 100, 100, 0);
  kernel.reuse_tid = 100;
  ReconcileResult r = reconciler.Reconcile({vm}, Lookup());
  EXPECT_NE(kernel.CookieOf(150), AnchorTidReusedKernel::kStranger);
  EXPECT_NE(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
  // The stranger is no thread of vm-1 any more: the next pass gives the
  // new thread the group's cookie.
  vm.threads.erase(vm.threads.begin());
  r = reconciler.Reconcile({vm}, Lookup());
  EXPECT_EQ(kernel.CookieOf(150), group);
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
}

TEST_F(CookieReconcilerTest, RestartedAgentAdoptsCookiesInTheKernel) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                   FakeVm(kernel_, "vm-2", 200),
                                   FakeVm(kernel_, "vm-3", 300)};
  assignments_["vm-1"] = Assign("vm-1", "a/tenant", v1::ISOLATION_LEVEL_TENANT);
  assignments_["vm-2"] = Assign("vm-2", "a/tenant", v1::ISOLATION_LEVEL_TENANT);
  assignments_["vm-3"] = Assign("vm-3", "b/vm/vm-3");
  {
    CookieReconciler first(&kernel_, Options());
    first.Reconcile(vms, Lookup());
  }
  uint64_t a = OnlyCookie(vms[0]), b = OnlyCookie(vms[2]);
  kernel_.ResetCallCounts();
  CookieReconciler restarted(&kernel_, Options());
  ReconcileResult r = restarted.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(OnlyCookie(vms[0]), a);
  EXPECT_EQ(OnlyCookie(vms[1]), a);
  EXPECT_EQ(OnlyCookie(vms[2]), b);
  for (const auto& vm : r.vms) {
    EXPECT_EQ(vm.enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
  }
}

TEST_F(CookieReconcilerTest, RestartWithoutAssignmentsAdoptsAndClearsNothing) {
  // The agent lost its state file: it knows no assignment, yet the kernel
  // holds csd's groups. vm-1 and vm-2 share a tenant cookie; vm-1's
  // assignment had full scope, so its helper process is tagged too.
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                   FakeVm(kernel_, "vm-2", 200, 1)};
  discovery::DiscoveredThread helper{150, 150, "virtiofsd", Kind::kHelper};
  vms[0].threads.push_back(helper);
  kernel_.AddTask(helper.tid, helper.pid);
  assignments_["vm-1"] = Assign("vm-1", "a/tenant", v1::ISOLATION_LEVEL_TENANT,
                                v1::THREAD_SCOPE_FULL);
  assignments_["vm-2"] = Assign("vm-2", "a/tenant", v1::ISOLATION_LEVEL_TENANT);
  {
    CookieReconciler first(&kernel_, Options());
    first.Reconcile(vms, Lookup());
  }
  const uint64_t tenant = OnlyCookie(vms[0]);
  ASSERT_NE(tenant, 0u);
  ASSERT_EQ(OnlyCookie(vms[1]), tenant);

  assignments_.clear();
  kernel_.ResetCallCounts();
  const int cleared_before = kernel_.cookies_cleared();
  CookieReconciler restarted(&kernel_, Options());
  ReconcileResult r = restarted.Reconcile(vms, Lookup());
  // The VM with more threads keeps the cookie; the other fails closed apart
  // on a new one, moved there directly. No thread passed through cookie 0.
  EXPECT_EQ(kernel_.cookies_cleared(), cleared_before);
  EXPECT_EQ(OnlyCookie(vms[0]), tenant);
  const uint64_t own = OnlyCookie(vms[1]);
  EXPECT_NE(own, 0u);
  EXPECT_NE(own, tenant);
  for (const auto& vm : r.vms) {
    EXPECT_EQ(vm.enforcement.state(), v1::ENFORCEMENT_STATE_FAIL_CLOSED) << vm.vm_id;
  }
  // And it stays so: no flapping while csd is away.
  kernel_.ResetCallCounts();
  restarted.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
}

TEST_F(CookieReconcilerTest, MergesPerProcessCookiesWithoutFlapping) {
  // libvirt's sched_core="emulator" gives each QEMU process its own cookie.
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100, 2, 501),
                                   FakeVm(kernel_, "vm-2", 200, 2, 502),
                                   FakeVm(kernel_, "vm-3", 300, 2, 503)};
  assignments_["vm-1"] = Assign("vm-1", "a/tenant", v1::ISOLATION_LEVEL_TENANT);
  assignments_["vm-2"] = Assign("vm-2", "a/tenant", v1::ISOLATION_LEVEL_TENANT);
  assignments_["vm-3"] = Assign("vm-3", "b/vm/vm-3");
  CookieReconciler reconciler(&kernel_, Options());
  reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(OnlyCookie(vms[0]), OnlyCookie(vms[1]));
  EXPECT_EQ(OnlyCookie(vms[2]), 503u);  // adopted, not recreated
  for (int pass = 0; pass < 5; ++pass) {
    kernel_.ResetCallCounts();
    reconciler.Reconcile(vms, Lookup());
    EXPECT_EQ(kernel_.write_calls(), 0) << "pass " << pass;
  }
}

TEST_F(CookieReconcilerTest, SplitsAGroupThatNoLongerShares) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                   FakeVm(kernel_, "vm-2", 200)};
  assignments_["vm-1"] = Assign("vm-1", "a/tenant", v1::ISOLATION_LEVEL_TENANT);
  assignments_["vm-2"] = Assign("vm-2", "a/tenant", v1::ISOLATION_LEVEL_TENANT);
  CookieReconciler reconciler(&kernel_, Options());
  reconciler.Reconcile(vms, Lookup());
  ASSERT_EQ(OnlyCookie(vms[0]), OnlyCookie(vms[1]));
  assignments_["vm-2"] = Assign("vm-2", "a/vm/vm-2");
  reconciler.Reconcile(vms, Lookup());
  EXPECT_NE(OnlyCookie(vms[0]), OnlyCookie(vms[1]));
  EXPECT_NE(OnlyCookie(vms[1]), 0u);
}

TEST_F(CookieReconcilerTest, NewThreadIsTaggedAndOnlyItIsWritten) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  CookieReconciler reconciler(&kernel_, Options());
  reconciler.Reconcile(vms, Lookup());
  kernel_.AddTask(150, 100);  // a hot-added vCPU without the cookie
  vms[0].threads.push_back(discovery::DiscoveredThread{150, 100, "CPU 2/KVM", Kind::kVcpu});
  kernel_.ResetCallCounts();
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(OnlyCookie(vms[0]), r.vms[0].cookie);
  EXPECT_EQ(kernel_.write_calls(), 2);  // SHARE_FROM the anchor, SHARE_TO it
  EXPECT_EQ(r.stats.threads_changed, 1);
}

TEST_F(CookieReconcilerTest, AnchorExitingKeepsTheGroupCookie) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  CookieReconciler reconciler(&kernel_, Options());
  reconciler.Reconcile(vms, Lookup());
  uint64_t cookie = OnlyCookie(vms[0]);
  kernel_.RemoveTask(100);  // the anchor (QEMU's main thread) is gone
  kernel_.ResetCallCounts();
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(r.vms[0].cookie, cookie);
  EXPECT_EQ(r.vms[0].enforcement.threads_found(), 4);
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
}

TEST_F(CookieReconcilerTest, VcpuScopeTagsOnlyVcpus) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1", v1::ISOLATION_LEVEL_VM,
                                v1::THREAD_SCOPE_VCPUS);
  CookieReconciler reconciler(&kernel_, Options());
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_NE(kernel_.CookieOf(101), 0u);
  EXPECT_EQ(kernel_.CookieOf(101), kernel_.CookieOf(102));
  EXPECT_EQ(kernel_.CookieOf(100), 0u);
  EXPECT_EQ(kernel_.CookieOf(103), 0u);
  EXPECT_EQ(r.vms[0].enforcement.threads_found(), 2);
}

TEST_F(CookieReconcilerTest, NarrowingTheScopeClearsThreadsLeftOutside) {
  // Failed closed first (every thread tagged), then assigned at scope vcpus.
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100)};
  CookieReconciler reconciler(&kernel_, Options());
  reconciler.Reconcile(vms, Lookup());
  ASSERT_NE(kernel_.CookieOf(100), 0u);
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1", v1::ISOLATION_LEVEL_VM,
                                v1::THREAD_SCOPE_VCPUS);
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.CookieOf(100), 0u);  // QEMU's main thread
  EXPECT_EQ(kernel_.CookieOf(103), 0u);  // IO thread
  EXPECT_NE(kernel_.CookieOf(101), 0u);
  EXPECT_EQ(kernel_.CookieOf(101), kernel_.CookieOf(102));
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_EQ(r.vms[0].enforcement.threads_found(), 2);
}

TEST_F(CookieReconcilerTest, ErrorsAreReportedPerVm) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  kernel_.SetTaskErrno(102, EPERM);
  kernel_.RemoveTask(103);  // exited between discovery and tagging: fine
  CookieReconciler reconciler(&kernel_, Options());
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  const v1::VMEnforcement& e = r.vms[0].enforcement;
  EXPECT_EQ(e.threads_found(), 4);
  EXPECT_EQ(e.threads_untaggable(), 1);
  EXPECT_EQ(e.threads_tagged(), 3);
  EXPECT_EQ(e.state(), v1::ENFORCEMENT_STATE_PARTIAL);
  EXPECT_NE(e.last_error().find("ptrace"), std::string::npos) << e.last_error();
}

TEST_F(CookieReconcilerTest, HostWithoutSmtSaysSoForEachVm) {
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                   FakeVm(kernel_, "vm-2", 200)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  ReconcilerOptions o;
  o.smt_active = false;
  o.probe.support = v1::CORE_SCHED_SUPPORT_NO_KERNEL_SUPPORT;
  o.probe.detail = "kernel lacks core scheduling (CONFIG_SCHED_CORE)";
  CookieReconciler reconciler(&kernel_, o);
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls() + kernel_.get_calls(), 0);
  for (const auto& vm : r.vms) {
    EXPECT_EQ(vm.enforcement.state(), v1::ENFORCEMENT_STATE_FAILED);
    EXPECT_EQ(vm.enforcement.threads_untaggable(), 5);
    EXPECT_NE(vm.enforcement.last_error().find("no SMT on this host"), std::string::npos);
  }
}

// Linux 6.1 before its pointer-hash key is ready: GET reads 0 for every
// task. The agent must neither take that for "untagged" (a new cookie and
// every thread rewritten each pass) nor report the VM enforced at cookie 0.
TEST_F(CookieReconcilerTest, BlindReadBackSetsEachThreadOnceAndSaysSo) {
  kernel_.SetReadbackBlind(true);
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                   FakeVm(kernel_, "vm-2", 200)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  assignments_["vm-2"] = Assign("vm-2", "b/vm/vm-2");
  CookieReconciler reconciler(&kernel_, Options());
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  const uint64_t c1 = OnlyCookie(vms[0]), c2 = OnlyCookie(vms[1]);
  EXPECT_NE(c1, 0u);
  EXPECT_NE(c2, 0u);
  EXPECT_NE(c1, c2);
  EXPECT_EQ(kernel_.CookieOf(kAgentTid), 0u);
  EXPECT_TRUE(r.stats.readback_blind);
  EXPECT_EQ(r.stats.threads_unverified, 10);
  for (const VmOutcome& vm : r.vms) {
    const v1::VMEnforcement& e = vm.enforcement;
    EXPECT_EQ(e.state(), v1::ENFORCEMENT_STATE_PENDING) << vm.vm_id;
    EXPECT_EQ(e.threads_found(), 5) << vm.vm_id;
    EXPECT_EQ(e.threads_tagged(), 0) << vm.vm_id;
    EXPECT_EQ(e.threads_wrong(), 0) << vm.vm_id;
    EXPECT_NE(e.last_error().find("cannot be verified"), std::string::npos) << e.last_error();
    EXPECT_NE(e.last_error().find("5 threads"), std::string::npos) << e.last_error();
  }
  // Later passes read the same zeros and write nothing.
  for (int pass = 0; pass < 3; ++pass) {
    kernel_.ResetCallCounts();
    r = reconciler.Reconcile(vms, Lookup());
    EXPECT_EQ(kernel_.write_calls(), 0) << "pass " << pass;
    EXPECT_TRUE(r.stats.readback_blind);
    EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_PENDING);
  }
  EXPECT_EQ(OnlyCookie(vms[0]), c1);
  EXPECT_EQ(OnlyCookie(vms[1]), c2);
}

TEST_F(CookieReconcilerTest, BlindReadBackStillTagsNewThreadsOnceAndSurvivesTheAnchor) {
  kernel_.SetReadbackBlind(true);
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  CookieReconciler reconciler(&kernel_, Options());
  reconciler.Reconcile(vms, Lookup());
  const uint64_t cookie = OnlyCookie(vms[0]);
  // A vhost kernel thread of a NIC added later, outside QEMU's group.
  kernel_.AddTask(160, 160);
  vms[0].threads.push_back(discovery::DiscoveredThread{160, 160, "vhost-100", Kind::kVhostWorker});
  kernel_.ResetCallCounts();
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.CookieOf(160), cookie);
  EXPECT_EQ(kernel_.write_calls(), 2);  // SHARE_FROM the anchor, SHARE_TO it
  kernel_.ResetCallCounts();
  reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  // The anchor (QEMU's main thread, where the cookie was made) exits: the
  // group keeps its cookie through another thread it was given to.
  kernel_.RemoveTask(100);
  vms[0].threads.erase(vms[0].threads.begin());
  kernel_.AddTask(170, 100);
  vms[0].threads.push_back(discovery::DiscoveredThread{170, 100, "CPU 2/KVM", Kind::kVcpu});
  kernel_.ResetCallCounts();
  r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 2);
  EXPECT_EQ(OnlyCookie(vms[0]), cookie);
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_PENDING);
}

TEST_F(CookieReconcilerTest, ReadBackThatReturnsVerifiesWhatWasSetBlind) {
  kernel_.SetReadbackBlind(true);
  std::vector<discovery::DiscoveredVm> vms = {FakeVm(kernel_, "vm-1", 100),
                                   FakeVm(kernel_, "vm-2", 200)};
  assignments_["vm-1"] = Assign("vm-1", "a/vm/vm-1");
  CookieReconciler reconciler(&kernel_, Options());  // vm-2 fails closed
  reconciler.Reconcile(vms, Lookup());
  reconciler.Reconcile(vms, Lookup());
  const uint64_t c1 = OnlyCookie(vms[0]), c2 = OnlyCookie(vms[1]);
  kernel_.SetReadbackBlind(false);  // the key is ready
  kernel_.ResetCallCounts();
  ReconcileResult r = reconciler.Reconcile(vms, Lookup());
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_FALSE(r.stats.readback_blind);
  EXPECT_EQ(r.stats.threads_unverified, 0);
  EXPECT_EQ(r.vms[0].cookie, c1);
  EXPECT_EQ(r.vms[1].cookie, c2);
  EXPECT_EQ(r.vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_EQ(r.vms[0].enforcement.threads_tagged(), 5);
  EXPECT_EQ(r.vms[0].enforcement.last_error(), "");
  EXPECT_EQ(r.vms[1].enforcement.state(), v1::ENFORCEMENT_STATE_FAIL_CLOSED);
}

}  // namespace
}  // namespace cosched::agent
