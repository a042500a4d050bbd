// Sibling sharing, computed as sched_switch events stream in: for each group
// of threads (a VM, or its trust group), over the time its threads run on a
// CPU, what the CPU's SMT sibling runs meanwhile. The definitions are those
// of docs/architecture.md, "Co-scheduling statistics". The live collector of
// cs-agent and `csctl analyze` share this code; only the input differs.
#ifndef COSCHED_TELEMETRY_SIBLING_SHARE_CALCULATOR_H_
#define COSCHED_TELEMETRY_SIBLING_SHARE_CALCULATOR_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "telemetry/sched_switch.h"
#include "telemetry/topology.h"

namespace cosched::telemetry {

// A group of threads that may share a core: small, dense integers chosen by
// the caller (index into its own table of VMs or trust groups).
using GroupId = uint32_t;
// Threads no group claims: host tasks, cookie 0.
inline constexpr GroupId kHostGroup = 0;

// Groups with equal keys may share a core (see SetSharingKey).
using SharingKey = uint32_t;

// Maps a thread id (never 0, the idle task) to its group. Called once per
// event, for the thread being switched in: keep it cheap. Ids should stay
// small (the calculator keeps one stats slot per id up to the largest seen).
using ThreadClassifier = std::function<GroupId(int32_t tid)>;

// What a group's CPUs saw on their siblings while the group ran.
// same + idle + foreign + unknown == run.
struct SiblingShareStats {
  // Each sum stops at INT64_MAX (292 years) rather than overflow, which
  // only a forged trace reaches.
  int64_t run_ns = 0;
  int64_t same_ns = 0;     // a sibling ran a group of the same sharing key (and none another)
  int64_t idle_ns = 0;     // every sibling was idle
  int64_t foreign_ns = 0;  // a sibling ran another group or a host task
  int64_t unknown_ns = 0;  // a sibling had not been seen yet
  // Maximal stretches during which one CPU ran the group while a sibling ran
  // something foreign. An interval is counted in the window where it
  // starts; longest_foreign_ns covers every interval open during the window,
  // measured from its start (so a leak that lasts shows in every window).
  int64_t foreign_intervals = 0;
  int64_t longest_foreign_ns = 0;

  double Pct(int64_t part) const {
    return run_ns > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(run_ns) : 0.0;
  }
};

// One core's time: how many of its CPUs ran a task. "both" reads "all" on
// cores of more than two threads.
struct CoreShareStats {
  int64_t both_busy_ns = 0;
  int64_t one_idle_ns = 0;  // some, not all, idle
  int64_t both_idle_ns = 0;
  int64_t unknown_ns = 0;   // from the core's first event until all its CPUs were seen
};

// The stats accumulated since the previous window.
struct SiblingShareWindow {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t events = 0;
  // Events whose prev_tid is not what that CPU's previous event switched
  // in: a sign of lost events. The CPU is trusted again from that event on.
  int64_t inconsistent_events = 0;
  // Events older than the last event of their core (or than the previous
  // window's end): counted as if they happened at that time.
  int64_t out_of_order_events = 0;
  // Events of CPUs outside the topology, or with a negative timestamp:
  // ignored.
  int64_t ignored_events = 0;
  // Indexed by GroupId, up to the largest id seen so far.
  std::vector<SiblingShareStats> groups;
  // Indexed by core (CpuTopology numbering).
  std::vector<CoreShareStats> cores;
};

// The streaming computation. Memory is bounded by the number of CPUs and
// groups, never by the number of events; each event costs O(threads per
// core). Not thread-safe: one instance fed by one thread.
//
// Contract on order: the events of the CPUs of one core must arrive in
// timestamp order (ties in any order). Events of different cores may
// interleave freely, so one stream merged by timestamp across all CPUs
// (event_merge.h) satisfies it, and so does one stream per core.
//
// A CPU's task is unknown until its first event; time is counted from each
// core's first event. Sibling state precedence, as in the lab's
// independent check (tests/lab/sibling_share.h): foreign if any sibling runs
// another group, else unknown if any sibling is not known, else same if any
// runs the group, else idle. Host tasks form a group too (kHostGroup), so
// host threads on both siblings count as "same" for the host group.
//
// "Another group" means one of another sharing key. By default each group's
// key is its own id, so groups are what may share a core (csctl analyze: a
// group per VM). The live collector reports per VM while "same" means the
// same trust group: its groups are VMs, their keys trust groups.
class SiblingShareCalculator {
 public:
  SiblingShareCalculator(CpuTopology topology, ThreadClassifier classifier);

