// Process and thread events from the kernel, so the agent tags a new thread
// or VM as soon as it appears rather than at the next periodic scan.
#ifndef COSCHED_AGENT_PROCESS_EVENTS_H_
#define COSCHED_AGENT_PROCESS_EVENTS_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "discovery/proc_fs.h"

namespace cosched::agent {

enum class ProcessEventKind {
  kFork,  // a process or thread was created
  kExec,
  kExit,
  // A task took a new name with PR_SET_NAME or /proc/<pid>/comm (not by
  // exec, and not kthread_create naming a kernel thread: a vhost kernel
  // thread is recognised by its fork from kthreadd, see
  // DelayedExecClassifier).
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
  // thread), its name shortly after (see DelayedExecClassifier). At most
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

// Sets `event.may_be_qemu` for an exec from the new program's command line
// in `proc_fs` (one read of <tgid>/cmdline); other events are left as they
// are. A process already gone is not QEMU (nothing is left to tag); one
// that cannot be read for another reason may be.
void ClassifyExec(const discovery::ProcFs& proc_fs, ProcessEvent& event);

// Whether the link /proc/<pid>/ns/pid ("pid:[4026531836]") names the
// initial PID namespace, whose inode is fixed (PROC_PID_INIT_INO). The
// kernel sends proc connector events only to listeners there and ignores a
// subscription from any other, silently. (NSpid in /proc/self/status cannot
// tell: a namespace with its own /proc mount shows one pid there too.)
// nullopt when the text is not such a link.
std::optional<bool> InInitialPidNamespace(std::string_view ns_link);

// Passes events on in the kernel's order, except execs and forks of kernel
// threads (by kthreadd): a fork is held until the thread has its name
// (event.comm), read every `delay` for a while. Each exec is held for
// `delay` and then classified (ClassifyExec), or dropped when its process
// exits first. Most execs of a storm are short commands (`true`, `grep`,
// health checks) that are gone within milliseconds, and a dropped exec
// costs no read of /proc at all (a read is some 5-10 us of a syscall-heavy
// open, read and close). Nothing is lost: a process that exited has no
// thread left to tag, and its exit is passed on. Not thread-safe: it
// belongs to the one thread of a source.
class DelayedExecClassifier {
 public:
  using Clock = std::chrono::steady_clock;

  DelayedExecClassifier(std::shared_ptr<const discovery::ProcFs> proc_fs,
                        std::chrono::milliseconds delay, ProcessEventListener listener);
  DelayedExecClassifier(const DelayedExecClassifier&) = delete;
  DelayedExecClassifier& operator=(const DelayedExecClassifier&) = delete;

  // An event from the kernel, which happened about `now`.
  void Add(const ProcessEvent& event, Clock::time_point now);
  // Classifies and passes on the execs held since `delay` before `now`.
  // Returns when the next one is due, if one is held.
  std::optional<Clock::time_point> Flush(Clock::time_point now);

  // Execs classified (a /proc read each) and dropped unread, for the
  // benchmark and tests.
  long classified() const { return classified_; }
  long dropped() const { return dropped_; }

 private:
  struct Held {
    ProcessEvent event;
    Clock::time_point due;
    bool exited = false;
    int name_tries = 0;  // a kernel thread's fork: reads of its comm
  };

  const std::shared_ptr<const discovery::ProcFs> proc_fs_;
  const std::chrono::milliseconds delay_;
  const ProcessEventListener listener_;
  // In arrival order, so also in order of due time; a handful at a time
  // (rate x delay: 25 at 5 000 execs/s and 5 ms).
  std::deque<Held> held_;
  // The last exec held for each pid (a deque keeps its elements in place
  // as it grows and shrinks at its ends).
  absl::flat_hash_map<int, Held*> last_held_;
  long classified_ = 0;
  long dropped_ = 0;
};

// The netlink proc connector (needs CAP_NET_ADMIN and a kernel with
// CONFIG_PROC_EVENTS). Start fails with a clear status when it is missing;
// the agent then relies on its periodic scan. Execs reach the listener
// through a DelayedExecClassifier on `proc_fs` (the procfs the PIDs of the
// events are in), `exec_delay` after the kernel sent them.
//
// An event after a quiet spell is handled at once; after that the thread
// takes what has queued at most every kBatchInterval, many datagrams a
// call, so that a storm of tens of thousands of events a second costs a few
// hundred wake-ups instead of one (with a poll and two receives) per event.
// A VM's new thread is thus heard of at most kBatchInterval late.
class ProcConnectorEvents : public ProcessEventSource {
 public:
  static constexpr std::chrono::milliseconds kExecDelay{5};
  static constexpr std::chrono::milliseconds kBatchInterval{5};

  explicit ProcConnectorEvents(std::shared_ptr<const discovery::ProcFs> proc_fs =
                                   std::make_shared<discovery::RealProcFs>(),
                               std::chrono::milliseconds exec_delay = kExecDelay);
  ~ProcConnectorEvents() override;
  absl::Status Start(ProcessEventListener listener) override;
  void Stop() override;

 private:
  void Run(ProcessEventListener listener);

  const std::shared_ptr<const discovery::ProcFs> proc_fs_;
  const std::chrono::milliseconds exec_delay_;
  int socket_ = -1;
  int wake_ = -1;  // eventfd that interrupts the receive loop on Stop
  std::thread thread_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_PROCESS_EVENTS_H_
