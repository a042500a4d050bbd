#include "agent/stats_window_queue.h"

#include <gtest/gtest.h>

namespace cosched::agent {
namespace {

v1::StatsWindow Window(int64_t start) {
  v1::StatsWindow w;
  w.set_start_unix_ns(start);
  w.set_end_unix_ns(start + 1);
  return w;
}

std::vector<int64_t> Starts(const StatsBatch& batch) {
  std::vector<int64_t> out;
  for (const auto& w : batch.windows) out.push_back(w.start_unix_ns());
  return out;
}

TEST(StatsWindowQueue, WindowsStayUntilAcknowledged) {
  StatsWindowQueue queue;
  EXPECT_FALSE(queue.latest().has_value());
  queue.Push(Window(1));
  queue.Push(Window(2));
  StatsBatch failed = queue.Peek();
  EXPECT_EQ(Starts(failed), (std::vector<int64_t>{1, 2}));
  // A report that failed is not acknowledged: the next carries the same.
  queue.Push(Window(3));
  StatsBatch batch = queue.Peek();
  EXPECT_EQ(Starts(batch), (std::vector<int64_t>{1, 2, 3}));
  queue.Push(Window(4));  // while the report is in flight
  queue.Acknowledge(batch);
  EXPECT_EQ(Starts(queue.Peek()), (std::vector<int64_t>{4}));
  EXPECT_EQ(queue.latest()->start_unix_ns(), 4);
  EXPECT_EQ(queue.Peek().dropped_windows, 0);
}

TEST(StatsWindowQueue, ABatchStaysWithinItsByteBudgetAndTheRestFollows) {
  StatsWindowQueue queue;
  // Windows of a host with many VMs.
  for (int64_t start = 1; start <= 5; ++start) {
    v1::StatsWindow w = Window(start);
    for (int vm = 0; vm < 5000; ++vm) w.add_vms()->set_vm_id("vm-" + std::to_string(vm));
    queue.Push(std::move(w));
  }
  const size_t one = queue.latest()->ByteSizeLong();
  StatsBatch first = queue.Peek(2 * one + one / 2);
  EXPECT_EQ(Starts(first), (std::vector<int64_t>{1, 2}));
  queue.Acknowledge(first);
  EXPECT_EQ(Starts(queue.Peek(2 * one + one / 2)), (std::vector<int64_t>{3, 4}));
  // A window bigger than the budget still goes, alone.
  EXPECT_EQ(Starts(queue.Peek(1)), (std::vector<int64_t>{3}));
  EXPECT_GT(StatsWindowQueue::kMaxWindows * one, size_t{4} << 20)
      << "120 such windows would pass gRPC's default 4 MiB limit";
  EXPECT_LE(queue.Peek().windows.size() * one, StatsWindowQueue::kMaxBatchBytes);
}

TEST(StatsWindowQueue, DropsTheOldestAndReportsHowManyOnce) {
  StatsWindowQueue queue(2);
  for (int i = 1; i <= 5; ++i) queue.Push(Window(i));
  EXPECT_EQ(queue.size(), 2u);
  StatsBatch batch = queue.Peek();
  EXPECT_EQ(Starts(batch), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(batch.dropped_windows, 3);
  queue.Acknowledge(batch);
  EXPECT_EQ(queue.dropped(), 0);
  EXPECT_EQ(queue.size(), 0u);
}

TEST(StatsWindowQueue, AWindowDroppedAfterItWasSentIsNotCountedLost) {
  StatsWindowQueue queue(2);
  queue.Push(Window(1));
  queue.Push(Window(2));
  StatsBatch batch = queue.Peek();  // carries 1 and 2
  queue.Push(Window(3));            // drops 1, which the batch carries
  queue.Push(Window(4));            // drops 2, likewise
  queue.Push(Window(5));            // drops 3: lost
  queue.Acknowledge(batch);
  StatsBatch next = queue.Peek();
  EXPECT_EQ(Starts(next), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(next.dropped_windows, 1);
}

}  // namespace
}  // namespace cosched::agent
