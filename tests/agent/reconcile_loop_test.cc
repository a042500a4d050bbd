#include "agent/reconcile_loop.h"

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "discovery/exec_classifier.h"
#include "discovery/testing/static_vm_discovery.h"
#include "host/pseudo_fs.h"
#include "host/testing/core_sched_fake.h"
#include "host/testing/pseudo_fs_fake.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::agent {
namespace {

using namespace std::chrono_literals;

// One netlink datagram carrying one proc connector event.
std::vector<char> Datagram(proc_event ev) {
  std::vector<char> buffer(NLMSG_SPACE(sizeof(cn_msg) + sizeof(proc_event)));
  auto* nl = reinterpret_cast<nlmsghdr*>(buffer.data());
  nl->nlmsg_len = NLMSG_LENGTH(sizeof(cn_msg) + sizeof(proc_event));
  nl->nlmsg_type = NLMSG_DONE;
  auto* cn = reinterpret_cast<cn_msg*>(NLMSG_DATA(nl));
  cn->id.idx = CN_IDX_PROC;
  cn->id.val = CN_VAL_PROC;
  cn->len = sizeof(proc_event);
  std::memcpy(cn->data, &ev, sizeof(ev));
  return buffer;
}

TEST(ParseProcConnectorDatagram, ForkExecExitAndOthers) {
  std::vector<host::ProcessEvent> seen;
  auto listener = [&](const host::ProcessEvent& e) { seen.push_back(e); };

  proc_event fork{};
  fork.what = proc_event::PROC_EVENT_FORK;
  fork.event_data.fork.parent_pid = 100;
  fork.event_data.fork.parent_tgid = 100;
  fork.event_data.fork.child_pid = 150;
  fork.event_data.fork.child_tgid = 100;
  auto d = Datagram(fork);
  host::ParseProcConnectorDatagram(d.data(), d.size(), listener);

  proc_event exec{};
  exec.what = proc_event::PROC_EVENT_EXEC;
  exec.event_data.exec.process_pid = 300;
  exec.event_data.exec.process_tgid = 300;
  d = Datagram(exec);
  host::ParseProcConnectorDatagram(d.data(), d.size(), listener);

  proc_event exit{};
  exit.what = proc_event::PROC_EVENT_EXIT;
  exit.event_data.exit.process_pid = 151;
  exit.event_data.exit.process_tgid = 100;
  d = Datagram(exit);
  host::ParseProcConnectorDatagram(d.data(), d.size(), listener);

  proc_event comm{};
  comm.what = proc_event::PROC_EVENT_COMM;
  comm.event_data.comm.process_pid = 160;
  comm.event_data.comm.process_tgid = 160;
  std::memcpy(comm.event_data.comm.comm, "vhost-100", 10);
  d = Datagram(comm);
  host::ParseProcConnectorDatagram(d.data(), d.size(), listener);
  // A name of the full 16 bytes has no terminating NUL.
  std::memcpy(comm.event_data.comm.comm, "0123456789abcdef", 16);
  d = Datagram(comm);
  host::ParseProcConnectorDatagram(d.data(), d.size(), listener);

  proc_event uid{};
  uid.what = proc_event::PROC_EVENT_UID;
  d = Datagram(uid);
  host::ParseProcConnectorDatagram(d.data(), d.size(), listener);
  // A truncated datagram is ignored, not read past its end.
  host::ParseProcConnectorDatagram(d.data(), 10, listener);

  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[3].kind, host::ProcessEventKind::kComm);
  EXPECT_EQ(seen[3].tid, 160);
  EXPECT_EQ(seen[3].tgid, 160);
  EXPECT_EQ(seen[3].comm, "vhost-100");
  EXPECT_EQ(seen[4].comm, "0123456789abcdef");
  EXPECT_EQ(seen[0].kind, host::ProcessEventKind::kFork);
  EXPECT_EQ(seen[0].tgid, 100);
  EXPECT_EQ(seen[0].tid, 150);
  EXPECT_EQ(seen[0].parent_tgid, 100);
  EXPECT_EQ(seen[1].kind, host::ProcessEventKind::kExec);
  EXPECT_EQ(seen[1].tgid, 300);
  EXPECT_EQ(seen[2].kind, host::ProcessEventKind::kExit);
  EXPECT_EQ(seen[2].tid, 151);
}

