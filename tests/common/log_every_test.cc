#include "common/log_every.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cosched {
namespace {

// Collects the lines glog writes while it is added.
class Lines : public google::LogSink {
 public:
  Lines() { google::AddLogSink(this); }
  ~Lines() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t length) override {
    lines.emplace_back(message, length);
  }
  std::vector<std::string> lines;
};

// glog's LOG_EVERY_T logs nothing on a machine up for less than its period;
// this one logs its first line at once, then at most once a period.
TEST(LogEveryTest, TheFirstLineIsLoggedAtOnceThenOncePerPeriod) {
  Lines sink;
  for (int i = 0; i < 3; ++i) COSCHED_LOG_EVERY_T(WARNING, 3600) << "line " << i;
  ASSERT_EQ(sink.lines.size(), 1u);
  EXPECT_EQ(sink.lines[0], "line 0");
}

TEST(LogEveryTest, EachCallSiteHasItsOwnPeriod) {
  Lines sink;
  for (int i = 0; i < 2; ++i) {
    COSCHED_LOG_EVERY_T(WARNING, 3600) << "a";
    COSCHED_LOG_EVERY_T(WARNING, 3600) << "b";
  }
  EXPECT_EQ(sink.lines, std::vector<std::string>({"a", "b"}));
}

TEST(LogThrottleTest, AllowsOncePerPeriod) {
  LogThrottle throttle;
  EXPECT_TRUE(throttle.Allow(std::chrono::hours(1)));
  EXPECT_FALSE(throttle.Allow(std::chrono::hours(1)));
  EXPECT_TRUE(throttle.Allow(std::chrono::nanoseconds(0)));
}

}  // namespace
}  // namespace cosched
