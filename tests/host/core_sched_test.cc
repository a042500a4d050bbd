#include <cerrno>
#include <thread>

#include "host/core_sched.h"
#include "host/testing/core_sched_fake.h"
#include "host/core_sched_prctl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::host {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

TEST(CoreSchedErrnoStatusTest, EachErrnoIsSpecific) {
  EXPECT_OK(CoreSchedErrnoStatus(0, "GET", 5));

  absl::Status gone = CoreSchedErrnoStatus(ESRCH, "SHARE_TO", 42);
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.message(), HasSubstr("thread 42 is gone"));
  EXPECT_THAT(gone.message(), HasSubstr("ESRCH"));

  absl::Status perm = CoreSchedErrnoStatus(EPERM, "CREATE", 42);
  EXPECT_EQ(perm.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(perm.message(),
              HasSubstr("no ptrace access to 42: needs CAP_SYS_PTRACE"));

  absl::Status nosmt = CoreSchedErrnoStatus(ENODEV, "GET", 0);
  EXPECT_EQ(nosmt.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(nosmt.message(), HasSubstr("no SMT on this host"));

  absl::Status nokernel = CoreSchedErrnoStatus(EINVAL, "GET", 0);
  EXPECT_EQ(nokernel.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(nokernel.message(),
              HasSubstr("kernel lacks core scheduling (CONFIG_SCHED_CORE)"));

  absl::Status other = CoreSchedErrnoStatus(EFAULT, "GET", 0);
  EXPECT_EQ(other.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(other.message(), HasSubstr("EFAULT"));
}

TEST(CoreSchedProbeTest, EachErrnoMapsToASupportLevel) {
  EXPECT_EQ(CoreSchedProbeFromErrno(0).support, v1::CORE_SCHED_SUPPORT_SUPPORTED);
  EXPECT_EQ(CoreSchedProbeFromErrno(ENODEV).support,
            v1::CORE_SCHED_SUPPORT_NO_SMT);
  EXPECT_EQ(CoreSchedProbeFromErrno(EINVAL).support,
            v1::CORE_SCHED_SUPPORT_NO_KERNEL_SUPPORT);
  EXPECT_EQ(CoreSchedProbeFromErrno(EPERM).support,
            v1::CORE_SCHED_SUPPORT_NO_PERMISSION);
  EXPECT_EQ(CoreSchedProbeFromErrno(EFAULT).support,
            v1::CORE_SCHED_SUPPORT_UNSPECIFIED);
  for (int err : {0, ENODEV, EINVAL, EPERM, EFAULT}) {
    EXPECT_FALSE(CoreSchedProbeFromErrno(err).detail.empty()) << err;
  }
  EXPECT_THAT(CoreSchedProbeFromErrno(ENODEV).detail,
              HasSubstr("no SMT on this host"));
}

// Runs anywhere: this machine's kernel may or may not do core scheduling,
// but the answer must be one of the defined ones, with a reason.
TEST(PrctlCoreSchedTest, ProbeGivesADefinedOutcome) {
  PrctlCoreSched core_sched;
  CoreSchedProbe probe = core_sched.Probe();
  EXPECT_THAT(probe.support, AnyOf(v1::CORE_SCHED_SUPPORT_SUPPORTED,
                                   v1::CORE_SCHED_SUPPORT_NO_SMT,
                                   v1::CORE_SCHED_SUPPORT_NO_KERNEL_SUPPORT,
                                   v1::CORE_SCHED_SUPPORT_NO_PERMISSION));
  EXPECT_FALSE(probe.detail.empty());
  // GET on itself agrees with the probe.
  absl::StatusOr<uint64_t> own = core_sched.Get(0);
  EXPECT_EQ(own.ok(), probe.support == v1::CORE_SCHED_SUPPORT_SUPPORTED)
      << own.status();
}

TEST(FakeCoreSchedTest, CreateShareAndGet) {
  FakeCoreSched kernel(/*default_caller_tid=*/1);
  kernel.AddTask(100, 100);
  kernel.AddTask(101, 100);
  kernel.AddTask(200, 200);

  EXPECT_EQ(*kernel.Get(100), 0u);
  ASSERT_OK(kernel.Create(100, CoreSchedScope::kThreadGroup));
  const uint64_t vm1 = *kernel.Get(100);
  EXPECT_NE(vm1, 0u);
  EXPECT_EQ(*kernel.Get(101), vm1);
  EXPECT_EQ(*kernel.Get(200), 0u);

  // Put 200 into 100's group the way the agent will: pull, then push.
  ASSERT_OK(kernel.ShareFrom(100));
  EXPECT_EQ(*kernel.Get(0), vm1);
  ASSERT_OK(kernel.ShareTo(200, CoreSchedScope::kThread));
  EXPECT_EQ(*kernel.Get(200), vm1);

  ASSERT_OK(kernel.Create(200, CoreSchedScope::kThread));
  EXPECT_NE(*kernel.Get(200), vm1);
  EXPECT_EQ(kernel.write_calls(), 4);
  EXPECT_EQ(kernel.get_calls(), 7);
  kernel.ResetCallCounts();
  EXPECT_EQ(kernel.write_calls(), 0);
}

TEST(FakeCoreSchedTest, CallerIsPerThread) {
  FakeCoreSched kernel(1);
  kernel.AddTask(100, 100, -1, /*cookie=*/7);
  std::thread helper([&] {
    kernel.SetCallerTid(50);
    ASSERT_OK(kernel.ShareFrom(100));
  });
  helper.join();
  EXPECT_EQ(kernel.CookieOf(50), 7u);
  EXPECT_EQ(kernel.CookieOf(1), 0u);
}

TEST(FakeCoreSchedTest, ErrorsAreTheKernels) {
  FakeCoreSched kernel;
  kernel.AddTask(100, 100);
  EXPECT_EQ(kernel.Get(999).status().code(), absl::StatusCode::kNotFound);
  kernel.RemoveTask(100);
  EXPECT_THAT(kernel.ShareTo(100, CoreSchedScope::kThread).message(),
              HasSubstr("thread 100 is gone"));

  kernel.AddTask(300, 300);
  kernel.SetTaskErrno(300, EPERM);
  EXPECT_EQ(kernel.Create(300, CoreSchedScope::kThread).code(),
            absl::StatusCode::kPermissionDenied);
  kernel.SetTaskErrno(300, 0);
  EXPECT_OK(kernel.Create(300, CoreSchedScope::kThread));

  kernel.SetMode(FakeCoreSched::Mode::kNoSmt);
  EXPECT_EQ(kernel.Probe().support, v1::CORE_SCHED_SUPPORT_NO_SMT);
  EXPECT_THAT(kernel.Create(300, CoreSchedScope::kThread).message(),
              HasSubstr("no SMT on this host"));
  kernel.SetMode(FakeCoreSched::Mode::kNoKernelSupport);
  EXPECT_EQ(kernel.Probe().support, v1::CORE_SCHED_SUPPORT_NO_KERNEL_SUPPORT);
  EXPECT_EQ(kernel.Get(300).status().code(), absl::StatusCode::kUnimplemented);
  kernel.SetMode(FakeCoreSched::Mode::kNoPermission);
  EXPECT_EQ(kernel.Probe().support, v1::CORE_SCHED_SUPPORT_NO_PERMISSION);
  kernel.SetMode(FakeCoreSched::Mode::kSupported);
  EXPECT_EQ(kernel.Probe().support, v1::CORE_SCHED_SUPPORT_SUPPORTED);
}

TEST(FakeCoreSchedTest, ProcessGroupScope) {
  FakeCoreSched kernel;
  kernel.AddTask(100, 100, /*pgid=*/100);
  kernel.AddTask(110, 110, /*pgid=*/100);
  kernel.AddTask(120, 120, /*pgid=*/120);
  ASSERT_OK(kernel.Create(100, CoreSchedScope::kProcessGroup));
  EXPECT_EQ(kernel.CookieOf(100), kernel.CookieOf(110));
  EXPECT_EQ(kernel.CookieOf(120), 0u);
}

}  // namespace
}  // namespace cosched::host
