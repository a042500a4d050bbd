// The text form of a trace: lines of tracefs `trace` or `trace_pipe` with
// sched:sched_switch events, e.g.
//
//   <idle>-0     [001] d..2.  123.456789: sched_switch: prev_comm=swapper/1
//       prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=CPU 1/KVM
//       next_pid=73 next_prio=120                               (one line)
//
// Parsing is pure and allocates nothing: the parsed line points into the
// input. Task names may hold spaces and brackets; the tgid column of the
// record-tgid option ("(   73)") and the irq-info flags column are
// optional. Used by `csctl analyze` and by tests; the live collector reads
// the binary form (ring_buffer.h).
#ifndef COSCHED_TELEMETRY_TRACE_TEXT_H_
#define COSCHED_TELEMETRY_TRACE_TEXT_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "telemetry/sched_switch.h"

namespace cosched::telemetry {

enum class TraceLineKind {
  kSchedSwitch,
  // "CPU:3 [LOST 120 EVENTS]": the kernel dropped events of that CPU.
  kLostEvents,
  // Empty lines, comments ("# tracer: nop", "##### CPU 2 buffer started"),
  // other events, anything that does not claim to be a sched_switch.
  kOther,
  // A line with ": sched_switch: " that cannot be read.
  kMalformed,
};

struct TraceLine {
  TraceLineKind kind = TraceLineKind::kOther;
  // kSchedSwitch. Timestamps "SECONDS.FRACTION" (the local, global, mono
  // and boot clocks) become nanoseconds; an integer timestamp (the counter
  // and x86-tsc clocks) is taken as is.
  SchedSwitch event;
  SchedSwitchComms comms;
  // kSchedSwitch: the tgid column of the task that was running when the
  // event fired (prev_tid), or -1 when the trace has no such column or the
  // kernel did not know it ("(-------)").
  int32_t prev_tgid = -1;
  // kLostEvents.
  int32_t lost_cpu = -1;
  int64_t lost_events = 0;
};

// Parses one line (without its '\n'; a trailing '\r' is ignored) into
// `*out` and returns its kind (also stored in out->kind).
TraceLineKind ParseTraceLine(std::string_view line, TraceLine* out);

// What a reader saw so far.
struct TraceTextCounts {
  int64_t lines = 0;
  int64_t events = 0;
  int64_t malformed = 0;
  // Events the kernel reported as dropped (sum of the LOST notes).
  int64_t lost_events = 0;
  // 1-based number of the first malformed line, 0 when none.
  int64_t first_malformed_line = 0;
};

// Splits text into lines and parses them, in pieces of any size (a file
// read in blocks, a pipe). Not thread-safe. Memory: one partial line.
class TraceTextReader {
 public:
  // Calls on_line(const TraceLine&) for every kSchedSwitch and kLostEvents
  // line of `chunk`; a line cut by the end of the chunk is completed by the
  // next Feed or by Finish.
  template <typename OnLine>
  void Feed(std::string_view chunk, OnLine&& on_line) {
    if (!partial_.empty()) {
      const void* nl = std::memchr(chunk.data(), '\n', chunk.size());
      if (nl == nullptr) {
        partial_.append(chunk.data(), chunk.size());
        return;
      }
      size_t n = static_cast<const char*>(nl) - chunk.data();
      partial_.append(chunk.data(), n);
      Line(partial_, on_line);
      partial_.clear();
      chunk.remove_prefix(n + 1);
    }
    const char* p = chunk.data();
    const char* end = p + chunk.size();
    while (p < end) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
      if (nl == nullptr) {
        partial_.assign(p, end - p);
        return;
      }
      Line(std::string_view(p, nl - p), on_line);
      p = nl + 1;
    }
  }

  // The last line when the text does not end in '\n'.
  template <typename OnLine>
  void Finish(OnLine&& on_line) {
    if (partial_.empty()) return;
    Line(partial_, on_line);
    partial_.clear();
  }

  const TraceTextCounts& counts() const { return counts_; }

 private:
  template <typename OnLine>
  void Line(std::string_view text, OnLine& on_line) {
    ++counts_.lines;
    switch (ParseTraceLine(text, &line_)) {
      case TraceLineKind::kSchedSwitch:
        ++counts_.events;
        on_line(static_cast<const TraceLine&>(line_));
        break;
      case TraceLineKind::kLostEvents:
        counts_.lost_events += line_.lost_events;
        on_line(static_cast<const TraceLine&>(line_));
        break;
      case TraceLineKind::kMalformed:
        if (counts_.malformed++ == 0) counts_.first_malformed_line = counts_.lines;
        break;
      case TraceLineKind::kOther:
        break;
    }
  }

  TraceLine line_;
  std::string partial_;
  TraceTextCounts counts_;
};

}  // namespace cosched::telemetry

#endif  // COSCHED_TELEMETRY_TRACE_TEXT_H_
