#include "agent/reconcile_loop.h"


#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "discovery/testing/static_vm_discovery.h"
#include "host/pseudo_fs.h"
#include "agent/dedicated_cores.h"
#include "host/testing/core_sched_fake.h"
#include "host/testing/cpu_affinity_fake.h"
#include "host/testing/pseudo_fs_fake.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::agent {
namespace {

using namespace std::chrono_literals;

// A process event without a name, as most are.
host::ProcessEvent Event(host::ProcessEventKind kind, int tgid, int tid, int parent_tgid) {
  host::ProcessEvent e;
  e.kind = kind;
  e.tgid = tgid;
  e.tid = tid;
  e.parent_tgid = parent_tgid;
  return e;
}

// One netlink datagram carrying one proc connector event.
class ReconcileLoopTest : public ::testing::Test {
 protected:
  ReconcileLoopTest() {
    ReconcilerOptions o;
    o.probe.support = v1::CORE_SCHED_SUPPORT_SUPPORTED;
    reconciler_ = std::make_unique<CookieReconciler>(&kernel_, o);
    discovery_.SetVms({OneThreadVm("vm-1", "", 100)});
  }

  // A VM of one thread (its QEMU's main thread), known to the kernel.
  discovery::DiscoveredVm OneThreadVm(const std::string& id, const std::string& uuid, int pid) {
    discovery::DiscoveredVm v;
    v.vm_id = id;
    v.uuid = uuid;
    v.qemu_pid = pid;
    v.threads = {{pid, pid, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator}};
    kernel_.AddTask(pid, pid);
    return v;
  }

  std::unique_ptr<ReconcileLoop> MakeLoop(std::chrono::milliseconds rescan) {
    ReconcileLoopOptions options;
    options.rescan_interval = rescan;
    return std::make_unique<ReconcileLoop>(
        options, &discovery_, reconciler_.get(),
        [](const discovery::DiscoveredVm&) { return std::optional<v1::Assignment>(); },
        [this] { ++changes_; });
  }

