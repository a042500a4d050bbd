#include "host/cpu_affinity.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "host/testing/cpu_affinity_fake.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::host {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuSetTest, SortsAndFormatsLikeTheKernel) {
  EXPECT_EQ(CpuSet({4, 1, 0, 1}).ToString(), "0-1,4");
  EXPECT_EQ(CpuSet({2, 3, 6, 7}).ToString(), "2-3,6-7");
  EXPECT_EQ(CpuSet({5}).ToString(), "5");
  EXPECT_EQ(CpuSet().ToString(), "");
  EXPECT_THAT(CpuSet({3, 1, 2}).cpus(), ElementsAre(1, 2, 3));
}

TEST(CpuSetTest, SetOperations) {
  const CpuSet a{0, 1, 2, 3};
  const CpuSet b{2, 3, 4};
  EXPECT_EQ(a.Union(b), CpuSet({0, 1, 2, 3, 4}));
  EXPECT_EQ(a.Intersect(b), CpuSet({2, 3}));
  EXPECT_EQ(a.Minus(b), CpuSet({0, 1}));
  EXPECT_TRUE(CpuSet({1, 2}).IsSubsetOf(a));
  EXPECT_FALSE(b.IsSubsetOf(a));
  EXPECT_TRUE(CpuSet().IsSubsetOf(a));
  EXPECT_TRUE(a.Contains(3));
  EXPECT_FALSE(a.Contains(4));
}

TEST(CpuAffinityErrnoStatusTest, EachErrnoHasItsCode) {
  absl::Status gone = CpuAffinityErrnoStatus(ESRCH, "sched_setaffinity", 42);
  EXPECT_TRUE(absl::IsNotFound(gone));
  EXPECT_THAT(gone.message(), HasSubstr("thread 42 is gone"));

  absl::Status denied =
      CpuAffinityErrnoStatus(EPERM, "sched_setaffinity", 42, CpuSet{2, 3});
  EXPECT_TRUE(absl::IsPermissionDenied(denied));
  EXPECT_THAT(denied.message(), HasSubstr("CAP_SYS_NICE"));
  EXPECT_THAT(denied.message(), HasSubstr("CPUs 2-3"));

  EXPECT_TRUE(absl::IsInvalidArgument(
      CpuAffinityErrnoStatus(EINVAL, "sched_setaffinity", 42)));
  EXPECT_TRUE(absl::IsInternal(
      CpuAffinityErrnoStatus(EFAULT, "sched_getaffinity", 42)));
  EXPECT_OK(CpuAffinityErrnoStatus(0, "sched_getaffinity", 42));
}

TEST(FakeCpuAffinityTest, BehavesLikeTheKernel) {
  FakeCpuAffinity fake(CpuSet{0, 1, 2, 3});
  fake.AddThread(10);
  EXPECT_EQ(*fake.Get(10), CpuSet({0, 1, 2, 3}));
  ASSERT_OK(fake.Set(10, CpuSet{1, 3}));
  EXPECT_EQ(fake.CpusOf(10), CpuSet({1, 3}));

  // A cpuset narrows what Set gives; nothing left is EINVAL.
  fake.SetAllowed(10, CpuSet{0, 1});
  ASSERT_OK(fake.Set(10, CpuSet{1, 3}));
  EXPECT_EQ(fake.CpusOf(10), CpuSet({1}));
  EXPECT_TRUE(absl::IsInvalidArgument(fake.Set(10, CpuSet{3})));

  fake.SetThreadErrno(10, EPERM);
  EXPECT_TRUE(absl::IsPermissionDenied(fake.Set(10, CpuSet{0})));
  EXPECT_OK(fake.Get(10));

  fake.RemoveThread(10);
  EXPECT_TRUE(absl::IsNotFound(fake.Get(10).status()));
  EXPECT_TRUE(absl::IsNotFound(fake.Set(10, CpuSet{0})));
  EXPECT_EQ(fake.write_calls(), 5);
  EXPECT_EQ(fake.read_calls(), 3);
}

// The real kernel, on a thread of this test process: needs no privilege.
TEST(LinuxCpuAffinityTest, SetsAndReadsBackOnThisMachine) {
  LinuxCpuAffinity kernel;
  std::mutex mu;
  std::condition_variable cv;
  int tid = 0;
  bool done = false;
  std::thread worker([&] {
    std::unique_lock<std::mutex> lock(mu);
    tid = static_cast<int>(syscall(SYS_gettid));
    cv.notify_all();
    cv.wait(lock, [&] { return done; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return tid != 0; });
  }

  absl::StatusOr<CpuSet> before = kernel.Get(tid);
  ASSERT_OK(before);
  ASSERT_FALSE(before->empty());
  const CpuSet first{before->cpus().front()};
  ASSERT_OK(kernel.Set(tid, first));
  absl::StatusOr<CpuSet> after = kernel.Get(tid);
  ASSERT_OK(after);
  EXPECT_EQ(*after, first) << after->ToString();
  ASSERT_OK(kernel.Set(tid, *before));
  EXPECT_EQ(*kernel.Get(tid), *before);

  EXPECT_TRUE(absl::IsInvalidArgument(kernel.Set(tid, CpuSet())));
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  worker.join();

  // Beyond pid_max (at most 2^22): no such thread.
  constexpr int kNoSuchTid = (1 << 22) + 7;
  EXPECT_TRUE(absl::IsNotFound(kernel.Get(kNoSuchTid).status()));
  EXPECT_TRUE(absl::IsNotFound(kernel.Set(kNoSuchTid, first)));
}

}  // namespace
}  // namespace cosched::host
