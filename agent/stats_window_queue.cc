#include "agent/stats_window_queue.h"

#include <algorithm>
#include <utility>

namespace cosched::agent {

StatsWindowQueue::StatsWindowQueue(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void StatsWindowQueue::Push(v1::StatsWindow window) {
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = window;
  if (windows_.size() == capacity_) {
    dropped_through_ = windows_.front().first;
    windows_.pop_front();
    ++dropped_;
  }
  windows_.emplace_back(next_sequence_++, std::move(window));
}

StatsBatch StatsWindowQueue::Peek(size_t max_bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  StatsBatch batch;
  batch.dropped_windows = dropped_;
  size_t bytes = 0;
  for (const auto& [sequence, window] : windows_) {
    bytes += window.ByteSizeLong();
    if (!batch.windows.empty() && bytes > max_bytes) break;
    if (batch.windows.empty()) batch.first_sequence = sequence;
    batch.windows.push_back(window);
    batch.last_sequence = sequence;
  }
  return batch;
}

void StatsWindowQueue::Acknowledge(const StatsBatch& batch) {
  std::lock_guard<std::mutex> lock(mu_);
  while (!windows_.empty() && windows_.front().first <= batch.last_sequence) windows_.pop_front();
  // Windows dropped after the peek are still to be reported as dropped,
  // unless the batch carried them to csd.
  int64_t delivered_after_drop = 0;
  if (!batch.windows.empty() && dropped_through_ >= batch.first_sequence)
    delivered_after_drop = static_cast<int64_t>(
        std::min(dropped_through_, batch.last_sequence) - batch.first_sequence + 1);
  dropped_ = std::max<int64_t>(0, dropped_ - batch.dropped_windows - delivered_after_drop);
}

std::optional<v1::StatsWindow> StatsWindowQueue::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

size_t StatsWindowQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return windows_.size();
}

int64_t StatsWindowQueue::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

}  // namespace cosched::agent