  host::FakeCoreSched kernel_;
  discovery::StaticVmDiscovery discovery_;
  std::unique_ptr<CookieReconciler> reconciler_;
  std::atomic<int> changes_{0};
};

// Issue #33 item 4: the off switch takes the engine's pin off too (the
// pinned VM's threads get their CPUs back) and it comes back when
// enforcement is on again; observing (issue #33 item 3) writes no affinity.
TEST_F(ReconcileLoopTest, EnforcementOffUnpinsAndObservingWritesNoAffinity) {
  v1::HostEnablement enablement;
  ReconcilerOptions o;
  o.probe.support = v1::CORE_SCHED_SUPPORT_SUPPORTED;
  o.enablement = [&enablement] { return enablement; };
  reconciler_ = std::make_unique<CookieReconciler>(&kernel_, o);
  v1::Topology topology;
  for (int core = 0; core < 2; ++core) {
    v1::Core* c = topology.add_cores();
    c->set_core_id(core);
    c->add_cpus(2 * core);
    c->add_cpus(2 * core + 1);
  }
  host::FakeCpuAffinity affinity(host::CpuSet({0, 1, 2, 3}));
  affinity.AddThread(100);
  DedicatedCoreEnforcer dedicated(&affinity, topology);
  v1::Assignment pinned;
  pinned.set_vm_id("vm-1");
  pinned.set_trust_group("acme/vm/vm-1");
  pinned.set_isolation(v1::ISOLATION_LEVEL_VM);
  pinned.mutable_pin()->set_host_id("lab");
  pinned.mutable_pin()->add_cpus(2);
  pinned.mutable_pin()->add_cpus(3);
  discovery::DiscoveredVm vm = OneThreadVm("vm-1", "", 100);
  vm.threads[0].kind = discovery::DiscoveredThread::Kind::kVcpu;
  discovery_.SetVms({vm});
  ReconcileLoopOptions options;
  options.rescan_interval = 1h;
  options.host_id = "lab";
  ReconcileLoop loop(
      options, &discovery_, reconciler_.get(),
      [&pinned](const discovery::DiscoveredVm&) { return std::optional<v1::Assignment>(pinned); },
      [] {}, &dedicated);
  loop.Start();
  ASSERT_TRUE(loop.WaitForPasses(1, 5s));
  EXPECT_EQ(affinity.CpusOf(100), host::CpuSet({2, 3}));

  enablement.set_state(v1::HostEnablement::STATE_OFF);
  loop.Trigger();
  ASSERT_TRUE(loop.WaitForPasses(2, 5s));
  EXPECT_EQ(affinity.CpusOf(100), host::CpuSet({0, 1, 2, 3}));
  EXPECT_EQ(kernel_.CookieOf(100), 0u);

  enablement.set_state(v1::HostEnablement::STATE_ENFORCE);
  loop.Trigger();
  ASSERT_TRUE(loop.WaitForPasses(3, 5s));
  EXPECT_EQ(affinity.CpusOf(100), host::CpuSet({2, 3}));

  // Observing: the pin is neither taken off nor put back.
  reconciler_->SetPolicy(false, false, /*observe=*/true);
  enablement.set_state(v1::HostEnablement::STATE_OFF);
  const int writes = affinity.write_calls();
  loop.Trigger();
  ASSERT_TRUE(loop.WaitForPasses(4, 5s));
  EXPECT_EQ(affinity.write_calls(), writes);
  EXPECT_EQ(affinity.CpusOf(100), host::CpuSet({2, 3}));
  EXPECT_NE(kernel_.CookieOf(100), 0u);
  loop.Stop();
}

TEST_F(ReconcileLoopTest, FirstPassRunsAtOnceAndFeedsReports) {
  auto loop = MakeLoop(1h);
  EXPECT_EQ(loop->Observations().status().code(), absl::StatusCode::kUnavailable);
  loop->Start();
  ASSERT_TRUE(loop->WaitForPasses(1, 5s));
  auto observations = loop->Observations();
  ASSERT_OK(observations);
  ASSERT_EQ(observations->size(), 1u);
  EXPECT_EQ((*observations)[0].vm_id(), "vm-1");
  EXPECT_EQ((*observations)[0].enforcement().state(),
            v1::ENFORCEMENT_STATE_FAIL_CLOSED);
  EXPECT_NE(kernel_.CookieOf(100), 0u);
  EXPECT_EQ(changes_, 1);
}

TEST_F(ReconcileLoopTest, VmsCsdCannotNameAreTaggedButNotReported) {
  // csd refuses a whole Report holding an id it cannot take, so a QEMU
  // without a name, or with one outside the id rule, is left out of it.
  auto vm = [this](const std::string& id, int pid) { return OneThreadVm(id, "", pid); };
  discovery_.SetVms({vm("vm-1", 100), vm("", 200), vm("my vm", 300)});
  auto loop = MakeLoop(1h);
  loop->Start();
  ASSERT_TRUE(loop->WaitForPasses(1, 5s));
  auto observations = loop->Observations();
  ASSERT_OK(observations);
  ASSERT_EQ(observations->size(), 1u);
  EXPECT_EQ((*observations)[0].vm_id(), "vm-1");
  EXPECT_NE(kernel_.CookieOf(200), 0u);
  EXPECT_NE(kernel_.CookieOf(300), 0u);
}

TEST_F(ReconcileLoopTest, ReportsEachVmsDomainMetadata) {
  // The tenancy a libvirt domain's metadata gives goes to csd with the VM,
  // also while the VM has no assignment (csd may tag it from it).
  auto vm = [this](const std::string& id, int pid) { return OneThreadVm(id, "", pid); };
  discovery::DiscoveredVm nova = vm("vm-nova", 100);
  nova.metadata.emplace();
  nova.metadata->mutable_nova()->set_project_uuid("p1");
  discovery::DiscoveredVm refused = vm("vm-refused", 200);
  refused.metadata.emplace();
  refused.metadata->set_error("cosched:tenant is given more than once");
  const discovery::DiscoveredVm plain = vm("vm-plain", 300);
  discovery_.SetVms({nova, refused, plain});
  auto loop = MakeLoop(1h);
  loop->Start();
  ASSERT_TRUE(loop->WaitForPasses(1, 5s));
  auto observations = loop->Observations();
  ASSERT_OK(observations);
  ASSERT_EQ(observations->size(), 3u);
  std::map<std::string, v1::VMObservation> by_id;
  for (const auto& o : *observations) by_id[o.vm_id()] = o;
  EXPECT_EQ(by_id["vm-nova"].metadata().nova().project_uuid(), "p1");
  EXPECT_EQ(by_id["vm-refused"].metadata().error(), "cosched:tenant is given more than once");
  EXPECT_FALSE(by_id["vm-plain"].has_metadata());
  // Fail-closed meanwhile: a cookie of its own each.
  EXPECT_NE(kernel_.CookieOf(100), 0u);
  EXPECT_NE(kernel_.CookieOf(100), kernel_.CookieOf(200));
  EXPECT_EQ(changes_, 1);

  // A change of metadata alone is a change worth reporting at once.
  nova.metadata->mutable_nova()->set_project_uuid("p2");
  discovery_.SetVms({nova, refused, plain});
  loop->Trigger();
  ASSERT_TRUE(loop->WaitForPasses(2, 5s));
  EXPECT_EQ(changes_, 2);
  observations = loop->Observations();
  ASSERT_OK(observations);
  for (const auto& o : *observations) {
    if (o.vm_id() == "vm-nova") {
      EXPECT_EQ(o.metadata().nova().project_uuid(), "p2");
    }
  }
  // And the same again is not.
  loop->Trigger();
  ASSERT_TRUE(loop->WaitForPasses(3, 5s));
  EXPECT_EQ(changes_, 2);
  loop->Stop();
}

// Discovery that blocks while `hold` is set, as a /proc read of a process
// in D state or a libvirtd that does not answer would.
class BlockingDiscovery : public discovery::VmDiscovery {
 public:
  explicit BlockingDiscovery(discovery::VmDiscovery* inner) : inner_(inner) {}
  absl::StatusOr<std::vector<discovery::DiscoveredVm>> Discover() override {
    std::unique_lock<std::mutex> lock(mu_);
    blocked_ = hold_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !hold_; });
    blocked_ = false;
    lock.unlock();
    return inner_->Discover();
  }
  void Hold(bool hold) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = hold;
    cv_.notify_all();
  }
  bool WaitUntilBlocked() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 5s, [this] { return blocked_; });
  }

 private:
  discovery::VmDiscovery* inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;
  bool blocked_ = false;
};

