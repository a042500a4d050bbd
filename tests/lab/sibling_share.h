// Sibling sharing of the lab: from a tracefs text trace of sched:sched_switch
// and the SMT topology, how much of each group's (VM's) run time its sibling
// hardware thread ran the same group, nothing, or something else.
//
// This is the lab's own, independent measurement: it shares no code with the
// agent so that the lab can check the agent's claims. Everything here is pure
// (no I/O); lab_sibling_share.cc reads the files.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cosched::lab {

// One sched_switch event: on `cpu`, at `ts_ns`, `prev_pid` stopped running
// and `next_pid` started. Pids are kernel task ids (thread ids); 0 is idle.
struct SchedSwitch {
  int64_t ts_ns = 0;
  int cpu = -1;
  std::string prev_comm;
  int64_t prev_pid = -1;
  std::string next_comm;
  int64_t next_pid = -1;
};

// Parses one line of /sys/kernel/tracing/trace. Returns nullopt for lines that
// are not sched_switch events (headers, comments, other events, garbage).
// Thread names may contain spaces: "next_comm=CPU 1/KVM next_pid=73".
std::optional<SchedSwitch> ParseSchedSwitchLine(std::string_view line);

// tracefs reports dropped events as "CPU:3 [LOST 120 EVENTS]". Returns the
// CPU and count, or nullopt when the line is not such a note.
struct LostEvents {
  int cpu = -1;
  int64_t count = 0;
};
std::optional<LostEvents> ParseLostEventsLine(std::string_view line);

// Parses a kernel CPU list such as "0-1", "0,2" or "0-3,8-11".
std::optional<std::vector<int>> ParseCpuList(std::string_view text);

// What a group's CPU saw on its sibling(s) for every nanosecond the group ran.
// same + idle + foreign + unknown == run.
struct SiblingShareStats {
  int64_t run_ns = 0;
  int64_t same_ns = 0;
  int64_t idle_ns = 0;
  int64_t foreign_ns = 0;
  int64_t unknown_ns = 0;
  // Maximal stretches during which one of the group's CPUs ran the group
  // while its sibling ran something foreign.
  int64_t foreign_intervals = 0;
  int64_t longest_foreign_ns = 0;

  double Pct(int64_t part) const {
    return run_ns > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(run_ns) : 0.0;
  }
};

struct SiblingShareReport {
  int64_t first_ts_ns = 0;
  int64_t last_ts_ns = 0;
  int64_t events = 0;
  int64_t lost_events = 0;
  // Events whose prev_pid is not what the previous event on that CPU started:
  // a sign of lost events. Such a CPU's history is trusted again from there.
  int64_t inconsistent_events = 0;
  std::map<std::string, SiblingShareStats> groups;
};

struct SiblingShareInput {
  // Events in any order; they are sorted by time (stable, so equal stamps
  // keep trace order).
  std::vector<SchedSwitch> events;
  // Events the trace says it dropped; only reported. A lab run should size
  // its buffer so that this stays 0, since dropped switches make the
  // figures of that CPU wrong until its next event.
  int64_t lost_events = 0;
  // cpu -> the other CPUs of its core (not including itself).
  std::map<int, std::vector<int>> siblings;
  // thread id -> group name. Threads not in the map are "foreign" to all.
  std::map<int64_t, std::string> tid_group;
};

// The computation. A CPU's current task is unknown until its first event;
// the group's run time on a CPU is counted only once that CPU is known. While
// a group runs on a CPU, the sibling state is, in this order of precedence:
// foreign if any sibling runs a task not in the group (idle is pid 0), unknown
// if any sibling is not known yet, same if any runs the group, else idle.
// A CPU without siblings in the map shares its core with nothing: idle.
// Every group named in tid_group appears in the report, even with no run time.
SiblingShareReport ComputeSiblingShare(SiblingShareInput input);

// Parses a whole trace text into `input` (events and lost-event count).
void ParseTraceText(std::string_view text, SiblingShareInput* input);

// cpu -> its siblings, from each CPU's thread_siblings_list (which includes
// the CPU itself).
std::map<int, std::vector<int>> SiblingsFromLists(const std::map<int, std::vector<int>>& lists);

// The report as JSON (one object; groups keyed by name).
std::string ReportToJson(const SiblingShareReport& report);

// The report as text, one line per group:
// group run_ms same% idle% foreign% unknown% foreign_intervals longest_foreign_us
std::string ReportToText(const SiblingShareReport& report);

}  // namespace cosched::lab
