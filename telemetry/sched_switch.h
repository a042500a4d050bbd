// One sched:sched_switch event, as the text and binary trace parsers produce
// it and as the sibling-share computation consumes it.
#ifndef COSCHED_TELEMETRY_SCHED_SWITCH_H_
#define COSCHED_TELEMETRY_SCHED_SWITCH_H_

#include <cstdint>
#include <string_view>

namespace cosched::telemetry {

// prev_state bits, as the kernel records them in the binary event
// (TASK_REPORT bits; 0 is runnable, "R") and as the text form spells them:
// "S" 0x1, "D" 0x2, "T" 0x4, "t" 0x8, "X" 0x10, "Z" 0x20, "P" 0x40, "I" 0x80,
// and a trailing "+" (preempted while runnable) 0x100. The text parser turns
// letters into the same bits, so both paths agree.
inline constexpr uint32_t kTaskStatePreempted = 0x100;

// On `cpu`, at `ts_ns` (trace clock), `prev_tid` stopped running and
// `next_tid` started. Tids are kernel task ids (thread ids); 0 is the CPU's
// idle task. 24 bytes, trivially copyable: cheap to buffer and merge.
struct SchedSwitch {
  int64_t ts_ns = 0;
  int32_t cpu = -1;
  int32_t prev_tid = -1;
  int32_t next_tid = -1;
  uint32_t prev_state = 0;

  friend bool operator==(const SchedSwitch&, const SchedSwitch&) = default;
};

// The task names of an event, when the input has them. The views point into
// the parser's input (a text line, a ring-buffer page): copy them before
// that buffer is reused.
struct SchedSwitchComms {
  std::string_view prev;
  std::string_view next;
};

}  // namespace cosched::telemetry

#endif  // COSCHED_TELEMETRY_SCHED_SWITCH_H_
