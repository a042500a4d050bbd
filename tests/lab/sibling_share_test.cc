#include "sibling_share.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace cosched::lab {
namespace {

// A tracefs excerpt (global clock) on one core of two siblings, CPUs 0 and 1.
// Group A: tids 10, 11, 12; group B: tid 20; tid 21 is a host task.
constexpr std::string_view kTrace = R"(# tracer: nop
#
# entries-in-buffer/entries-written: 9/9   #P:4
#
#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
          <idle>-0       [000] d..2.   100.000000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=CPU 0/KVM next_pid=10 next_prio=120
          <idle>-0       [001] d..2.   100.000100: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=CPU 0/KVM next_pid=20 next_prio=120
       CPU 0/KVM-20      [001] d..2.   100.001100: sched_switch: prev_comm=CPU 0/KVM prev_pid=20 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
       CPU 0/KVM-10      [000] d..2.   100.002100: sched_switch: prev_comm=CPU 0/KVM prev_pid=10 prev_prio=120 prev_state=R ==> next_comm=IO iothread0 next_pid=11 next_prio=120
          <idle>-0       [001] dN.2.   100.003100: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=kworker/1:1 next_pid=21 next_prio=120
    IO iothread0-11      [000] d..2.   100.003600: sched_switch: prev_comm=IO iothread0 prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=CPU 0/KVM next_pid=10 next_prio=120
     kworker/1:1-21      [001] d..2.   100.004100: sched_switch: prev_comm=kworker/1:1 prev_pid=21 prev_prio=120 prev_state=I ==> next_comm=vhost-9 next_pid=12 next_prio=120
       CPU 0/KVM-10      [000] d..2.   100.005100: sched_switch: prev_comm=CPU 0/KVM prev_pid=10 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
         vhost-9-12      [001] d..2.   100.006100: sched_switch: prev_comm=vhost-9 prev_pid=12 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
)";

SiblingShareInput CoreOfTwo() {
  SiblingShareInput in;
  in.siblings = SiblingsFromLists({{0, {0, 1}}, {1, {0, 1}}});
  in.tid_group = {{10, "A"}, {11, "A"}, {12, "A"}, {20, "B"}};
  return in;
}

TEST(ParseSchedSwitchLine, ReadsNamesWithSpaces) {
  auto ev = ParseSchedSwitchLine(
      "       CPU 0/KVM-10      [003] d..2.   123.456789: sched_switch: prev_comm=CPU 0/KVM "
      "prev_pid=10 prev_prio=120 prev_state=R+ ==> next_comm=CPU 1/KVM next_pid=73 next_prio=120");
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->cpu, 3);
  EXPECT_EQ(ev->ts_ns, 123'456'789'000);
  EXPECT_EQ(ev->prev_comm, "CPU 0/KVM");
  EXPECT_EQ(ev->prev_pid, 10);
  EXPECT_EQ(ev->next_comm, "CPU 1/KVM");
  EXPECT_EQ(ev->next_pid, 73);
}

