#include "discovery/exec_classifier.h"

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/testing/pseudo_fs_fake.h"

namespace cosched::discovery {
namespace {

using namespace std::chrono_literals;
using namespace std::string_literals;

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
    ClassifyExec(fs, "/proc", event);
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
  ClassifyExec(fs, "/proc", fork);
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
  DelayedExecClassifier execs(fs, "/proc", 5ms, [&](const host::ProcessEvent& e) { out.push_back(e); });
  const auto t0 = DelayedExecClassifier::Clock::now();

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

TEST(DelayedExecClassifier, KernelThreadForksArePassedOnWithTheirName) {
  auto fs = std::make_shared<host::FakePseudoFs>();
  fs->SetFile("/proc/160/comm", "kthreadd\n");
  std::vector<host::ProcessEvent> out;
  DelayedExecClassifier execs(fs, "/proc", 5ms, [&](const host::ProcessEvent& e) { out.push_back(e); });
  const auto t0 = DelayedExecClassifier::Clock::now();
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

}  // namespace
}  // namespace cosched::discovery