TEST_F(ReconcileLoopTest, AStuckPassWithholdsReportsInsteadOfPassingOffOldOnes) {
  BlockingDiscovery discovery(&discovery_);
  ReconcileLoopOptions options;
  options.rescan_interval = 1h;
  options.stuck_after = 50ms;
  ReconcileLoop loop(options, &discovery, reconciler_.get(),
                     [](const discovery::DiscoveredVm&) { return std::optional<v1::Assignment>(); },
                     [] {});
  loop.Start();
  ASSERT_TRUE(loop.WaitForPasses(1, 5s));
  ASSERT_OK(loop.Observations());
  discovery.Hold(true);
  loop.Trigger();
  ASSERT_TRUE(discovery.WaitUntilBlocked());
  // Past stuck_after (the sleep makes the pass old; it asserts no speed).
  std::this_thread::sleep_for(100ms);
  auto stuck = loop.Observations();
  EXPECT_EQ(stuck.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(stuck.status().message().find("has been running for"), std::string::npos)
      << stuck.status();
  discovery.Hold(false);
  ASSERT_TRUE(loop.WaitForPasses(2, 5s));
  EXPECT_OK(loop.Observations());
  loop.Stop();
}

TEST_F(ReconcileLoopTest, EnforcedRevisionIsTheOneAPassStartedFrom) {
  std::atomic<int64_t> revision{7};
  ReconcileLoopOptions options;
  options.rescan_interval = 1h;
  options.assignment_revision = [&] { return revision.load(); };
  ReconcileLoop loop(options, &discovery_, reconciler_.get(),
                     [](const discovery::DiscoveredVm&) { return std::optional<v1::Assignment>(); },
                     [this] { ++changes_; });
  EXPECT_EQ(loop.enforced_revision(), 0);
  loop.Start();
  ASSERT_TRUE(loop.WaitForPasses(1, 5s));
  EXPECT_EQ(loop.enforced_revision(), 7);
  // A new revision is not enforced until a pass has run with it, and that
  // pass counts as a change (a report tells csd) even if no cookie moved.
  revision = 8;
  EXPECT_EQ(loop.enforced_revision(), 7);
  loop.Trigger();
  ASSERT_TRUE(loop.WaitForPasses(2, 5s));
  EXPECT_EQ(loop.enforced_revision(), 8);
  EXPECT_EQ(changes_, 2);
  loop.Stop();
}

TEST_F(ReconcileLoopTest, AQemuClaimingAnotherVmsNameOrUuidDoesNotGetItsCookie) {
  // A second process under a running VM's name or UUID (a stray QEMU, or
  // one posing as the VM to share its cores) is isolated on a cookie of its
  // own and not reported (csd refuses a Report naming a VM twice); the
  // first keeps the VM's assignment and says what happened.
  auto vm = [this](const std::string& id, const std::string& uuid, int pid) {
    return OneThreadVm(id, uuid, pid);
  };
  discovery_.SetVms({vm("vm-1", "uuid-1", 100), vm("vm-2", "", 200), vm("vm-1", "", 300),
                     vm("other-name", "uuid-1", 400)});
  ReconcileLoopOptions options;
  options.rescan_interval = 1h;
  ReconcileLoop loop(options, &discovery_, reconciler_.get(),
                     [](const discovery::DiscoveredVm& v) -> std::optional<v1::Assignment> {
                       if (v.vm_id != "vm-1" && v.uuid != "uuid-1") return std::nullopt;
                       v1::Assignment a;
                       a.set_vm_id("vm-1");
                       a.set_trust_group("acme/vm/vm-1");
                       return a;
                     },
                     [] {});
  loop.Start();
  ASSERT_TRUE(loop.WaitForPasses(1, 5s));
  auto observations = loop.Observations();
  ASSERT_OK(observations);
  ASSERT_EQ(observations->size(), 2u);
  EXPECT_EQ((*observations)[0].vm_id(), "vm-1");
  EXPECT_EQ((*observations)[0].enforcement().state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_NE((*observations)[0].enforcement().last_error().find("pids 300, 400 were isolated"),
            std::string::npos)
      << (*observations)[0].enforcement().last_error();
  EXPECT_EQ((*observations)[1].vm_id(), "vm-2");
  const uint64_t victim = kernel_.CookieOf(100);
  ASSERT_NE(victim, 0u);
  for (int impostor : {300, 400}) {
    EXPECT_NE(kernel_.CookieOf(impostor), 0u) << impostor;  // failed closed
    EXPECT_NE(kernel_.CookieOf(impostor), victim) << impostor;
  }
  EXPECT_NE(kernel_.CookieOf(300), kernel_.CookieOf(400));
  // Reported to csd as impostors, with what they claimed.
  std::vector<v1::ImpostorProcess> impostors = loop.Impostors();
  ASSERT_EQ(impostors.size(), 2u);
  EXPECT_EQ(impostors[0].pid(), 300);
  EXPECT_EQ(impostors[0].claimed_vm_id(), "vm-1");
  EXPECT_EQ(impostors[0].reason(), "another process already runs VM 'vm-1'");
  EXPECT_EQ(impostors[1].pid(), 400);
  EXPECT_EQ(impostors[1].claimed_vm_id(), "other-name");
  EXPECT_EQ(impostors[1].claimed_uuid(), "uuid-1");
  loop.Stop();
}

// An impostor from discovery (not a VMM binary or user, not libvirt's)
// never gets the assignment of the VM it names, even where no other
// process runs that VM: it fails closed on a cookie of its own.
TEST_F(ReconcileLoopTest, ADiscoveredImpostorNeverGetsTheVmsGroup) {
  auto vm = [this](const std::string& id, int pid) { return OneThreadVm(id, "", pid); };
  discovery::DiscoveredVm real = vm("acme-1", 100);
  discovery::DiscoveredVm posing = vm("acme-9", 200);
  posing.MarkImpostor("it runs /tmp/q, not an allowed VMM binary");
  discovery_.SetVms({real, posing});
  ReconcileLoopOptions options;
  options.rescan_interval = 1h;
  std::vector<std::string> looked_up;
  ReconcileLoop loop(options, &discovery_, reconciler_.get(),
                     [&looked_up](const discovery::DiscoveredVm& v) -> std::optional<v1::Assignment> {
                       looked_up.push_back(v.vm_id);
                       // Both acme VMs share the tenant's group.
                       v1::Assignment a;
                       a.set_vm_id(v.vm_id);
                       a.set_trust_group("acme/tenant");
                       return a;
                     },
                     [] {});
  loop.Start();
  ASSERT_TRUE(loop.WaitForPasses(1, 5s));
  const uint64_t tenant = kernel_.CookieOf(100);
  ASSERT_NE(tenant, 0u);
  EXPECT_NE(kernel_.CookieOf(200), 0u);
  EXPECT_NE(kernel_.CookieOf(200), tenant);
  auto observations = loop.Observations();
  ASSERT_OK(observations);
  ASSERT_EQ(observations->size(), 1u);
  EXPECT_EQ((*observations)[0].vm_id(), "acme-1");
  std::vector<v1::ImpostorProcess> impostors = loop.Impostors();
  ASSERT_EQ(impostors.size(), 1u);
  EXPECT_EQ(impostors[0].pid(), 200);
  EXPECT_EQ(impostors[0].claimed_vm_id(), "acme-9");
  loop.Stop();
}

TEST_F(ReconcileLoopTest, EventsOfVmsTriggerPassesOthersDoNot) {
  auto loop = MakeLoop(1h);
  loop->Start();
  ASSERT_TRUE(loop->WaitForPasses(1, 5s));
  // A thread of an unrelated process: no pass.
  loop->NoteProcessEvent(Event(host::ProcessEventKind::kFork, 999, 1000, 999));
  loop->NoteProcessEvent(Event(host::ProcessEventKind::kExit, 100, 101, 0));
  EXPECT_FALSE(loop->WaitForPasses(2, 200ms));
  // A new thread of the VM: a pass.
  loop->NoteProcessEvent(Event(host::ProcessEventKind::kFork, 100, 150, 100));
  EXPECT_TRUE(loop->WaitForPasses(2, 5s));
  loop->NoteProcessEvent(Event(host::ProcessEventKind::kExec, 300, 300, 0));
  EXPECT_TRUE(loop->WaitForPasses(3, 5s));
}

TEST_F(ReconcileLoopTest, ExecsOfOtherProgramsTriggerNoPass) {
  auto loop = MakeLoop(1h);
  loop->Start();
  ASSERT_TRUE(loop->WaitForPasses(1, 5s));
  host::ProcessEvent cron_job = Event(host::ProcessEventKind::kExec, 300, 300, 0);
  cron_job.may_be_qemu = false;
  for (int i = 0; i < 1000; ++i) loop->NoteProcessEvent(cron_job);
  EXPECT_FALSE(loop->WaitForPasses(2, 200ms));
  // An exec that may be of QEMU: a pass.
  loop->NoteProcessEvent(Event(host::ProcessEventKind::kExec, 301, 301, 0));
  ASSERT_TRUE(loop->WaitForPasses(2, 5s));
  // A known VM's process running another program: a pass (the VM is gone).
  host::ProcessEvent vm_exec = Event(host::ProcessEventKind::kExec, 100, 100, 0);
  vm_exec.may_be_qemu = false;
  loop->NoteProcessEvent(vm_exec);
  EXPECT_TRUE(loop->WaitForPasses(3, 5s));
}

TEST_F(ReconcileLoopTest, ABurstOfEventsIsOnePass) {
  std::mutex mu;
  std::vector<PassTrigger> triggers;
  ReconcileLoopOptions options;
  options.rescan_interval = 1h;
  // Long enough that the burst below surely falls inside it.
  options.settle = 1s;
  options.on_pass = [&](const PassRecord& pass) {
    std::lock_guard<std::mutex> lock(mu);
    triggers.push_back(pass.trigger);
  };
  ReconcileLoop loop(options, &discovery_, reconciler_.get(),
                     [](const discovery::DiscoveredVm&) { return std::optional<v1::Assignment>(); },
                     nullptr);
  loop.Start();
  ASSERT_TRUE(loop.WaitForPasses(1, 5s));
  // QEMU starting 100 threads over some 200 ms, and execs of new QEMUs
  // among them: without settling, the first events would get a pass of
  // their own and the rest more.
  for (int tid = 101; tid <= 200; ++tid) {
    loop.NoteProcessEvent(Event(host::ProcessEventKind::kFork, 100, tid, 100));
    if (tid % 10 == 0) loop.NoteProcessEvent(Event(host::ProcessEventKind::kExec, tid, tid, 0));
    std::this_thread::sleep_for(2ms);
  }
  loop.NoteProcessEvent(Event(host::ProcessEventKind::kLost, 0, 0, 0));
  ASSERT_TRUE(loop.WaitForPasses(2, 5s));
  EXPECT_FALSE(loop.WaitForPasses(3, 500ms));
  // A request does not wait for events to settle (well within `settle`).
  loop.NoteProcessEvent(Event(host::ProcessEventKind::kFork, 100, 201, 100));
  loop.Trigger();
  ASSERT_TRUE(loop.WaitForPasses(3, 500ms));
  EXPECT_FALSE(loop.WaitForPasses(4, 500ms));
  loop.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_THAT(triggers, ::testing::ElementsAre(PassTrigger::kStart, PassTrigger::kProcessEvent,
                                               PassTrigger::kProcessEvent));
}

// Lists what `inner` lists, then runs the hook set for the next listing:
// what the kernel does while a pass is between its listing and its writes.
class DiscoveryWithHook : public discovery::VmDiscovery {
 public:
  explicit DiscoveryWithHook(discovery::VmDiscovery* inner) : inner_(inner) {}
  void AfterNextListing(std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    hook_ = std::move(hook);
  }
  absl::StatusOr<std::vector<discovery::DiscoveredVm>> Discover() override {
    auto vms = inner_->Discover();
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hook.swap(hook_);
    }
    if (hook) hook();
    return vms;
  }

 private:
  discovery::VmDiscovery* const inner_;
  std::mutex mu_;
  std::function<void()> hook_;
};

// A QEMU starting creates its threads while the pass its exec triggered
// runs. A thread forked after that pass listed the process, and before it
// tagged the main thread, neither inherits the cookie nor is seen, and its
// fork event arrives while the VM is not known yet (the lab's
// agent_server_away caught a vCPU and the iothread left at cookie 0 so).
// The pass's end runs another for it; forks of other processes during a
// pass run none.
TEST_F(ReconcileLoopTest, AThreadForkedWhileThePassThatFindsItsVmRunsIsTagged) {
  DiscoveryWithHook discovery(&discovery_);
  ReconcileLoopOptions options;
  options.rescan_interval = 1h;
  ReconcileLoop loop(options, &discovery, reconciler_.get(),
                     [](const discovery::DiscoveredVm&) { return std::optional<v1::Assignment>(); },
                     nullptr);
  loop.Start();
  ASSERT_TRUE(loop.WaitForPasses(1, 5s));
  const discovery::DiscoveredVm vm1 = discovery_.Discover()->front();
  auto vm2 = [](bool with_vcpu) {
    discovery::DiscoveredVm vm;
    vm.vm_id = "vm-2";
    vm.qemu_pid = 200;
    vm.threads = {{200, 200, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator}};
    if (with_vcpu) {
      vm.threads.push_back({201, 200, "CPU 0/KVM", discovery::DiscoveredThread::Kind::kVcpu});
    }
    return vm;
  };
  kernel_.AddTask(200, 200);
  discovery_.SetVms({vm1, vm2(false)});
  discovery.AfterNextListing([&] {
    kernel_.AddTask(201, 200);  // no inheritance in the fake: cookie 0
    discovery_.SetVms({vm1, vm2(true)});
    loop.NoteProcessEvent(Event(host::ProcessEventKind::kFork, 200, 201, 200));
  });
  loop.NoteProcessEvent(Event(host::ProcessEventKind::kExec, 200, 200, 0));
  ASSERT_TRUE(loop.WaitForPasses(3, 5s));
  const uint64_t cookie = kernel_.CookieOf(200);
  EXPECT_NE(cookie, 0u);
  EXPECT_EQ(kernel_.CookieOf(201), cookie);
  EXPECT_FALSE(loop.WaitForPasses(4, 300ms));

  // Threads and children of other processes, and kthreadd's other
  // children, forked during a pass: no second pass.
  discovery.AfterNextListing([&] {
    loop.NoteProcessEvent(Event(host::ProcessEventKind::kFork, 900, 901, 900));
    loop.NoteProcessEvent(Event(host::ProcessEventKind::kFork, 950, 950, 900));
    host::ProcessEvent kworker = Event(host::ProcessEventKind::kFork, 960, 960, 2);
    kworker.comm = "kworker/0:1";
    loop.NoteProcessEvent(kworker);
  });
  loop.Trigger();
  ASSERT_TRUE(loop.WaitForPasses(4, 5s));
  EXPECT_FALSE(loop.WaitForPasses(5, 300ms));
  loop.Stop();
}

TEST_F(ReconcileLoopTest, ANewThreadOfAKnownVmIsTaggedDuringAnExecStorm) {
  auto loop = MakeLoop(1h);
  loop->Start();
  ASSERT_TRUE(loop->WaitForPasses(1, 5s));
  const uint64_t cookie = kernel_.CookieOf(100);
  ASSERT_NE(cookie, 0u);
  std::atomic<bool> stop{false};
  std::thread storm([&] {
    // Each process of a cron job: its fork, its exec of another program,
    // its exit.
    for (int pid = 5000; !stop; pid = pid == 30000 ? 5000 : pid + 1) {
      loop->NoteProcessEvent(Event(host::ProcessEventKind::kFork, pid, pid, 4000));
      host::ProcessEvent exec = Event(host::ProcessEventKind::kExec, pid, pid, 0);
      exec.may_be_qemu = false;
      loop->NoteProcessEvent(exec);
      loop->NoteProcessEvent(Event(host::ProcessEventKind::kExit, pid, pid, 0));
    }
  });
  EXPECT_FALSE(loop->WaitForPasses(2, 200ms));
  // The VM gets a vCPU: its thread starts at cookie 0 (no inheritance in
  // the fake), so only a pass gives it the VM's cookie.
  discovery::DiscoveredVm vm;
  vm.vm_id = "vm-1";
  vm.qemu_pid = 100;
  vm.threads = {{100, 100, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator},
                {150, 100, "CPU 1/KVM", discovery::DiscoveredThread::Kind::kVcpu}};
  kernel_.AddTask(150, 100);
  discovery_.SetVms({vm});
  loop->NoteProcessEvent(Event(host::ProcessEventKind::kFork, 100, 150, 100));
  ASSERT_TRUE(loop->WaitForPasses(2, 5s));
  EXPECT_EQ(kernel_.CookieOf(150), cookie);
  EXPECT_FALSE(loop->WaitForPasses(3, 200ms));
  stop = true;
  storm.join();
}

// Linux < 6.4: a NIC added to a tagged VM gets a vhost worker that is a
// kernel thread, forked by kthreadd under kthreadd's name and then named
// vhost-<qemu pid>. No fork event of the VM announces it; the source passes
// kthreadd's fork on with the name it got.
TEST_F(ReconcileLoopTest, AVhostKernelThreadOfAKnownVmIsTaggedOnItsFork) {
  auto loop = MakeLoop(1h);
  loop->Start();
  ASSERT_TRUE(loop->WaitForPasses(1, 5s));
  const uint64_t cookie = kernel_.CookieOf(100);
  ASSERT_NE(cookie, 0u);
  // kthreadd's other children, and renames that are no VM's worker: no pass.
  for (const char* other : {"kworker/0:1", "vhost-999", "vhost-", "vhost-100x", "kthreadd"}) {
    host::ProcessEvent fork = Event(host::ProcessEventKind::kFork, 160, 160, 2);
    fork.comm = other;
    loop->NoteProcessEvent(fork);
    host::ProcessEvent rename = Event(host::ProcessEventKind::kComm, 160, 160, 0);
    rename.comm = other;
    loop->NoteProcessEvent(rename);
  }
  // A user process forking a child it names like a worker: not kthreadd's.
  host::ProcessEvent user = Event(host::ProcessEventKind::kFork, 170, 170, 300);
  user.comm = "vhost-100";
  loop->NoteProcessEvent(user);
  EXPECT_FALSE(loop->WaitForPasses(2, 200ms));
  discovery::DiscoveredVm vm;
  vm.vm_id = "vm-1";
  vm.qemu_pid = 100;
  vm.threads = {{100, 100, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator},
                {160, 160, "vhost-100", discovery::DiscoveredThread::Kind::kVhostWorker}};
  kernel_.AddTask(160, 160);
  discovery_.SetVms({vm});
  host::ProcessEvent named = Event(host::ProcessEventKind::kFork, 160, 160, 2);
  named.comm = "vhost-100";
  loop->NoteProcessEvent(named);
  ASSERT_TRUE(loop->WaitForPasses(2, 5s));
  EXPECT_EQ(kernel_.CookieOf(160), cookie);
  // The same by PR_SET_NAME (a process renaming itself).
  host::ProcessEvent rename = Event(host::ProcessEventKind::kComm, 160, 160, 0);
  rename.comm = "vhost-100";
  loop->NoteProcessEvent(rename);
  EXPECT_TRUE(loop->WaitForPasses(3, 5s));
}

// kthreadd's forks are held until the kernel thread has its name.
TEST_F(ReconcileLoopTest, DiscoveryFailureWithholdsTheReport) {
  auto loop = MakeLoop(1h);
  loop->Start();
  ASSERT_TRUE(loop->WaitForPasses(1, 5s));
  discovery_.SetError(absl::UnavailableError("libvirt is down"));
  loop->Trigger();
  ASSERT_TRUE(loop->WaitForPasses(2, 5s));
  auto observations = loop->Observations();
  EXPECT_EQ(observations.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(observations.status().message().find("libvirt is down"), std::string::npos);
  // The cookies stay as they were.
  EXPECT_NE(kernel_.CookieOf(100), 0u);
}

TEST_F(ReconcileLoopTest, ReportsEachPassWithWhatTriggeredIt) {
  std::mutex mu;
  std::vector<PassTrigger> triggers;
  std::vector<bool> discovered;
  ReconcileLoopOptions options;
  options.rescan_interval = 1h;
  options.on_pass = [&](const PassRecord& pass) {
    std::lock_guard<std::mutex> lock(mu);
    triggers.push_back(pass.trigger);
    discovered.push_back(pass.discovery.ok() && pass.result != nullptr &&
                         pass.result->vms.size() == 1);
    EXPECT_GT(pass.duration.count(), 0);
  };
  ReconcileLoop loop(
      options, &discovery_, reconciler_.get(),
      [](const discovery::DiscoveredVm&) { return std::optional<v1::Assignment>(); },
      nullptr);
  loop.Start();
  ASSERT_TRUE(loop.WaitForPasses(1, 5s));
  loop.NoteProcessEvent(Event(host::ProcessEventKind::kFork, 100, 150, 100));
  ASSERT_TRUE(loop.WaitForPasses(2, 5s));
  discovery_.SetError(absl::UnavailableError("libvirt is down"));
  loop.Trigger();
  ASSERT_TRUE(loop.WaitForPasses(3, 5s));
  loop.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_THAT(triggers, ::testing::ElementsAre(PassTrigger::kStart,
                                               PassTrigger::kProcessEvent,
                                               PassTrigger::kRequest));
  EXPECT_THAT(discovered, ::testing::ElementsAre(true, true, false));
  EXPECT_STREQ(PassTriggerName(PassTrigger::kProcessEvent), "process_event");
  EXPECT_STREQ(PassTriggerName(PassTrigger::kRescan), "rescan");
}

TEST_F(ReconcileLoopTest, RescansOnItsOwn) {
  auto loop = MakeLoop(20ms);
  loop->Start();
  EXPECT_TRUE(loop->WaitForPasses(3, 5s));
  EXPECT_EQ(changes_, 1);  // the outcome did not change after the first
}

// The kernel ignores a proc connector subscription from outside the
// initial PID namespace: the agent must know, not wait for events forever.
}  // namespace
}  // namespace cosched::agent
