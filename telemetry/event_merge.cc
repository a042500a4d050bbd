#include "telemetry/event_merge.h"

#include <algorithm>

namespace cosched::telemetry {
namespace internal {
namespace {

bool Less(const std::pair<int64_t, uint32_t>& a, const std::pair<int64_t, uint32_t>& b) {
  return a.first < b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

void StreamHeap::Push(int64_t ts, uint32_t stream) {
  heap_.emplace_back(ts, stream);
  size_t i = heap_.size() - 1;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!Less(heap_[i], heap_[parent])) break;
    std::swap(heap_[i], heap_[parent]);
    i = parent;
  }
}

void StreamHeap::Pop() {
  heap_.front() = heap_.back();
  heap_.pop_back();
  if (!heap_.empty()) SiftDown(0);
}

void StreamHeap::ReplaceTop(int64_t ts, uint32_t stream) {
  heap_.front() = {ts, stream};
  SiftDown(0);
}

void StreamHeap::SiftDown(size_t i) {
  const size_t n = heap_.size();
  while (true) {
    size_t smallest = i;
    size_t l = 2 * i + 1, r = l + 1;
    if (l < n && Less(heap_[l], heap_[smallest])) smallest = l;
    if (r < n && Less(heap_[r], heap_[smallest])) smallest = r;
    if (smallest == i) return;
    std::swap(heap_[i], heap_[smallest]);
    i = smallest;
  }
}

}  // namespace internal

void SchedSwitchMerger::Stream::Compact() {
  if (head == 0) return;
  if (head == events.size()) {
    events.clear();
  } else {
    events.erase(events.begin(), events.begin() + static_cast<std::ptrdiff_t>(head));
  }
  head = 0;
}

SchedSwitchMerger::SchedSwitchMerger(int streams) : streams_(streams), partitions_(1) {
  for (int s = 0; s < streams; ++s) partitions_[0].streams.push_back(s);
}

SchedSwitchMerger::SchedSwitchMerger(const CpuTopology& topology)
    : streams_(topology.num_cpus()), partitions_(topology.num_cores()) {
  for (int core = 0; core < topology.num_cores(); ++core)
    for (int cpu : topology.core_cpus(core)) {
      partitions_[core].streams.push_back(cpu);
      streams_[cpu].partition = core;
    }
}

void SchedSwitchMerger::Append(int stream, std::span<const SchedSwitch> events) {
  streams_.at(stream);  // the range check, once
  for (const SchedSwitch& ev : events) Add(stream, ev);
}

size_t SchedSwitchMerger::buffered() const {
  size_t n = 0;
  for (const Stream& st : streams_) n += st.events.size() - st.head;
  return n;
}

}  // namespace cosched::telemetry
