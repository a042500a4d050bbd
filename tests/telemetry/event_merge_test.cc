#include "telemetry/event_merge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace cosched::telemetry {
namespace {

SchedSwitch At(int64_t ts, int cpu, int32_t next = 1) { return {ts, cpu, 0, next, 0}; }

TEST(MergeSortedRuns, OrdersByTimeThenRun) {
  std::vector<SchedSwitch> a = {At(1, 0), At(5, 0), At(5, 0, 2), At(9, 0)};
  std::vector<SchedSwitch> b = {At(2, 1), At(5, 1), At(6, 1)};
  std::vector<SchedSwitch> empty;
  std::vector<std::span<const SchedSwitch>> runs = {a, empty, b};
  std::vector<SchedSwitch> out;
  MergeSortedRuns(runs, [&](const SchedSwitch& ev) { out.push_back(ev); });
  std::vector<SchedSwitch> want = {At(1, 0),    At(2, 1), At(5, 0), At(5, 0, 2),
                                   At(5, 1),    At(6, 1), At(9, 0)};
  EXPECT_EQ(out, want);
}

TEST(MergeSortedRuns, MatchesAStableSortOnRandomRuns) {
  std::mt19937 rng(3);
  std::vector<std::vector<SchedSwitch>> runs(16);
  std::vector<SchedSwitch> all;
  for (int r = 0; r < 16; ++r) {
    int64_t ts = 0;
    for (int i = 0; i < 200; ++i) {
      ts += rng() % 5;
      runs[r].push_back(At(ts, r, i));
    }
    all.insert(all.end(), runs[r].begin(), runs[r].end());
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const SchedSwitch& x, const SchedSwitch& y) { return x.ts_ns < y.ts_ns; });
  std::vector<std::span<const SchedSwitch>> spans(runs.begin(), runs.end());
  std::vector<SchedSwitch> out;
  MergeSortedRuns(spans, [&](const SchedSwitch& ev) { out.push_back(ev); });
  EXPECT_EQ(out, all);
}

TEST(SchedSwitchMerger, EmitsUpToTheWatermarkAndKeepsTheRest) {
  SchedSwitchMerger merger(2);
  std::vector<SchedSwitch> cpu0 = {At(10, 0), At(30, 0)};
  std::vector<SchedSwitch> cpu1 = {At(20, 1)};
  merger.Append(0, cpu0);
  merger.Append(1, cpu1);
  std::vector<int64_t> ts;
  auto sink = [&](const SchedSwitch& ev) { ts.push_back(ev.ts_ns); };
  EXPECT_EQ(merger.EmitUntil(25, sink), 2);
  EXPECT_EQ(merger.buffered(), 1u);
  // cpu1's next page: one event older than what was emitted is re-stamped.
  std::vector<SchedSwitch> late = {At(15, 1), At(28, 1)};
  merger.Append(1, late);
  EXPECT_EQ(merger.restamped(), 1);
  EXPECT_EQ(merger.EmitAll(sink), 3);
  EXPECT_EQ(ts, (std::vector<int64_t>{10, 20, 20, 28, 30}));
  EXPECT_EQ(merger.buffered(), 0u);
}

TEST(SchedSwitchMerger, ByCoreOrdersEachCoreOnly) {
  // CPUs 0, 2 and 1, 3 share cores.
  auto topology = *CpuTopology::FromSiblingLists({{0, 2}, {1, 3}, {0, 2}, {1, 3}});
  SchedSwitchMerger merger(topology);
  std::vector<SchedSwitch> cpu0 = {At(10, 0), At(40, 0)}, cpu1 = {At(5, 1)},
                           cpu2 = {At(20, 2)}, cpu3 = {At(30, 3)};
  merger.Append(0, cpu0);
  merger.Append(1, cpu1);
  merger.Append(2, cpu2);
  merger.Append(3, cpu3);
  std::vector<SchedSwitch> out;
  EXPECT_EQ(merger.EmitAll([&](const SchedSwitch& ev) { out.push_back(ev); }), 5);
  EXPECT_EQ(out, (std::vector<SchedSwitch>{At(10, 0), At(20, 2), At(40, 0), At(5, 1), At(30, 3)}));
}

}  // namespace
}  // namespace cosched::telemetry
