// The live sibling-sharing collector of cs-agent: reads sched_switch events
// from the kernel's per-CPU ring buffers (SchedTrace), merges them per core
// up to a watermark, and runs them through the computation `csctl analyze`
// uses offline (telemetry/SiblingShareCalculator). Every window it turns
// what was accumulated into a v1::StatsWindow, per VM and per core, with the
// VMs' forced idle, and queues it for the next Report.
//
// Groups: the calculator's groups are VMs (stats are per VM) and their
// sharing keys are trust groups, so "same" means the sibling ran a VM of
// the same trust group (docs/architecture.md). A VM without a cookie group
// (level none, fail-open) shares with no other VM. Threads of no VM are the
// host's; the host is not reported.
#ifndef COSCHED_AGENT_SIBLING_SHARE_COLLECTOR_H_
#define COSCHED_AGENT_SIBLING_SHARE_COLLECTOR_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/forced_idle.h"
#include "host/pseudo_fs.h"
#include "host/sched_trace.h"
#include "agent/stats_window_queue.h"
#include "cosched/v1/types.pb.h"
#include "telemetry/event_merge.h"
#include "telemetry/ring_buffer.h"
#include "telemetry/sibling_share_calculator.h"

namespace cosched::agent {

// One VM as the collector sees it.
struct CollectedVm {
  std::string vm_id;
  // Its cookie group (a trust group); empty: no cookie, a group of its own.
  std::string trust_group;
  // Its threads that carry the group's cookie.
  std::vector<int> tids;
  // Its own cgroup (DiscoveredVm::cgroup), empty: none. Forced idle comes
  // from the cgroup when the kernel counts it there.
  std::string cgroup;
};

// The VMs of the host now (from the last reconcile pass). An error keeps
// the previous list.
using CollectedVmSource = std::function<absl::StatusOr<std::vector<CollectedVm>>()>;

struct SiblingShareCollectorOptions {
  // How often the ring buffers are drained. Each poll reads every CPU's
  // buffer, at least once even when it is empty, and wakes a thread whose
  // caches went cold meanwhile: on a host of many CPUs that is a cost per
  // poll and CPU on top of the cost per event. 500 ms (was 100) and 16 KiB
  // sub-buffers took the collector from 0.75-1.18% to 0.63-0.83% of a core
  // at 155 k switches/s on the build machine's kernel, and from 3.1% to
  // 1.2-1.6% priced at a 96-CPU node's density per CPU
  // (tests/bench/collector_cpu_bench.cc; docs/telemetry.md, "Sibling-sharing
  // collector"). The windows (10 s) do not depend on it.
  std::chrono::milliseconds poll_interval{500};
  // After a poll that found some CPU's buffer at least a quarter full, the
  // next comes this soon instead, so that a CPU switching far more often
  // than a node's average (~30 k/s fills 1 MiB in 500 ms) loses nothing:
  // at 100 ms the buffer holds five times what it had to.
  std::chrono::milliseconds busy_poll_interval{100};
  // The length of a StatsWindow (the agent uses its report interval).
  std::chrono::milliseconds window{std::chrono::seconds(10)};
  // How often the VM list is asked for at least. A thread new to a VM
  // counts as a host task until then.
  std::chrono::milliseconds vm_refresh_interval{std::chrono::seconds(1)};
  // When set, checked at every poll: the VM list is asked for as soon as
  // this changes (the agent gives its reconcile pass count), so that a new
  // thread is the VM's from the pass that found it (milliseconds after its
  // fork event), not a second later. Events are read after the refresh, so
  // those of the thread's first moments already count for its VM.
  std::function<int64_t()> vms_version;
  // Events are processed up to this long before the read started: an event
  // stamped just before it may still be being written on another CPU.
  std::chrono::milliseconds settle{2};
  // Events are counted this much later again, so that the reconcile pass
  // a new thread's fork event triggers has put the thread in the VM list
  // (see vms_version) before its first events are counted. The agent uses
  // one poll interval; windows close that much later.
  std::chrono::milliseconds lag{0};
  host::SchedTraceOptions trace;
  // Turn the kernel's schedstats on at Open (for forced idle).
  bool enable_schedstats = false;
  std::string procfs_root = "/proc";
  // Where cgroup v2 is mounted (forced idle per VM cgroup).
  std::string cgroupfs_root = "/sys/fs/cgroup";
  // Called on the collector's thread with each window before it is queued
  // (e.g. for Prometheus metrics). Must be quick.
  std::function<void(const v1::StatsWindow&)> on_window;
};

// Start/Stop/Open/Poll are called from one thread (Poll by the collector's
// own thread after Start); the queue it fills is thread-safe.
class SiblingShareCollector {
 public:
  // `trace`, `fs` and `queue` must outlive the collector. `topology` is the
  // host's (host/topology.h): CoreShare.core indexes its cores.
  SiblingShareCollector(SiblingShareCollectorOptions options, v1::Topology topology,
                        host::SchedTrace* trace, const host::PseudoFs* fs, CollectedVmSource vms,
                        StatsWindowQueue* queue);
  ~SiblingShareCollector();

