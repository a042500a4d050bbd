#include "agent/forced_idle.h"

#include <gtest/gtest.h>

namespace cosched::agent {
namespace {

// From /proc/<pid>/task/<tid>/sched of Linux 6.12 with schedstats on.
constexpr absl::string_view kSched = R"(CPU 0/KVM (4242, #threads: 5)
-------------------------------------------------------------------
se.exec_start                                :     123456789.123456
se.vruntime                                  :         98765.432100
se.sum_exec_runtime                          :         45678.901234
sum_sleep_runtime                            :             0.000000
core_forceidle_sum                           :          1234.567890
nr_switches                                  :                 1234
)";

TEST(ParseCoreForceidleSum, ReadsMillisecondsWithSixDecimals) {
  auto sum = ParseCoreForceidleSum(kSched);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(**sum, 1'234'567'890);
  EXPECT_EQ(**ParseCoreForceidleSum("core_forceidle_sum : 0.5\n"), 500'000);
  EXPECT_EQ(**ParseCoreForceidleSum("core_forceidle_sum :  42\n"), 42);
}

TEST(ParseCoreForceidleSum, NoLineIsNotAnError) {
  auto sum = ParseCoreForceidleSum("se.exec_start : 1.000000\ncore_forceidle_sum_x : 3\n");
  ASSERT_TRUE(sum.ok());
  EXPECT_FALSE(sum->has_value());
}

TEST(ParseCoreForceidleSum, MalformedValueNamesTheLine) {
  for (absl::string_view text : {"core_forceidle_sum : 1.2.3\n", "core_forceidle_sum : -1.000000\n",
                                 "core_forceidle_sum : abc\n", "core_forceidle_sum : 1.1234567\n",
                                 "core_forceidle_sum :\n"}) {
    auto sum = ParseCoreForceidleSum(text);
    ASSERT_FALSE(sum.ok()) << text;
    EXPECT_TRUE(absl::IsInvalidArgument(sum.status()));
    EXPECT_NE(sum.status().message().find("core_forceidle_sum"), absl::string_view::npos);
  }
}

TEST(ForcedIdleMeter, GrowthPerVmFromItsThreads) {
  FakeHostFs fs;
  auto set = [&](int tid, const char* value) {
    fs.SetFile("/proc/" + std::to_string(tid) + "/task/" + std::to_string(tid) + "/sched",
               std::string("core_forceidle_sum : ") + value + "\n");
  };
  set(1, "10.000000");
  set(2, "1.000000");
  ForcedIdleMeter meter(&fs, "/proc");
  std::vector<int> a = {1, 2}, b = {3};
  auto first = meter.Sample({&a, &b});
  EXPECT_EQ(first[0], 0);  // baseline
  EXPECT_FALSE(first[1].has_value());
  set(1, "12.000000");
  set(2, "1.500000");
  set(3, "7.000000");  // new: adds nothing yet
  auto second = meter.Sample({&a, &b});
  EXPECT_EQ(second[0], 2'500'000);
  EXPECT_EQ(second[1], 0);
  // Thread 2 gone, thread 1's tid reused by a thread with a lower count.
  fs.RemoveFile("/proc/2/task/2/sched");
  set(1, "0.200000");
  auto third = meter.Sample({&a, &b});
  EXPECT_EQ(third[0], 200'000);
}

}  // namespace
}  // namespace cosched::agent