TEST(ClassifyExec, OnlyAnExecOfQemuMayStartAVm) {
  host::FakePseudoFs fs;
  using namespace std::string_literals;
  fs.SetFile("/proc/300/cmdline", "/usr/bin/qemu-system-x86_64\0-name\0guest=vm-1\0"s);
  fs.SetFile("/proc/301/cmdline", "/usr/libexec/qemu-kvm\0-uuid\0abc\0"s);
  // Discovery goes by argv[0], so a QEMU binary run under another name is
  // not one, and another program run as "qemu-system-x86_64" is.
  fs.SetFile("/proc/302/cmdline", "check_disk\0/usr/bin/qemu-system-x86_64\0"s);
  fs.SetFile("/proc/303/cmdline", "qemu-system-aarch64\0"s);
  fs.SetFile("/proc/304/cmdline", "/bin/true\0"s);
  fs.SetReadError("/proc/306/cmdline", absl::PermissionDeniedError("hidepid"));
  auto exec = [&](int pid) {
    host::ProcessEvent event{host::ProcessEventKind::kExec, pid, pid, 0};
    discovery::ClassifyExec(fs, "/proc", event);
    return event.may_be_qemu;
  };
  EXPECT_TRUE(exec(300));
  EXPECT_TRUE(exec(301));
  EXPECT_FALSE(exec(302));
  EXPECT_TRUE(exec(303));
  EXPECT_FALSE(exec(304));
  EXPECT_FALSE(exec(305));  // gone before it was read: nothing to tag
  EXPECT_TRUE(exec(306));   // cannot tell: a pass finds out
  // Only execs are classified: a fork of pid 304 stays a possible VM event.
  host::ProcessEvent fork{host::ProcessEventKind::kFork, 304, 304, 1};
  discovery::ClassifyExec(fs, "/proc", fork);
  EXPECT_TRUE(fork.may_be_qemu);
}

TEST(DelayedExecClassifier, ClassifiesAnExecOnlyIfItsProcessOutlivesTheDelay) {
  using namespace std::string_literals;
  auto fs = std::make_shared<host::FakePseudoFs>();
  fs->SetFile("/proc/300/cmdline", "/usr/bin/qemu-system-x86_64\0-name\0guest=vm-1\0"s);
  fs->SetFile("/proc/302/cmdline", "/usr/bin/qemu-system-x86_64\0"s);
  // Read, this would make the exec one that may be of QEMU: it must not be.
  fs->SetReadError("/proc/301/cmdline", absl::PermissionDeniedError("unreadable"));
  std::vector<host::ProcessEvent> out;
  discovery::DelayedExecClassifier execs(fs, "/proc", 5ms, [&](const host::ProcessEvent& e) { out.push_back(e); });
  const auto t0 = discovery::DelayedExecClassifier::Clock::now();

  execs.Add(host::ProcessEvent{host::ProcessEventKind::kFork, 301, 301, 1}, t0);
  execs.Add(host::ProcessEvent{host::ProcessEventKind::kExec, 300, 300, 0}, t0);
  execs.Add(host::ProcessEvent{host::ProcessEventKind::kExec, 301, 301, 0}, t0);
  // A thread of 300 ending, and 301 itself, a short command, exiting.
  execs.Add(host::ProcessEvent{host::ProcessEventKind::kExit, 300, 310, 0}, t0 + 1ms);
  execs.Add(host::ProcessEvent{host::ProcessEventKind::kExit, 301, 301, 0}, t0 + 1ms);
  // The old leader of 302 ending as another of its threads execs.
  execs.Add(host::ProcessEvent{host::ProcessEventKind::kExit, 302, 302, 0}, t0 + 2ms);
  execs.Add(host::ProcessEvent{host::ProcessEventKind::kExec, 302, 302, 0}, t0 + 2ms);
  // Every other event is passed on at once, in order; execs are held.
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].kind, host::ProcessEventKind::kFork);
  EXPECT_EQ(out[1].tid, 310);
  EXPECT_EQ(out[2].tgid, 301);
  EXPECT_EQ(out[3].tgid, 302);
  EXPECT_EQ(execs.Flush(t0 + 4ms), t0 + 5ms);
  EXPECT_EQ(out.size(), 4u);

  EXPECT_EQ(execs.Flush(t0 + 5ms), t0 + 7ms);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[4].kind, host::ProcessEventKind::kExec);
  EXPECT_EQ(out[4].tgid, 300);
  EXPECT_TRUE(out[4].may_be_qemu);
  EXPECT_EQ(execs.Flush(t0 + 7ms), std::nullopt);
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[5].tgid, 302);
  EXPECT_TRUE(out[5].may_be_qemu);
  EXPECT_EQ(execs.classified(), 2);
  EXPECT_EQ(execs.dropped(), 1);
}

