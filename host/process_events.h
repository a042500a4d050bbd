// Process and thread events from the kernel, so the agent tags a new thread
// or VM as soon as it appears rather than at the next periodic scan.
#ifndef COSCHED_HOST_PROCESS_EVENTS_H_
#define COSCHED_HOST_PROCESS_EVENTS_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"

namespace cosched::host {

enum class ProcessEventKind {
  kFork,  // a process or thread was created
  kExec,
  kExit,
  // A task took a new name with PR_SET_NAME or /proc/<pid>/comm (not by
  // exec, and not kthread_create naming a kernel thread: a vhost kernel
  // thread is recognised by its fork from kthreadd, see
  // discovery/exec_classifier.h).
  kComm,
  kLost,  // events were dropped (buffer overrun): rescan everything
};

struct ProcessEvent {
  ProcessEventKind kind = ProcessEventKind::kLost;
  // The thread group the event is about (the new one for a fork).
  int tgid = 0;
  // The thread: the new one for a fork, the exiting one for an exit.
  int tid = 0;
  // For forks: the thread group that created it (equal to tgid for a new
  // thread).
  int parent_tgid = 0;
  // For execs: false when the source found that the new program is not
  // QEMU by discovery's own rule (argv[0], see ProcfsDiscovery), so that
  // the thousands of execs a second of monitoring agents and cron jobs on a
  // busy hypervisor need no pass. True when it may be (or the source cannot
  // tell).
  bool may_be_qemu = true;
  // For comm events: the new name; for a fork by kthreadd (a kernel
  // thread), its name shortly after (see discovery/exec_classifier.h). At most
  // 15 characters, so no allocation.
  std::string comm;
};

using ProcessEventListener = std::function<void(const ProcessEvent&)>;

// Implementations are thread-safe; the listener runs on their thread.
class ProcessEventSource {
 public:
  virtual ~ProcessEventSource() = default;
  virtual absl::Status Start(ProcessEventListener listener) = 0;
  virtual void Stop() = 0;
};

// Calls `listener` for each fork, exec, exit and comm event in one datagram of
// the netlink proc connector; other events are skipped. Pure: tested on
// bytes built in the test.
void ParseProcConnectorDatagram(const char* data, size_t length,
                                const ProcessEventListener& listener);

// Whether the link /proc/<pid>/ns/pid ("pid:[4026531836]") names the
// initial PID namespace, whose inode is fixed (PROC_PID_INIT_INO). The
// kernel sends proc connector events only to listeners there and ignores a
// subscription from any other, silently. (NSpid in /proc/self/status cannot
// tell: a namespace with its own /proc mount shows one pid there too.)
// nullopt when the text is not such a link.
std::optional<bool> InInitialPidNamespace(std::string_view ns_link);

// What the connector's thread does with events before its listener sees
// them: discovery's DelayedExecClassifier holds and classifies execs. Add
// and Flush run on that thread only.
class ProcessEventStage {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~ProcessEventStage() = default;
  // An event from the kernel, which happened about `now`.
  virtual void Add(const ProcessEvent& event, Clock::time_point now) = 0;
  // Passes on what is due at `now`; returns when the next held event is.
  virtual std::optional<Clock::time_point> Flush(Clock::time_point now) = 0;
};
// Makes the stage that feeds `listener`.
using ProcessEventStageFactory =
    std::function<std::unique_ptr<ProcessEventStage>(ProcessEventListener listener)>;

// The netlink proc connector (needs CAP_NET_ADMIN and a kernel with
// CONFIG_PROC_EVENTS). Start fails with a clear status when it is missing;
// the agent then relies on its periodic scan. Events reach the listener
// through the stage that `make_stage` makes (none: as they come).
//
// An event after a quiet spell is handled at once; after that the thread
// takes what has queued at most every kBatchInterval, many datagrams a
// call, so that a storm of tens of thousands of events a second costs a few
// hundred wake-ups instead of one (with a poll and two receives) per event.
// A VM's new thread is thus heard of at most kBatchInterval late.
class ProcConnectorEvents : public ProcessEventSource {
 public:
  static constexpr std::chrono::milliseconds kBatchInterval{5};

  explicit ProcConnectorEvents(ProcessEventStageFactory make_stage = nullptr);
  ~ProcConnectorEvents() override;
  absl::Status Start(ProcessEventListener listener) override;
  void Stop() override;

 private:
  void Run(ProcessEventListener listener);

  const ProcessEventStageFactory make_stage_;
  int socket_ = -1;
  int wake_ = -1;  // eventfd that interrupts the receive loop on Stop
  std::thread thread_;
};

}  // namespace cosched::host

#endif  // COSCHED_HOST_PROCESS_EVENTS_H_
