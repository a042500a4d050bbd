// ReportRateLimit (issue #32 item 3): csd, not the agent, bounds how often a
// host may Report.
#include "server/state/report_rate_limit.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;

class ReportRateLimitTest : public ::testing::Test {
 protected:
  absl::Time now_ = absl::FromUnixSeconds(1800000000);
  ReportRateLimit limit_{ReportRateOptions{.per_second = 2, .burst = 5}, [this] { return now_; }};
};

TEST_F(ReportRateLimitTest, ABurstThenTheRateAndEachHostHasItsOwn) {
  for (int i = 0; i < 5; ++i) EXPECT_OK(limit_.Admit("hv-1")) << i;
  absl::Status refused = limit_.Admit("hv-1");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("host 'hv-1'"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("2 Reports a second, bursts of 5"));
  // Another host is not held by hv-1's Reports.
  EXPECT_OK(limit_.Admit("hv-2"));
  // Half a second gives one Report back, not two.
  now_ += absl::Milliseconds(500);
  EXPECT_OK(limit_.Admit("hv-1"));
  EXPECT_EQ(limit_.Admit("hv-1").code(), absl::StatusCode::kResourceExhausted);
  // An agent's own pace (one a second at most) is never refused.
  for (int i = 0; i < 100; ++i) {
    now_ += absl::Seconds(1);
    EXPECT_OK(limit_.Admit("hv-1")) << i;
  }
}

TEST_F(ReportRateLimitTest, NoLimitWhenTheRateIsZero) {
  limit_.set_options({.per_second = 0, .burst = 1});
  for (int i = 0; i < 50; ++i) EXPECT_OK(limit_.Admit("hv-1"));
  EXPECT_EQ(limit_.size(), 0u);
}

// Hosts that report once and go away leave nothing behind for long: a full
// bucket is the same as none, so the table is swept as it doubles.
TEST_F(ReportRateLimitTest, QuietHostsBucketsAreSweptSoTheTableStaysBounded) {
  for (int i = 0; i < 10000; ++i) {
    ASSERT_OK(limit_.Admit("hv-" + std::to_string(i)));
    now_ += absl::Seconds(1);  // each bucket is full again 0.5 s later
  }
  EXPECT_LE(limit_.size(), 1024u);
}

}  // namespace
}  // namespace cosched::server
