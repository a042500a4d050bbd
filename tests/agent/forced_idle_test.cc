#include "agent/forced_idle.h"
#include "host/testing/pseudo_fs_fake.h"
#include "tests/testing/status_matchers.h"

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
  ASSERT_OK(sum);
  EXPECT_EQ(**sum, 1'234'567'890);
  EXPECT_EQ(**ParseCoreForceidleSum("core_forceidle_sum : 0.5\n"), 500'000);
  EXPECT_EQ(**ParseCoreForceidleSum("core_forceidle_sum :  42\n"), 42);
}

TEST(ParseCoreForceidleSum, NoLineIsNotAnError) {
  auto sum = ParseCoreForceidleSum("se.exec_start : 1.000000\ncore_forceidle_sum_x : 3\n");
  ASSERT_OK(sum);
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
  host::FakePseudoFs fs;
  auto set = [&](int tid, const char* value) {
    fs.SetFile("/proc/" + std::to_string(tid) + "/task/" + std::to_string(tid) + "/sched",
               std::string("core_forceidle_sum : ") + value + "\n");
  };
  set(1, "10.000000");
  set(2, "1.000000");
  ForcedIdleMeter meter(&fs, "/proc", "/sys/fs/cgroup");
  std::vector<int> a = {1, 2}, b = {3};
  const std::string none;
  const std::vector<ForcedIdleSource> vms = {{&a, &none}, {&b, &none}};
  auto first = meter.Sample(vms);
  EXPECT_EQ(first[0], 0);  // baseline
  EXPECT_FALSE(first[1].has_value());
  set(1, "12.000000");
  set(2, "1.500000");
  set(3, "7.000000");  // new: adds nothing yet
  auto second = meter.Sample(vms);
  EXPECT_EQ(second[0], 2'500'000);
  EXPECT_EQ(second[1], 0);
  // Thread 2 gone, thread 1's tid reused by a thread with a lower count.
  fs.Remove("/proc/2/task/2/sched");
  set(1, "0.200000");
  auto third = meter.Sample(vms);
  EXPECT_EQ(third[0], 200'000);
}

// cpu.stat of a cgroup v2 group on Linux 6.12 with core scheduling.
constexpr absl::string_view kCpuStat = R"(usage_usec 9876543
user_usec 8000000
system_usec 1876543
core_sched.force_idle_usec 250000
nr_periods 0
nr_throttled 0
throttled_usec 0
)";

TEST(ParseCgroupForceIdle, ReadsMicroseconds) {
  auto ns = ParseCgroupForceIdle(kCpuStat);
  ASSERT_OK(ns);
  EXPECT_EQ(**ns, 250'000'000);
}

TEST(ParseCgroupForceIdle, NoLineIsNotAnError) {
  auto ns = ParseCgroupForceIdle("usage_usec 1\ncore_sched.force_idle_usec_x 3\n");
  ASSERT_OK(ns);
  EXPECT_FALSE(ns->has_value());
}

TEST(ParseCgroupForceIdle, MalformedValueNamesTheField) {
  for (absl::string_view text :
       {"core_sched.force_idle_usec -1\n", "core_sched.force_idle_usec 1.5\n",
        "core_sched.force_idle_usec \n", "core_sched.force_idle_usec 99999999999999999999\n"}) {
    auto ns = ParseCgroupForceIdle(text);
    ASSERT_FALSE(ns.ok()) << text;
    EXPECT_TRUE(absl::IsInvalidArgument(ns.status()));
    EXPECT_NE(ns.status().message().find("core_sched.force_idle_usec"), absl::string_view::npos);
  }
}

TEST(ForcedIdleMeter, CgroupCountIsPreferredAndKeepsTimeOfEndedThreads) {
  host::FakePseudoFs fs;
  const std::string scope = "/machine.slice/machine-qemu\\x2d1\\x2dvm.scope";
  const std::string stat = "/sys/fs/cgroup" + scope + "/cpu.stat";
  auto set_thread = [&](int tid, const char* value) {
    fs.SetFile("/proc/" + std::to_string(tid) + "/task/" + std::to_string(tid) + "/sched",
               std::string("core_forceidle_sum : ") + value + "\n");
  };
  set_thread(1, "10.000000");
  fs.SetFile(stat, "usage_usec 5\ncore_sched.force_idle_usec 10000\n");
  ForcedIdleMeter meter(&fs, "/proc", "/sys/fs/cgroup");
  std::vector<int> tids = {1};
  const std::vector<ForcedIdleSource> vms = {{&tids, &scope}};
  EXPECT_EQ(meter.Sample(vms)[0], 0);  // baseline
  // Thread 1 ended; the cgroup still counts its 3 ms.
  fs.Remove("/proc/1/task/1/sched");
  fs.SetFile(stat, "usage_usec 9\ncore_sched.force_idle_usec 13000\n");
  EXPECT_EQ(meter.Sample(vms)[0], 3'000'000);
  // A kernel without the cgroup field: the threads' counts are used.
  set_thread(1, "20.000000");
  fs.SetFile(stat, "usage_usec 9\n");
  EXPECT_EQ(meter.Sample(vms)[0], 0);  // thread 1's baseline
  set_thread(1, "21.000000");
  EXPECT_EQ(meter.Sample(vms)[0], 1'000'000);
}

TEST(ForcedIdleMeter, HybridHierarchyReadsTheUnifiedMount) {
  host::FakePseudoFs fs;
  const std::string scope = "/machine/vm-a.libvirt-qemu";
  fs.SetFile("/sys/fs/cgroup/unified" + scope + "/cpu.stat", "core_sched.force_idle_usec 7\n");
  ForcedIdleMeter meter(&fs, "/proc", "/sys/fs/cgroup");
  std::vector<int> tids;
  const std::vector<ForcedIdleSource> vms = {{&tids, &scope}};
  EXPECT_EQ(meter.Sample(vms)[0], 0);
  fs.SetFile("/sys/fs/cgroup/unified" + scope + "/cpu.stat", "core_sched.force_idle_usec 9\n");
  EXPECT_EQ(meter.Sample(vms)[0], 2'000);
}

}  // namespace
}  // namespace cosched::agent