  SiblingShareCollector(const SiblingShareCollector&) = delete;
  SiblingShareCollector& operator=(const SiblingShareCollector&) = delete;

  // Open, then a thread that polls every poll_interval. The error is
  // Open's.
  absl::Status Start();
  // Joins the thread and stops the trace. Idempotent.
  void Stop();

  // Starts the trace and reads its formats: the SchedTrace's errors, or
  // INVALID_ARGUMENT when the kernel's format texts cannot be used. The
  // first window starts now.
  absl::Status Open();
  // Reads every CPU's buffer, accounts events up to the watermark, and
  // closes a window into the queue when one is due. Returns the number of
  // events read.
  int64_t Poll();
  // Closes the window at the last watermark, due or not.
  void CloseWindow();

  // How long the thread waits after the last Poll: busy_poll_interval when
  // it found a CPU's buffer a quarter full, else poll_interval.
  std::chrono::milliseconds next_poll_delay() const {
    return busy_ ? std::min(options_.busy_poll_interval, options_.poll_interval)
                 : options_.poll_interval;
  }

  // Events read, and ring-buffer pages the kernel had dropped events
  // before, since Open.
  int64_t events_read() const { return events_read_; }
  int64_t pages_after_loss() const;

 private:
  void Run();
  void RefreshVms(bool force);
  // Turns the calculator's window into a StatsWindow and queues it.
  void FinishWindow(const telemetry::SiblingShareWindow& window);
  telemetry::GroupId GroupFor(const std::string& vm_id);

  const SiblingShareCollectorOptions options_;
  const v1::Topology topology_;
  host::SchedTrace* const trace_;
  const host::PseudoFs* const fs_;
  const CollectedVmSource vms_source_;
  StatsWindowQueue* const queue_;
  ForcedIdleMeter forced_idle_;

  // Valid after Open.
  host::SchedTraceFormat format_;
  std::unique_ptr<telemetry::RingBufferPageReader> reader_;
  std::unique_ptr<telemetry::SchedSwitchMerger> merger_;
  std::unique_ptr<telemetry::SiblingShareCalculator> calculator_;
  // telemetry core -> index in topology_.cores, -1 for CPUs not in it.
  std::vector<int> core_index_;
  std::vector<uint8_t> page_;

  // The VMs: calculator group ids are stable while a VM lives, and reused
  // only after the window in which it left.
  std::vector<CollectedVm> vms_;
  absl::flat_hash_map<std::string, telemetry::GroupId> vm_groups_;
  std::vector<std::string> group_vm_;  // group id -> vm id ("" for free)
  std::vector<telemetry::GroupId> free_groups_;
  std::vector<telemetry::GroupId> leaving_groups_;
  absl::flat_hash_map<int32_t, telemetry::GroupId> tid_group_;
  std::chrono::steady_clock::time_point next_refresh_;
  int64_t vms_version_ = -1;

  int64_t watermark_ns_ = 0;
  // The Unix time the last window ended (0 before the first).
  int64_t last_end_unix_ns_ = 0;
  int64_t window_start_ns_ = 0;
  int64_t events_read_ = 0;
  bool busy_ = false;  // see next_poll_delay()
  int64_t lost_pages_reported_ = 0;
  bool opened_ = false;
  // Whether a VM list has been had yet (the agent's first reconcile pass).
  bool vms_known_ = false;

  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_SIBLING_SHARE_COLLECTOR_H_