TEST(ParseSchedSwitchLine, ReadsLinesWithoutFlagsOrWithTgidAndNanoseconds) {
  auto no_flags = ParseSchedSwitchLine(
      "  <idle>-0 [001] 5.000001: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 "
      "prev_state=R ==> next_comm=sh next_pid=1 next_prio=120");
  ASSERT_TRUE(no_flags);
  EXPECT_EQ(no_flags->cpu, 1);
  EXPECT_EQ(no_flags->ts_ns, 5'000'001'000);
  auto tgid = ParseSchedSwitchLine(
      "  odd [name]-7 (    7) [002] d..2. 5.123456789: sched_switch: prev_comm=odd [name] prev_pid=7 "
      "prev_prio=120 prev_state=S ==> next_comm=swapper/2 next_pid=0 next_prio=120");
  ASSERT_TRUE(tgid);
  EXPECT_EQ(tgid->cpu, 2);
  EXPECT_EQ(tgid->ts_ns, 5'123'456'789);
  EXPECT_EQ(tgid->prev_comm, "odd [name]");
  EXPECT_EQ(tgid->next_pid, 0);
}

TEST(ParseSchedSwitchLine, RejectsOtherLines) {
  EXPECT_FALSE(ParseSchedSwitchLine("# tracer: nop"));
  EXPECT_FALSE(ParseSchedSwitchLine(""));
  EXPECT_FALSE(ParseSchedSwitchLine(
      "  sh-1 [000] d..2. 1.000000: sched_wakeup: comm=sh pid=1 prio=120 target_cpu=000"));
  EXPECT_FALSE(ParseSchedSwitchLine(
      "  sh-1 [000] d..2. 1.000000: sched_switch: prev_comm=sh prev_pid=x prev_prio=120 prev_state=S "
      "==> next_comm=swapper/0 next_pid=0 next_prio=120"));
  EXPECT_FALSE(ParseSchedSwitchLine("  sh-1 [000] d..2. 1.000000: sched_switch: truncated"));
}

TEST(ParseLostEventsLine, ReadsCpuAndCount) {
  auto lost = ParseLostEventsLine("CPU:3 [LOST 120 EVENTS]");
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->cpu, 3);
  EXPECT_EQ(lost->count, 120);
  EXPECT_FALSE(ParseLostEventsLine("CPU:3 [LOST many EVENTS]"));
}

TEST(ParseCpuList, RangesAndSingles) {
  EXPECT_EQ(*ParseCpuList("0-1\n"), (std::vector<int>{0, 1}));
  EXPECT_EQ(*ParseCpuList("0,2-3"), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(*ParseCpuList("5"), (std::vector<int>{5}));
  EXPECT_FALSE(ParseCpuList("3-1"));
  EXPECT_FALSE(ParseCpuList("a"));
  EXPECT_FALSE(ParseCpuList("1,"));
}

TEST(ComputeSiblingShare, SplitsRunTimeByWhatTheSiblingRan) {
  SiblingShareInput in = CoreOfTwo();
  ParseTraceText(kTrace, &in);
  ASSERT_EQ(in.events.size(), 9u);
  SiblingShareReport r = ComputeSiblingShare(std::move(in));
  EXPECT_EQ(r.events, 9);
  EXPECT_EQ(r.inconsistent_events, 0);
  EXPECT_EQ(r.last_ts_ns - r.first_ts_ns, 6'100'000);

  const SiblingShareStats& a = r.groups.at("A");
  // 0-100us: sibling not seen yet; then B (foreign), idle, the host task
  // (foreign, one interval across A's own 11 -> 10 switch), A itself, idle.
  EXPECT_EQ(a.run_ns, 7'100'000);
  EXPECT_EQ(a.unknown_ns, 100'000);
  EXPECT_EQ(a.foreign_ns, 2'000'000);
  EXPECT_EQ(a.idle_ns, 3'000'000);
  EXPECT_EQ(a.same_ns, 2'000'000);
  EXPECT_EQ(a.same_ns + a.idle_ns + a.foreign_ns + a.unknown_ns, a.run_ns);
  EXPECT_EQ(a.foreign_intervals, 2);
  EXPECT_EQ(a.longest_foreign_ns, 1'000'000);

  const SiblingShareStats& b = r.groups.at("B");
  EXPECT_EQ(b.run_ns, 1'000'000);
  EXPECT_EQ(b.foreign_ns, 1'000'000);
  EXPECT_EQ(b.foreign_intervals, 1);
  EXPECT_EQ(b.longest_foreign_ns, 1'000'000);
  EXPECT_DOUBLE_EQ(b.Pct(b.foreign_ns), 100.0);
}

TEST(ComputeSiblingShare, SortsEventsOfDifferentCpusByTime) {
  SiblingShareInput in = CoreOfTwo();
  ParseTraceText(kTrace, &in);
  std::reverse(in.events.begin(), in.events.end());
  SiblingShareReport r = ComputeSiblingShare(std::move(in));
  EXPECT_EQ(r.groups.at("A").run_ns, 7'100'000);
  EXPECT_EQ(r.groups.at("A").foreign_ns, 2'000'000);
}

TEST(ComputeSiblingShare, OtherCoreIsNotASibling) {
  SiblingShareInput in;
  in.siblings = SiblingsFromLists({{0, {0, 1}}, {1, {0, 1}}, {2, {2, 3}}, {3, {2, 3}}});
  in.tid_group = {{10, "A"}, {20, "B"}};
  ParseTraceText(R"(
 <idle>-0 [000] d..2. 1.000000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=CPU 0/KVM next_pid=10 next_prio=120
 <idle>-0 [001] d..2. 1.000000: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=swapper/1 next_pid=0 next_prio=120
 <idle>-0 [002] d..2. 1.000000: sched_switch: prev_comm=swapper/2 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=CPU 0/KVM next_pid=20 next_prio=120
 <idle>-0 [003] d..2. 1.000000: sched_switch: prev_comm=swapper/3 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=CPU 0/KVM next_pid=30 next_prio=120
 CPU 0/KVM-10 [000] d..2. 1.010000: sched_switch: prev_comm=CPU 0/KVM prev_pid=10 prev_prio=120 prev_state=R ==> next_comm=swapper/0 next_pid=0 next_prio=120
)", &in);
  SiblingShareReport r = ComputeSiblingShare(std::move(in));
  EXPECT_EQ(r.groups.at("A").run_ns, 10'000'000);
  EXPECT_EQ(r.groups.at("A").idle_ns, 10'000'000);
  // B's sibling ran tid 30, which is in no group: foreign, still open at the
  // end of the trace and closed there.
  EXPECT_EQ(r.groups.at("B").foreign_ns, 10'000'000);
  EXPECT_EQ(r.groups.at("B").foreign_intervals, 1);
  EXPECT_EQ(r.groups.at("B").longest_foreign_ns, 10'000'000);
}

TEST(ComputeSiblingShare, CountsInconsistentAndLostEventsAndListsIdleGroups) {
  SiblingShareInput in = CoreOfTwo();
  in.tid_group[99] = "C";
  ParseTraceText(R"(
 <idle>-0 [000] d..2. 1.000000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=CPU 0/KVM next_pid=10 next_prio=120
CPU:0 [LOST 7 EVENTS]
 sh-5 [000] d..2. 1.000500: sched_switch: prev_comm=sh prev_pid=5 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
)", &in);
  SiblingShareReport r = ComputeSiblingShare(std::move(in));
  EXPECT_EQ(r.lost_events, 7);
  EXPECT_EQ(r.inconsistent_events, 1);
  ASSERT_TRUE(r.groups.count("C"));
  EXPECT_EQ(r.groups.at("C").run_ns, 0);
  EXPECT_EQ(r.groups.at("C").Pct(0), 0.0);
}

TEST(ReportToJson, HasTheFiguresPerGroup) {
  SiblingShareInput in = CoreOfTwo();
  ParseTraceText(kTrace, &in);
  std::string json = ReportToJson(ComputeSiblingShare(std::move(in)));
  EXPECT_NE(json.find("\"window_ns\": 6100000"), std::string::npos) << json;
  EXPECT_NE(json.find("\"foreign_pct\": 28.169"), std::string::npos) << json;
  EXPECT_NE(json.find("\"longest_foreign_ns\": 1000000"), std::string::npos) << json;
  std::string text = ReportToText(ComputeSiblingShare([] {
    SiblingShareInput again = CoreOfTwo();
    ParseTraceText(kTrace, &again);
    return again;
  }()));
  EXPECT_EQ(text, "A 7.100 28.169 42.254 28.169 1.408 2 1000.0\nB 1.000 0.000 0.000 100.000 0.000 1 1000.0\n");
}

}  // namespace
}  // namespace cosched::lab
