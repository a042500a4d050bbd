// Which process events may concern a VM, told before the agent hears of
// them: the exec storms of a busy hypervisor must not cost a scan each.
#ifndef COSCHED_DISCOVERY_EXEC_CLASSIFIER_H_
#define COSCHED_DISCOVERY_EXEC_CLASSIFIER_H_

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "host/process_events.h"
#include "host/pseudo_fs.h"

namespace cosched::discovery {

// Sets `event.may_be_qemu` for an exec from the new program's command line
// (one read of <procfs_root>/<tgid>/cmdline); other events are left as they
// are. A process already gone is not QEMU (nothing is left to tag); one
// that cannot be read for another reason may be.
void ClassifyExec(const host::PseudoFs& fs, absl::string_view procfs_root,
                  host::ProcessEvent& event);

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
class DelayedExecClassifier : public host::ProcessEventStage {
 public:
  // A storm's short commands are gone well within it; a QEMU lives on.
  static constexpr std::chrono::milliseconds kDefaultDelay{5};

  // `fs` holds the procfs at `procfs_root` that the events' pids are in.
  DelayedExecClassifier(std::shared_ptr<const host::PseudoFs> fs, std::string procfs_root,
                        std::chrono::milliseconds delay, host::ProcessEventListener listener);
  DelayedExecClassifier(const DelayedExecClassifier&) = delete;
  DelayedExecClassifier& operator=(const DelayedExecClassifier&) = delete;

  void Add(const host::ProcessEvent& event, Clock::time_point now) override;
  // Classifies and passes on the execs held since `delay` before `now`.
  // Returns when the next one is due, if one is held.
  std::optional<Clock::time_point> Flush(Clock::time_point now) override;

  // Execs classified (a /proc read each) and dropped unread, for the
  // benchmark and tests.
  long classified() const { return classified_; }
  long dropped() const { return dropped_; }

 private:
  struct Held {
    host::ProcessEvent event;
    Clock::time_point due;
    bool exited = false;
    int name_tries = 0;  // a kernel thread's fork: reads of its comm
  };

  const std::shared_ptr<const host::PseudoFs> fs_;
  const std::string procfs_root_;
  const std::chrono::milliseconds delay_;
  const host::ProcessEventListener listener_;
  // In arrival order, so also in order of due time; a handful at a time
  // (rate x delay: 25 at 5 000 execs/s and 5 ms).
  std::deque<Held> held_;
  // The last exec held for each pid (a deque keeps its elements in place
  // as it grows and shrinks at its ends).
  absl::flat_hash_map<int, Held*> last_held_;
  long classified_ = 0;
  long dropped_ = 0;
};

// The stage for host::ProcConnectorEvents: a DelayedExecClassifier on the
// procfs at `procfs_root`.
host::ProcessEventStageFactory DelayedExecStage(
    std::shared_ptr<const host::PseudoFs> fs, std::string procfs_root,
    std::chrono::milliseconds delay = DelayedExecClassifier::kDefaultDelay);

}  // namespace cosched::discovery

#endif  // COSCHED_DISCOVERY_EXEC_CLASSIFIER_H_
