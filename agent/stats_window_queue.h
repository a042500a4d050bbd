// The sibling-sharing windows waiting to reach csd. Bounded: when csd is
// away for longer than the queue holds, the oldest windows are dropped and
// counted, so the agent's memory does not grow however long it waits.
#ifndef COSCHED_AGENT_STATS_WINDOW_QUEUE_H_
#define COSCHED_AGENT_STATS_WINDOW_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "cosched/v1/agent.pb.h"

namespace cosched::agent {

// What one report carries, and what Acknowledge needs to know once csd
// accepted it.
struct StatsBatch {
  std::vector<v1::StatsWindow> windows;  // oldest first
  int64_t dropped_windows = 0;
  // The sequence numbers of the first and last window in `windows` (0:
  // none).
  uint64_t first_sequence = 0;
  uint64_t last_sequence = 0;
};

// Thread-safe: the collector pushes, the report thread peeks and
// acknowledges.
class StatsWindowQueue {
 public:
  // ReportRequest.stats holds at most this many (agent.proto).
  static constexpr size_t kMaxWindows = 120;

  explicit StatsWindowQueue(size_t capacity = kMaxWindows);

  // Appends `window`, dropping the oldest when full.
  void Push(v1::StatsWindow window);
  // What one Report carries of windows at most, in serialized bytes: a
  // host of thousands of VMs makes windows of tens of KiB, and 120 of them
  // would pass gRPC's 4 MiB message limit. The rest go with later Reports.
  static constexpr size_t kMaxBatchBytes = size_t{1} << 20;

  // The pending windows, oldest first, as many as fit in `max_bytes` (at
  // least one), and the count dropped since the last acknowledged batch.
  // The windows stay queued until Acknowledge.
  StatsBatch Peek(size_t max_bytes = kMaxBatchBytes) const;
  // csd accepted `batch`: its windows leave the queue (those still in it),
  // and its dropped count is settled.
  void Acknowledge(const StatsBatch& batch);

  // The newest window pushed, acknowledged or not.
  std::optional<v1::StatsWindow> latest() const;
  size_t size() const;
  // Dropped and not yet reported.
  int64_t dropped() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<std::pair<uint64_t, v1::StatsWindow>> windows_;
  uint64_t next_sequence_ = 1;
  int64_t dropped_ = 0;
  // The sequence number of the newest window dropped (the oldest go first).
  uint64_t dropped_through_ = 0;
  std::optional<v1::StatsWindow> latest_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_STATS_WINDOW_QUEUE_H_
