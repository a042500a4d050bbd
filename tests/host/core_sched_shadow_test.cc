#include "host/core_sched_shadow.h"

#include <cerrno>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/testing/core_sched_fake.h"
#include "tests/testing/status_matchers.h"

namespace cosched::host {
namespace {

using ::testing::HasSubstr;

// The cookie a read gives; a failed read fails the test and gives 0.
uint64_t CookieRead(absl::StatusOr<uint64_t> read) {
  EXPECT_OK(read.status());
  return read.ok() ? *read : 0;
}

class ShadowCoreSchedTest : public ::testing::Test {
 protected:
  ShadowCoreSchedTest() {
    kernel_.AddTask(100, 100, 100, /*cookie=*/0);
    kernel_.AddTask(101, 100, 100, /*cookie=*/0);
    kernel_.AddTask(200, 200, 200, /*cookie=*/77);
  }
  FakeCoreSched kernel_;
  ShadowCoreSched shadow_{&kernel_};
};

TEST_F(ShadowCoreSchedTest, ReadsTheKernelUntilWrittenAndNeverWritesIt) {
  EXPECT_EQ(CookieRead(shadow_.Get(200)), 77u);
  kernel_.ResetCallCounts();

  ASSERT_OK(shadow_.Create(100, CoreSchedScope::kThread));
  const uint64_t made = CookieRead(shadow_.Get(100));
  EXPECT_NE(made, 0u);
  EXPECT_NE(made, 77u);
  // A courier carries 100's shadow cookie to 101, as the reconciler does.
  std::thread courier([&] {
    shadow_.OnCourierStart();
    EXPECT_OK(shadow_.ShareFrom(100));
    EXPECT_EQ(CookieRead(shadow_.Get(0)), made);
    EXPECT_OK(shadow_.ShareTo(101, CoreSchedScope::kThread));
    shadow_.OnCourierEnd();
  });
  courier.join();
  EXPECT_EQ(CookieRead(shadow_.Get(101)), made);
  EXPECT_EQ(shadow_.writes(), 3);

  // The kernel saw reads only: every task keeps its cookie.
  EXPECT_EQ(kernel_.write_calls(), 0);
  EXPECT_EQ(kernel_.CookieOf(100), 0u);
  EXPECT_EQ(kernel_.CookieOf(101), 0u);
  EXPECT_EQ(kernel_.CookieOf(200), 77u);
}

TEST_F(ShadowCoreSchedTest, EachCreateIsANewCookie) {
  ASSERT_OK(shadow_.Create(100, CoreSchedScope::kThread));
  ASSERT_OK(shadow_.Create(101, CoreSchedScope::kThread));
  const uint64_t a = CookieRead(shadow_.Get(100));
  const uint64_t b = CookieRead(shadow_.Get(101));
  EXPECT_NE(a, b);
}

TEST_F(ShadowCoreSchedTest, FailsWhereTheKernelWould) {
  kernel_.RemoveTask(101);
  EXPECT_EQ(shadow_.Create(101, CoreSchedScope::kThread).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(shadow_.Get(101).status().code(), absl::StatusCode::kNotFound);
  kernel_.SetTaskErrno(200, EPERM);
  EXPECT_EQ(shadow_.ShareTo(200, CoreSchedScope::kThread).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(shadow_.writes(), 0);
  // A write shadowed before the task went away is not read back either.
  ASSERT_OK(shadow_.Create(100, CoreSchedScope::kThread));
  kernel_.RemoveTask(100);
  EXPECT_EQ(shadow_.Get(100).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ShadowCoreSchedTest, OnlyThreadScopeIsModelled) {
  absl::Status group = shadow_.Create(100, CoreSchedScope::kThreadGroup);
  EXPECT_EQ(group.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(group.message(), HasSubstr("not modelled"));
  EXPECT_EQ(shadow_.ShareTo(100, CoreSchedScope::kProcessGroup).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace cosched::host
