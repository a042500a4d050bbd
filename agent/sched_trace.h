// The kernel side of the sibling-sharing collector: a sched_switch trace
// whose per-CPU ring buffers are read page by page, and the schedstats
// switch that makes the kernel count forced idle. The real implementation
// is over tracefs; sched_trace_fake.h serves pages a test builds.
#ifndef COSCHED_AGENT_SCHED_TRACE_H_
#define COSCHED_AGENT_SCHED_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cosched::agent {

struct SchedTraceOptions {
  // Per-CPU ring buffer of the agent's own trace. At 155 k switches/s over
  // a host (a few thousand per CPU per second, 64-byte records) 1 MiB holds
  // several seconds, far above the 100 ms between reads.
  int buffer_size_kb = 1024;
};

// What a started trace publishes about itself, read from the kernel.
struct SchedTraceFormat {
  // events/sched/sched_switch/format and events/header_page, verbatim.
  std::string sched_switch_format;
  std::string header_page;
  // Bytes of one ring-buffer page (sub-buffer) as trace_pipe_raw returns it.
  size_t page_size = 4096;
  // Buffers are per_cpu/cpu0 .. cpu<num_cpus - 1>.
  int num_cpus = 0;
};

// One sched_switch trace of the whole host, private to its owner. Not
// thread-safe: one reader thread.
class SchedTrace {
 public:
  virtual ~SchedTrace() = default;

  // Sets the trace up and starts it. NOT_FOUND when the kernel has no
  // tracefs (or no sched_switch event), PERMISSION_DENIED without the right
  // to use it, FAILED_PRECONDITION when already started, else the I/O error,
  // each naming the file.
  virtual absl::StatusOr<SchedTraceFormat> Start(const SchedTraceOptions& options) = 0;

  // Reads the oldest unread page of `cpu`'s buffer into `page` (at least
  // page_size bytes). Returns the bytes read; 0 when the buffer has nothing
  // more now. A page may be partly filled: what the kernel has committed.
  virtual absl::StatusOr<size_t> ReadPage(int cpu, std::span<uint8_t> page) = 0;

  // The trace clock now, in ns: every event stamped up to here has been
  // written to its buffer by the time ReadPage is called afterwards, give or
  // take an event being written at this instant.
  virtual int64_t NowNs() const = 0;
  // The wall clock (Unix ns) minus the trace clock, now.
  virtual int64_t UnixOffsetNs() const = 0;

  // Stops the trace and removes what Start set up. Idempotent.
  virtual void Stop() = 0;

  // Turns the kernel's schedstats on (kernel.sched_schedstats = 1), which
  // forced-idle counting needs. NOT_FOUND when the kernel has no
  // schedstats, PERMISSION_DENIED without the right.
  virtual absl::Status EnableSchedstats() = 0;
};

// The kernel's tracefs: its own instance `instance_name` under
// `tracefs_root` (normally /sys/kernel/tracing), so that a user's trace of
// the global buffer is never disturbed, with only sched:sched_switch on and
// the `mono` clock. When tracefs_root is not mounted it is mounted there
// (as perf and trace-cmd do); /sys/kernel/debug/tracing is tried next.
// Stop removes the instance.
std::unique_ptr<SchedTrace> MakeTracefsSchedTrace(std::string tracefs_root = "/sys/kernel/tracing",
                                                  std::string instance_name = "cs-agent",
                                                  std::string procfs_root = "/proc");

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_SCHED_TRACE_H_
