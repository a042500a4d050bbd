#include "telemetry/sibling_share_calculator.h"

#include <gtest/gtest.h>

#include <map>

namespace cosched::telemetry {
namespace {

// One core of CPUs 0 and 1 (unless a test says otherwise). Group A (1):
// tids 10, 11, 12; group B (2): tid 20; tid 21 is a host task.
constexpr GroupId kA = 1;
constexpr GroupId kB = 2;

ThreadClassifier Groups() {
  return [](int32_t tid) -> GroupId {
    static const std::map<int32_t, GroupId> groups = {{10, kA}, {11, kA}, {12, kA}, {20, kB}};
    auto it = groups.find(tid);
    return it == groups.end() ? kHostGroup : it->second;
  };
}

CpuTopology OneCore() { return *CpuTopology::FromSiblingLists({{0, 1}, {0, 1}}); }

SchedSwitch Ev(int64_t ts, int cpu, int32_t prev, int32_t next) { return {ts, cpu, prev, next, 0}; }

SiblingShareStats Expect(int64_t run, int64_t same, int64_t idle, int64_t foreign, int64_t unknown,
                         int64_t intervals = 0, int64_t longest = 0) {
  return {run, same, idle, foreign, unknown, intervals, longest};
}

void ExpectStats(const SiblingShareStats& got, const SiblingShareStats& want) {
  EXPECT_EQ(got.run_ns, want.run_ns);
  EXPECT_EQ(got.same_ns, want.same_ns);
  EXPECT_EQ(got.idle_ns, want.idle_ns);
  EXPECT_EQ(got.foreign_ns, want.foreign_ns);
  EXPECT_EQ(got.unknown_ns, want.unknown_ns);
  EXPECT_EQ(got.foreign_intervals, want.foreign_intervals);
  EXPECT_EQ(got.longest_foreign_ns, want.longest_foreign_ns);
}

TEST(SiblingShareCalculator, TwoVmsOnOneCoreAreForeign) {
  SiblingShareCalculator calc(OneCore(), Groups());
  calc.Add(Ev(0, 0, 0, 10));
  calc.Add(Ev(0, 1, 0, 20));
  calc.Add(Ev(100, 0, 10, 0));
  calc.Add(Ev(100, 1, 20, 0));
  SiblingShareWindow w = calc.TakeWindow();
  ExpectStats(w.groups[kA], Expect(100, 0, 0, 100, 0, 1, 100));
  ExpectStats(w.groups[kB], Expect(100, 0, 0, 100, 0, 1, 100));
  EXPECT_EQ(w.cores[0].both_busy_ns, 100);
  EXPECT_EQ(w.events, 4);
  EXPECT_EQ(w.start_ns, 0);
  EXPECT_EQ(w.end_ns, 100);
}

TEST(SiblingShareCalculator, OneVmOnBothSiblingsIsSame) {
  SiblingShareCalculator calc(OneCore(), Groups());
  calc.Add(Ev(0, 0, 0, 10));
  calc.Add(Ev(0, 1, 0, 11));
  calc.Add(Ev(60, 1, 11, 12));  // another thread of A
  SiblingShareWindow w = calc.TakeWindow(100);
  ExpectStats(w.groups[kA], Expect(200, 200, 0, 0, 0));
  EXPECT_EQ(w.cores[0].both_busy_ns, 100);
}

TEST(SiblingShareCalculator, IdleSiblingIsIdle) {
  SiblingShareCalculator calc(OneCore(), Groups());
  calc.Add(Ev(0, 0, 0, 10));
  calc.Add(Ev(0, 1, 20, 0));
  SiblingShareWindow w = calc.TakeWindow(100);
  ExpectStats(w.groups[kA], Expect(100, 0, 100, 0, 0));
  EXPECT_EQ(w.cores[0].one_idle_ns, 100);
  EXPECT_EQ(w.inconsistent_events, 0);  // cpu 1 was not known before
}

TEST(SiblingShareCalculator, SiblingUnknownUntilSeen) {
  SiblingShareCalculator calc(OneCore(), Groups());
  calc.Add(Ev(0, 0, 0, 10));
  calc.Add(Ev(40, 1, 0, 0));
  SiblingShareWindow w = calc.TakeWindow(100);
  ExpectStats(w.groups[kA], Expect(100, 0, 60, 0, 40));
  EXPECT_EQ(w.cores[0].unknown_ns, 40);
  EXPECT_EQ(w.cores[0].one_idle_ns, 60);
}

TEST(SiblingShareCalculator, CountsForeignIntervalsAndTheLongest) {
  SiblingShareCalculator calc(OneCore(), Groups());
  calc.Add(Ev(0, 0, 0, 10));
  calc.Add(Ev(0, 1, 0, 0));
  calc.Add(Ev(100, 1, 0, 21));   // host task: foreign opens
  calc.Add(Ev(150, 1, 21, 0));   // closes: 50
  calc.Add(Ev(300, 1, 0, 20));   // B: opens
  calc.Add(Ev(320, 1, 20, 21));  // host: still foreign, same interval
  calc.Add(Ev(400, 1, 21, 0));   // closes: 100
  calc.Add(Ev(450, 1, 0, 21));   // opens
  calc.Add(Ev(500, 0, 10, 11));  // A switches threads: continues
  calc.Add(Ev(600, 1, 21, 0));   // closes: 150
  calc.Add(Ev(1000, 0, 11, 0));
  SiblingShareWindow w = calc.TakeWindow();
  ExpectStats(w.groups[kA], Expect(1000, 0, 700, 300, 0, 3, 150));
  // B ran 20 ns beside A; the host ran 50 + 80 + 150 ns beside A.
  ExpectStats(w.groups[kB], Expect(20, 0, 0, 20, 0, 1, 20));
  ExpectStats(w.groups[kHostGroup], Expect(280, 0, 0, 280, 0, 3, 150));
  EXPECT_EQ(w.cores[0].both_busy_ns, 300);
  EXPECT_EQ(w.cores[0].one_idle_ns, 700);
}

TEST(SiblingShareCalculator, WindowsSplitTimeAndCarryOpenIntervals) {
  SiblingShareCalculator calc(OneCore(), Groups());
  calc.Add(Ev(0, 0, 0, 10));
  calc.Add(Ev(0, 1, 0, 20));
  SiblingShareWindow first = calc.TakeWindow(100);
  ExpectStats(first.groups[kA], Expect(100, 0, 0, 100, 0, 1, 100));
  calc.Add(Ev(150, 1, 20, 0));
  SiblingShareWindow second = calc.TakeWindow(200);
  // The interval was counted in the window where it started; its length
  // from the start shows in every window it was open in.
  ExpectStats(second.groups[kA], Expect(100, 0, 50, 50, 0, 0, 150));
  EXPECT_EQ(second.start_ns, 100);
  EXPECT_EQ(second.end_ns, 200);
  EXPECT_EQ(second.events, 1);
  SiblingShareWindow third = calc.TakeWindow(300);
  ExpectStats(third.groups[kA], Expect(100, 0, 100, 0, 0));
  // An event older than the window end counts at the window end.
  calc.Add(Ev(250, 0, 10, 0));
  EXPECT_EQ(calc.TakeWindow(300).out_of_order_events, 1);
}

TEST(SiblingShareCalculator, CountsInconsistentAndIgnoredEvents) {
  SiblingShareCalculator calc(OneCore(), Groups());
  calc.Add(Ev(0, 0, 0, 10));
  calc.Add(Ev(10, 0, 11, 0));  // 10 was running, not 11: events were lost
  calc.Add(Ev(20, 7, 0, 10));  // no cpu 7
  SiblingShareWindow w = calc.TakeWindow();
  EXPECT_EQ(w.inconsistent_events, 1);
  EXPECT_EQ(w.ignored_events, 1);
  EXPECT_EQ(w.events, 3);
}

// Found by ring_buffer_fuzz: a page's 64-bit clock past 2^63 gave negative
// timestamps, and differences to them overflowed (UBSan).
TEST(SiblingShareCalculator, IgnoresNegativeTimestamps) {
  SiblingShareCalculator calc(OneCore(), Groups());
  calc.Add(Ev(INT64_MIN + 6, 0, 0, 10));
  calc.Add(Ev(100, 0, 0, 10));
  calc.Add(Ev(-1, 1, 0, 20));
  SiblingShareWindow w = calc.TakeWindow(150);
  EXPECT_EQ(w.ignored_events, 2);
  EXPECT_EQ(w.start_ns, 100);
  ExpectStats(w.groups[kA], Expect(50, 0, 0, 0, 50));
}

// Found by ring_buffer_fuzz too: events 2^62 ns apart on both CPUs of a core
// overflowed the sums. They stop at INT64_MAX instead.
TEST(SiblingShareCalculator, SumsSaturateInsteadOfOverflowing) {
  SiblingShareCalculator calc(OneCore(), Groups());
  calc.Add(Ev(0, 0, 0, 10));
  calc.Add(Ev(0, 1, 0, 11));
  calc.Add(Ev(INT64_MAX - 1, 0, 10, 0));
  calc.Add(Ev(INT64_MAX, 0, 0, 10));
  SiblingShareWindow w = calc.TakeWindow();
  EXPECT_EQ(w.groups[kA].run_ns, INT64_MAX);
  EXPECT_EQ(w.groups[kA].same_ns, INT64_MAX);
  EXPECT_EQ(w.cores[0].both_busy_ns, INT64_MAX - 1);
}

TEST(SiblingShareCalculator, CoresAreIndependentSoOnlyPerCoreOrderMatters) {
  // CPUs 0,2 and 1,3 share cores. Core 1's events come late but in order.
  auto topology = *CpuTopology::FromSiblingLists({{0, 2}, {1, 3}, {0, 2}, {1, 3}});
  SiblingShareCalculator calc(topology, Groups());
  calc.Add(Ev(0, 0, 0, 10));
  calc.Add(Ev(0, 2, 0, 11));
  calc.Add(Ev(100, 0, 10, 0));
  calc.Add(Ev(0, 1, 0, 10));
  calc.Add(Ev(0, 3, 0, 20));
  calc.Add(Ev(100, 3, 20, 0));
  SiblingShareWindow w = calc.TakeWindow(100);
  EXPECT_EQ(w.out_of_order_events, 0);
  // A: 100 same on core 0 (both CPUs), 100 foreign on core 1.
  ExpectStats(w.groups[kA], Expect(300, 200, 0, 100, 0, 1, 100));
}

TEST(SiblingShareCalculator, CpuWithoutSiblingsSharesWithNothing) {
  SiblingShareCalculator calc(CpuTopology::NoSmt(1), Groups());
  calc.Add(Ev(0, 0, 0, 10));
  SiblingShareWindow w = calc.TakeWindow(50);
  ExpectStats(w.groups[kA], Expect(50, 0, 50, 0, 0));
  EXPECT_EQ(w.cores[0].both_busy_ns, 50);
}

// The live collector's case: groups are VMs, keys their trust groups. Two
// VMs of one trust group are "same" to each other and keep their own stats;
// a third VM or a host task stays foreign.
TEST(SiblingShareCalculator, ReclassifyGivesARunningThreadItsNewGroup) {
  // Thread 30 is unknown (a host task) until the classifier learns it is A's.
  std::map<int32_t, GroupId> groups = {{10, kA}};
  SiblingShareCalculator calc(OneCore(), [&groups](int32_t tid) -> GroupId {
    auto it = groups.find(tid);
    return it == groups.end() ? kHostGroup : it->second;
  });
  calc.Add(Ev(0, 0, 0, 10));
  calc.Add(Ev(0, 1, 0, 30));
  calc.Add(Ev(100, 0, 10, 10));  // an event on the core at 100
  groups[30] = kA;
  calc.Reclassify();
  calc.Add(Ev(300, 1, 30, 0));
  calc.Add(Ev(300, 0, 10, 0));
  SiblingShareWindow w = calc.TakeWindow();
  // From the core's last event before the change (100) on, 30 is A's: 200
  // ns of its run, all beside A (same); before that A ran beside the host.
  ExpectStats(w.groups[kA], Expect(500, 400, 0, 100, 0, 1, 100));
}

TEST(SiblingShareCalculator, GroupsOfOneSharingKeyAreSame) {
  constexpr GroupId kC = 3;
  SiblingShareCalculator calc(OneCore(), [](int32_t tid) -> GroupId {
    return tid == 10 ? kA : tid == 20 ? kB : tid == 30 ? kC : kHostGroup;
  });
  calc.SetSharingKey(kA, 7);
  calc.SetSharingKey(kB, 7);
  calc.SetSharingKey(kC, 8);
  calc.Add(Ev(0, 0, 0, 10));
  calc.Add(Ev(0, 1, 0, 20));
  calc.Add(Ev(100, 1, 20, 30));
  calc.Add(Ev(150, 1, 30, 21));
  calc.Add(Ev(200, 0, 10, 0));
  calc.Add(Ev(200, 1, 21, 0));
  SiblingShareWindow w = calc.TakeWindow();
  ExpectStats(w.groups[kA], Expect(200, 100, 0, 100, 0, 1, 100));
  ExpectStats(w.groups[kB], Expect(100, 100, 0, 0, 0));
  ExpectStats(w.groups[kC], Expect(50, 0, 0, 50, 0, 1, 50));
  ExpectStats(w.groups[kHostGroup], Expect(50, 0, 0, 50, 0, 1, 50));
}

}  // namespace
}  // namespace cosched::telemetry
