// Merging per-CPU event streams by timestamp. The kernel keeps one buffer
// per CPU, each in time order; SiblingShareCalculator needs the events of
// sibling CPUs in one time order (see its contract).
#ifndef COSCHED_TELEMETRY_EVENT_MERGE_H_
#define COSCHED_TELEMETRY_EVENT_MERGE_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "telemetry/sched_switch.h"
#include "telemetry/topology.h"

namespace cosched::telemetry {

namespace internal {

// A binary min-heap of (timestamp, stream): equal stamps come out in stream
// order, so merging is deterministic.
class StreamHeap {
 public:
  void Clear() { heap_.clear(); }
  bool empty() const { return heap_.empty(); }
  void Push(int64_t ts, uint32_t stream);
  std::pair<int64_t, uint32_t> Top() const { return heap_.front(); }
  void Pop();
  // Replaces the top with a new key for the same or another stream.
  void ReplaceTop(int64_t ts, uint32_t stream);

 private:
  void SiftDown(size_t i);
  std::vector<std::pair<int64_t, uint32_t>> heap_;
};

}  // namespace internal

// Calls sink(const SchedSwitch&) for every event of `runs` (each sorted by
// ts_ns), in timestamp order; ties in run order, then in order within a run.
template <typename Sink>
void MergeSortedRuns(std::span<const std::span<const SchedSwitch>> runs, Sink&& sink) {
  internal::StreamHeap heap;
  std::vector<size_t> next(runs.size(), 0);
  for (uint32_t r = 0; r < runs.size(); ++r)
    if (!runs[r].empty()) heap.Push(runs[r][0].ts_ns, r);
  while (!heap.empty()) {
    const uint32_t r = heap.Top().second;
    sink(static_cast<const SchedSwitch&>(runs[r][next[r]]));
    if (++next[r] < runs[r].size()) {
      heap.ReplaceTop(runs[r][next[r]].ts_ns, r);
    } else {
      heap.Pop();
    }
  }
}

// The live form: per-CPU streams appended as their buffers are read, and
// emitted in time order up to a watermark, the time up to which every
// stream is known to be complete (for the agent: the oldest "read up to"
// time of all CPU buffers of a pass). Memory: the events appended and not
// yet emitted. Not thread-safe.
//
// Streams are merged within partitions only. SiblingShareCalculator needs
// time order among the CPUs of one core, not across cores, so partitioning
// by core (the CpuTopology constructor) turns a 96-way merge into 2-way
// ones: several times cheaper per event.
class SchedSwitchMerger {
 public:
  // One partition: a single time order over all `streams`.
  explicit SchedSwitchMerger(int streams);
  // Stream = CPU; one partition per core. Emits core after core.
  explicit SchedSwitchMerger(const CpuTopology& topology);

  // Appends events of `stream` (e.g. a CPU), in time order. An event older
  // than the stream's last one, or than what its partition already
  // emitted, is re-stamped to that time and counted in restamped().
  void Append(int stream, std::span<const SchedSwitch> events);
  // One event, as Append: for a reader that parses straight into the
  // merger rather than through a batch of its own (one copy less per event).
  void Add(int stream, SchedSwitch event) {
    Stream& st = streams_[stream];
    int64_t floor = partitions_[st.partition].emitted_ns;
    if (!st.events.empty()) floor = std::max(floor, st.events.back().ts_ns);
    if (event.ts_ns < floor) {
      event.ts_ns = floor;
      ++restamped_;
    }
    st.events.push_back(event);
  }

  // Emits, in timestamp order within each partition, every buffered event
  // with ts_ns <= until_ns, and returns how many.
  template <typename Sink>
  int64_t EmitUntil(int64_t until_ns, Sink&& sink) {
    int64_t emitted = 0;
    for (Partition& part : partitions_) {
      if (part.streams.size() == 1) {
        Stream& st = streams_[part.streams[0]];
        while (st.head < st.events.size() && st.events[st.head].ts_ns <= until_ns) {
          sink(static_cast<const SchedSwitch&>(st.events[st.head]));
          part.emitted_ns = st.events[st.head].ts_ns;
          ++st.head;
          ++emitted;
        }
        st.Compact();
        continue;
      }
      heap_.Clear();
      for (uint32_t s : part.streams) {
        const Stream& st = streams_[s];
        if (st.head < st.events.size()) heap_.Push(st.events[st.head].ts_ns, s);
      }
      while (!heap_.empty() && heap_.Top().first <= until_ns) {
        const uint32_t s = heap_.Top().second;
        Stream& st = streams_[s];
        sink(static_cast<const SchedSwitch&>(st.events[st.head]));
        part.emitted_ns = st.events[st.head].ts_ns;
        ++emitted;
        if (++st.head < st.events.size()) {
          heap_.ReplaceTop(st.events[st.head].ts_ns, s);
        } else {
          heap_.Pop();
        }
      }
      for (uint32_t s : part.streams) streams_[s].Compact();
    }
    return emitted;
  }

  // Emits everything buffered (end of input).
  template <typename Sink>
  int64_t EmitAll(Sink&& sink) {
    return EmitUntil(INT64_MAX, std::forward<Sink>(sink));
  }

  size_t buffered() const;
  int64_t restamped() const { return restamped_; }

 private:
  struct Stream {
    std::vector<SchedSwitch> events;
    size_t head = 0;
    uint32_t partition = 0;
    void Compact();
  };
  struct Partition {
    std::vector<uint32_t> streams;
    int64_t emitted_ns = INT64_MIN;
  };

  std::vector<Stream> streams_;
  std::vector<Partition> partitions_;
  internal::StreamHeap heap_;
  int64_t restamped_ = 0;
};

}  // namespace cosched::telemetry

#endif  // COSCHED_TELEMETRY_EVENT_MERGE_H_