  void Add(const SchedSwitch& event);

  // From now on `group` counts as "same" with every group of key `key`
  // (until set, a group's key is its id). Takes effect on each core at its
  // next event.
  void SetSharingKey(GroupId group, SharingKey key);

  // The classifier's answers changed (the collector has a new VM list):
  // each CPU's running thread is classified again, and the sharing keys
  // take effect, from each core's last event on. A thread that was running
  // when it joined a VM counts for the VM for the whole of that run.
  void Reclassify();

  // Accounts time up to `end_ns` (each core's state holds until then),
  // returns what was accumulated since the last window, and starts a new
  // window at `end_ns`. Events older than `end_ns` that arrive later count
  // as out of order. The state of every CPU (what it runs, open foreign
  // intervals) carries over.
  SiblingShareWindow TakeWindow(int64_t end_ns);
  // Up to the latest event seen.
  SiblingShareWindow TakeWindow();

  const CpuTopology& topology() const { return topology_; }
  int64_t latest_ns() const { return latest_ns_; }

 private:
  static constexpr GroupId kIdle = 0xFFFFFFFE;
  static constexpr GroupId kUnknown = 0xFFFFFFFF;
  static constexpr GroupId kNone = 0xFFFFFFFF;

  enum class Sharing : uint8_t { kIdle, kSame, kUnknown, kForeign };
  enum class CoreClass : uint8_t { kUnknown, kBothBusy, kOneIdle, kBothIdle };

  struct CpuState {
    GroupId group = kUnknown;  // kIdle, kUnknown, or the running thread's group
    int32_t tid = -1;
    // What the siblings run, while `group` is a group; valid from one event
    // of the core to the next, since only those change it.
    Sharing sharing = Sharing::kUnknown;
    GroupId foreign_group = kNone;  // the open foreign interval's group
    int64_t foreign_since = 0;
  };
  struct CoreState {
    bool started = false;
    CoreClass state = CoreClass::kUnknown;
    int64_t last_ns = 0;
  };

  Sharing Classify(int cpu, GroupId group) const;
  // Adds `dt` of the core's current state to the window.
  void Account(int core, int64_t dt);
  // After an event on the core: the new sharing of its CPUs, its class, and
  // foreign intervals opened or closed at `now`.
  void Refresh(int core, int64_t now);
  SiblingShareStats& Stats(GroupId group) {
    if (group >= window_.groups.size()) {
      window_.groups.resize(group + 1);
      while (keys_.size() <= group) keys_.push_back(static_cast<SharingKey>(keys_.size()));
    }
    return window_.groups[group];
  }

  CpuTopology topology_;
  ThreadClassifier classifier_;
  std::vector<CpuState> cpus_;
  std::vector<CoreState> cores_;
  // cpu -> its siblings (not itself), flattened.
  std::vector<int> sibling_list_;
  std::vector<int> sibling_begin_;
  SiblingShareWindow window_;
  // Indexed by GroupId, as window_.groups.
  std::vector<SharingKey> keys_;
  bool any_event_ = false;
  int64_t latest_ns_ = 0;
};

}  // namespace cosched::telemetry

#endif  // COSCHED_TELEMETRY_SIBLING_SHARE_CALCULATOR_H_