class ReconcileLoopTest : public ::testing::Test {
 protected:
  ReconcileLoopTest() {
    ReconcilerOptions o;
    o.probe.support = v1::CORE_SCHED_SUPPORT_SUPPORTED;
    reconciler_ = std::make_unique<CookieReconciler>(&kernel_, o);
    discovery::DiscoveredVm vm;
    vm.vm_id = "vm-1";
    vm.qemu_pid = 100;
    vm.threads = {{100, 100, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator}};
    kernel_.AddTask(100, 100);
    discovery_.SetVms({vm});
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
  auto vm = [this](const std::string& id, int pid) {
    discovery::DiscoveredVm v;
    v.vm_id = id;
    v.qemu_pid = pid;
    v.threads = {{pid, pid, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator}};
    kernel_.AddTask(pid, pid);
    return v;
  };
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
    discovery::DiscoveredVm v;
    v.vm_id = id;
    v.uuid = uuid;
    v.qemu_pid = pid;
    v.threads = {{pid, pid, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator}};
    kernel_.AddTask(pid, pid);
    return v;
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
  loop.Stop();
}

TEST_F(ReconcileLoopTest, EventsOfVmsTriggerPassesOthersDoNot) {
  auto loop = MakeLoop(1h);
  loop->Start();
  ASSERT_TRUE(loop->WaitForPasses(1, 5s));
  // A thread of an unrelated process: no pass.
  loop->NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kFork, 999, 1000, 999});
  loop->NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kExit, 100, 101, 0});
  EXPECT_FALSE(loop->WaitForPasses(2, 200ms));
  // A new thread of the VM: a pass.
  loop->NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kFork, 100, 150, 100});
  EXPECT_TRUE(loop->WaitForPasses(2, 5s));
  loop->NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kExec, 300, 300, 0});
  EXPECT_TRUE(loop->WaitForPasses(3, 5s));
}

