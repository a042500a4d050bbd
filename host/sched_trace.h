// The kernel side of the sibling-sharing collector: a sched_switch trace
// whose per-CPU ring buffers are read page by page, and the schedstats
// switch that makes the kernel count forced idle. The real implementation
// is over tracefs; sched_trace_fake.h serves pages a test builds.
#ifndef COSCHED_HOST_SCHED_TRACE_H_
#define COSCHED_HOST_SCHED_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cosched::host {

struct SchedTraceOptions {
  // Per-CPU ring buffer of the agent's own trace. It must hold what a CPU
  // writes between two reads (SiblingShareCollectorOptions: 500 ms, 100 ms
  // while a buffer is a quarter full): 1 MiB is ~15 k sched_switch records
  // (68 bytes each), so a CPU may switch ~150 k times/s before events are
  // lost, against ~1.6 k/s per CPU on a full KVM node (155 k/s over 96
  // CPUs). Losses show in StatsWindow.lost_events.
  int buffer_size_kb = 1024;
  // The ring buffer's sub-buffer (what one read of trace_pipe_raw returns
  // at most), on kernels that can size it (6.8+, buffer_subbuf_size_kb);
  // 0 keeps the kernel's (one page). Ignored, with a log line, elsewhere
  // and where the kernel refuses the size.
  // 16 KiB: a quarter of the reads of 4 KiB pages for the same events,
  // and each read's cost is mostly per call, not per byte
  // (tests/bench/collector_cpu_bench.cc, docs/telemetry.md, "Sibling-sharing collector").
  int subbuf_size_kb = 16;
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

}  // namespace cosched::host

#endif  // COSCHED_HOST_SCHED_TRACE_H_
