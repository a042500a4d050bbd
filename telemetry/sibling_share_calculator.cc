#include "telemetry/sibling_share_calculator.h"

#include <algorithm>
#include <utility>

namespace cosched::telemetry {

SiblingShareCalculator::SiblingShareCalculator(CpuTopology topology, ThreadClassifier classifier)
    : topology_(std::move(topology)), classifier_(std::move(classifier)) {
  const int n = topology_.num_cpus();
  cpus_.resize(n);
  cores_.resize(topology_.num_cores());
  window_.cores.resize(topology_.num_cores());
  sibling_begin_.push_back(0);
  for (int cpu = 0; cpu < n; ++cpu) {
    for (int other : topology_.core_cpus(topology_.core_of(cpu)))
      if (other != cpu) sibling_list_.push_back(other);
    sibling_begin_.push_back(static_cast<int>(sibling_list_.size()));
  }
  Stats(kHostGroup);
}

SiblingShareCalculator::Sharing SiblingShareCalculator::Classify(int cpu, GroupId group) const {
  bool unknown = false, same = false;
  const SharingKey key = keys_[group];
  for (int i = sibling_begin_[cpu]; i < sibling_begin_[cpu + 1]; ++i) {
    const GroupId sib = cpus_[sibling_list_[i]].group;
    if (sib == kIdle) continue;
    if (sib == kUnknown) {
      unknown = true;
    } else if (keys_[sib] == key) {
      same = true;
    } else {
      return Sharing::kForeign;
    }
  }
  if (unknown) return Sharing::kUnknown;
  return same ? Sharing::kSame : Sharing::kIdle;
}

namespace {

// Adds without overflowing: only a hostile trace (events some 2^62 ns apart
// on many CPUs) reaches the limit, and then the sum stays at it.
void AddNs(int64_t& total, int64_t dt) {
  if (__builtin_add_overflow(total, dt, &total)) total = INT64_MAX;
}

}  // namespace

void SiblingShareCalculator::Account(int core, int64_t dt) {
  for (int cpu : topology_.core_cpus(core)) {
    const CpuState& st = cpus_[cpu];
    if (st.group >= kIdle) continue;
    SiblingShareStats& s = window_.groups[st.group];
    AddNs(s.run_ns, dt);
    switch (st.sharing) {
      case Sharing::kIdle: AddNs(s.idle_ns, dt); break;
      case Sharing::kSame: AddNs(s.same_ns, dt); break;
      case Sharing::kUnknown: AddNs(s.unknown_ns, dt); break;
      case Sharing::kForeign: AddNs(s.foreign_ns, dt); break;
    }
  }
  CoreShareStats& c = window_.cores[core];
  switch (cores_[core].state) {
    case CoreClass::kUnknown: AddNs(c.unknown_ns, dt); break;
    case CoreClass::kBothBusy: AddNs(c.both_busy_ns, dt); break;
    case CoreClass::kOneIdle: AddNs(c.one_idle_ns, dt); break;
    case CoreClass::kBothIdle: AddNs(c.both_idle_ns, dt); break;
  }
}

// A switch between two threads of one group, with the sibling still
// foreign, continues the interval.
void SiblingShareCalculator::Refresh(int core, int64_t now) {
  std::span<const int> cpus = topology_.core_cpus(core);
  int busy = 0;
  bool unknown = false;
  for (int cpu : cpus) {
    CpuState& st = cpus_[cpu];
    const GroupId g = st.group;
    unknown |= g == kUnknown;
    busy += g < kIdle;
    st.sharing = g < kIdle ? Classify(cpu, g) : Sharing::kUnknown;
    const bool foreign = g < kIdle && st.sharing == Sharing::kForeign;
    if (st.foreign_group != kNone && (!foreign || st.foreign_group != g)) {
      SiblingShareStats& s = window_.groups[st.foreign_group];
      s.longest_foreign_ns = std::max(s.longest_foreign_ns, now - st.foreign_since);
      st.foreign_group = kNone;
    }
    if (foreign && st.foreign_group == kNone) {
      st.foreign_group = g;
      st.foreign_since = now;
      ++window_.groups[g].foreign_intervals;
    }
  }
  cores_[core].state = unknown ? CoreClass::kUnknown
                       : busy == static_cast<int>(cpus.size()) ? CoreClass::kBothBusy
                       : busy == 0                              ? CoreClass::kBothIdle
                                                                : CoreClass::kOneIdle;
}

void SiblingShareCalculator::Reclassify() {
  for (int core = 0; core < static_cast<int>(cores_.size()); ++core) {
    if (!cores_[core].started) continue;
    for (int cpu : topology_.core_cpus(core)) {
      CpuState& st = cpus_[cpu];
      if (st.group >= kIdle) continue;  // idle or unknown: no thread to ask about
      GroupId group = classifier_(st.tid);
      if (group >= kIdle) group = kHostGroup;
      st.group = group;
      Stats(group);
    }
    Refresh(core, cores_[core].last_ns);
  }
}

void SiblingShareCalculator::Add(const SchedSwitch& ev) {
  ++window_.events;
  // A negative time is no trace clock's (a corrupt record, or a 64-bit
  // counter past 2^63); differences to it could overflow.
  if (ev.cpu < 0 || ev.cpu >= topology_.num_cpus() || ev.ts_ns < 0) {
    ++window_.ignored_events;
    return;
  }
  if (!any_event_) {
    any_event_ = true;
    window_.start_ns = ev.ts_ns;
    latest_ns_ = ev.ts_ns;
  }
  latest_ns_ = std::max(latest_ns_, ev.ts_ns);
  const int core = topology_.core_of(ev.cpu);
  CoreState& cs = cores_[core];
  int64_t now = ev.ts_ns;
  if (cs.started) {
    if (now < cs.last_ns) {
      ++window_.out_of_order_events;
      now = cs.last_ns;
    } else if (now > cs.last_ns) {
      Account(core, now - cs.last_ns);
    }
  }
  cs.started = true;
  cs.last_ns = now;

  CpuState& st = cpus_[ev.cpu];
  if (st.group != kUnknown && st.tid != ev.prev_tid) ++window_.inconsistent_events;
  st.tid = ev.next_tid;
  if (ev.next_tid == 0) {
    st.group = kIdle;
  } else {
    st.group = classifier_(ev.next_tid);
    if (st.group >= kIdle) st.group = kHostGroup;
    Stats(st.group);
  }
  Refresh(core, now);
}

void SiblingShareCalculator::SetSharingKey(GroupId group, SharingKey key) {
  Stats(group);
  keys_[group] = key;
}

SiblingShareWindow SiblingShareCalculator::TakeWindow(int64_t end_ns) {
  for (int core = 0; core < static_cast<int>(cores_.size()); ++core) {
    CoreState& cs = cores_[core];
    if (!cs.started || end_ns <= cs.last_ns) continue;
    Account(core, end_ns - cs.last_ns);
    cs.last_ns = end_ns;
  }
  for (const CpuState& st : cpus_) {
    if (st.foreign_group == kNone) continue;
    SiblingShareStats& s = Stats(st.foreign_group);
    s.longest_foreign_ns = std::max(s.longest_foreign_ns, end_ns - st.foreign_since);
  }
  window_.end_ns = std::max(end_ns, window_.start_ns);
  SiblingShareWindow out = window_;
  const int64_t next_start = window_.end_ns;
  for (SiblingShareStats& s : window_.groups) s = SiblingShareStats{};
  for (CoreShareStats& c : window_.cores) c = CoreShareStats{};
  window_.start_ns = next_start;
  window_.end_ns = 0;
  window_.events = window_.inconsistent_events = window_.out_of_order_events =
      window_.ignored_events = 0;
  return out;
}

SiblingShareWindow SiblingShareCalculator::TakeWindow() { return TakeWindow(latest_ns_); }

}  // namespace cosched::telemetry