TEST_F(ReconcileLoopTest, ExecsOfOtherProgramsTriggerNoPass) {
  auto loop = MakeLoop(1h);
  loop->Start();
  ASSERT_TRUE(loop->WaitForPasses(1, 5s));
  host::ProcessEvent cron_job{host::ProcessEventKind::kExec, 300, 300, 0};
  cron_job.may_be_qemu = false;
  for (int i = 0; i < 1000; ++i) loop->NoteProcessEvent(cron_job);
  EXPECT_FALSE(loop->WaitForPasses(2, 200ms));
  // An exec that may be of QEMU: a pass.
  loop->NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kExec, 301, 301, 0});
  ASSERT_TRUE(loop->WaitForPasses(2, 5s));
  // A known VM's process running another program: a pass (the VM is gone).
  host::ProcessEvent vm_exec{host::ProcessEventKind::kExec, 100, 100, 0};
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
    loop.NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kFork, 100, tid, 100});
    if (tid % 10 == 0) loop.NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kExec, tid, tid, 0});
    std::this_thread::sleep_for(2ms);
  }
  loop.NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kLost, 0, 0, 0});
  ASSERT_TRUE(loop.WaitForPasses(2, 5s));
  EXPECT_FALSE(loop.WaitForPasses(3, 500ms));
  // A request does not wait for events to settle (well within `settle`).
  loop.NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kFork, 100, 201, 100});
  loop.Trigger();
  ASSERT_TRUE(loop.WaitForPasses(3, 500ms));
  EXPECT_FALSE(loop.WaitForPasses(4, 500ms));
  loop.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_THAT(triggers, ::testing::ElementsAre(PassTrigger::kStart, PassTrigger::kProcessEvent,
                                               PassTrigger::kProcessEvent));
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
      loop->NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kFork, pid, pid, 4000});
      host::ProcessEvent exec{host::ProcessEventKind::kExec, pid, pid, 0};
      exec.may_be_qemu = false;
      loop->NoteProcessEvent(exec);
      loop->NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kExit, pid, pid, 0});
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
  loop->NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kFork, 100, 150, 100});
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
    host::ProcessEvent fork{host::ProcessEventKind::kFork, 160, 160, 2};
    fork.comm = other;
    loop->NoteProcessEvent(fork);
    host::ProcessEvent rename{host::ProcessEventKind::kComm, 160, 160, 0};
    rename.comm = other;
    loop->NoteProcessEvent(rename);
  }
  // A user process forking a child it names like a worker: not kthreadd's.
  host::ProcessEvent user{host::ProcessEventKind::kFork, 170, 170, 300};
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
  host::ProcessEvent named{host::ProcessEventKind::kFork, 160, 160, 2};
  named.comm = "vhost-100";
  loop->NoteProcessEvent(named);
  ASSERT_TRUE(loop->WaitForPasses(2, 5s));
  EXPECT_EQ(kernel_.CookieOf(160), cookie);
  // The same by PR_SET_NAME (a process renaming itself).
  host::ProcessEvent rename{host::ProcessEventKind::kComm, 160, 160, 0};
  rename.comm = "vhost-100";
  loop->NoteProcessEvent(rename);
  EXPECT_TRUE(loop->WaitForPasses(3, 5s));
}

// kthreadd's forks are held until the kernel thread has its name.
TEST(DelayedExecClassifier, KernelThreadForksArePassedOnWithTheirName) {
  auto fs = std::make_shared<host::FakePseudoFs>();
  fs->SetFile("/proc/160/comm", "kthreadd\n");
  std::vector<host::ProcessEvent> out;
  discovery::DelayedExecClassifier execs(fs, "/proc", 5ms, [&](const host::ProcessEvent& e) { out.push_back(e); });
  const auto t0 = discovery::DelayedExecClassifier::Clock::now();
  execs.Add(host::ProcessEvent{host::ProcessEventKind::kFork, 160, 160, 2}, t0);
  execs.Add(host::ProcessEvent{host::ProcessEventKind::kFork, 161, 161, 2}, t0);
  execs.Add(host::ProcessEvent{host::ProcessEventKind::kExit, 161, 161, 0}, t0);  // a kworker gone
  execs.Add(host::ProcessEvent{host::ProcessEventKind::kFork, 100, 150, 100}, t0);  // not kthreadd's
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].tid, 150);
  // Not named yet: held again.
  EXPECT_TRUE(execs.Flush(t0 + 5ms).has_value());
  EXPECT_EQ(out.size(), 2u);
  fs->SetFile("/proc/160/comm", "vhost-100\n");
  EXPECT_FALSE(execs.Flush(t0 + 10ms).has_value());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].kind, host::ProcessEventKind::kFork);
  EXPECT_EQ(out[2].tid, 160);
  EXPECT_EQ(out[2].comm, "vhost-100");
}

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
  loop.NoteProcessEvent(host::ProcessEvent{host::ProcessEventKind::kFork, 100, 150, 100});
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
TEST(InInitialPidNamespace, ReadsTheNamespaceLink) {
  EXPECT_EQ(host::InInitialPidNamespace("pid:[4026531836]"), true);
  EXPECT_EQ(host::InInitialPidNamespace("pid:[4026532178]"), false);
  EXPECT_EQ(host::InInitialPidNamespace("net:[4026531836]"), std::nullopt);
  EXPECT_EQ(host::InInitialPidNamespace("pid:[x]"), std::nullopt);
}

}  // namespace
}  // namespace cosched::agent
