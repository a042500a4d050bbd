// `csctl analyze TRACE --topology FILE [--threads FILE]`: sibling sharing per
// VM from a tracefs text trace, offline, with the computation cs-agent runs
// live (telemetry/sibling_share_calculator.h). Needs no csd.
#ifndef COSCHED_CLI_ANALYZE_H_
#define COSCHED_CLI_ANALYZE_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/commands.h"
#include "telemetry/sibling_share_calculator.h"
#include "telemetry/trace_text.h"

namespace cosched::cli {

struct AnalyzeArgs {
  // tracefs `trace` or `trace_pipe` text with sched_switch lines.
  std::string trace_path{};
  // One line per CPU, in CPU order: its thread_siblings_list ("0-1", "0,1").
  std::string topology_path{};
  // Lines "TID VM_ID", or "tgid:TGID VM_ID" for every thread of process
  // TGID (by the trace's record-tgid column; a thread's own line wins);
  // '#' comments and blank lines allowed. Empty: group threads by tgid when
  // the trace has the record-tgid column, else each thread is a group of
  // its own.
  std::string threads_path{};
  // Only [from, to) counts, in the trace's timestamps ("1234.567890",
  // seconds of its clock); empty: the whole trace. Events before `from`
  // still tell what each CPU runs, so the span starts with known state, as
  // a window of cs-agent's collector does.
  std::string from{};
  std::string to{};
};

// "1234.567890123" (seconds, at most 9 decimals) -> nanoseconds.
// INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<int64_t> ParseTraceSeconds(std::string_view field, std::string_view text);

// A threads file: VM ids by thread id, and by process (tgid) for the
// threads no line of their own names.
struct ThreadsMap {
  std::map<int32_t, std::string> tids;
  std::map<int32_t, std::string> tgids;
};

// "TID VM_ID" and "tgid:TGID VM_ID" lines. INVALID_ARGUMENT naming `source`
// and the line for a bad line, or a thread or process mapped twice to
// different VMs.
absl::StatusOr<ThreadsMap> ParseThreadsFile(std::string_view text, std::string_view source);

// One VM (or tgid, or thread) of the result.
struct AnalyzedGroup {
  std::string vm;
  telemetry::SiblingShareStats stats;
};

struct AnalyzeResult {
  // --threads: the file's VMs by name (even with no run time), then "host"
  // if it ran. Else: the groups that ran, by run time, largest first.
  std::vector<AnalyzedGroup> groups;
  telemetry::SiblingShareWindow window;  // totals, per-core figures
  telemetry::TraceTextCounts counts;
  int num_cpus = 0;
  int num_cores = 0;
  // "threads file", "tgid" or "thread".
  std::string grouping;
};

// The whole analysis, without printing. INVALID_ARGUMENT or NOT_FOUND
// naming the file (and line) that cannot be read or is bad.
absl::StatusOr<AnalyzeResult> AnalyzeTrace(const AnalyzeArgs& args);

// Runs the command: the table, or with kJson a list of objects with keys
// vm, runtime_ns, same_pct, idle_pct, foreign_pct, unknown_pct (numbers,
// percent of runtime_ns), foreign_intervals, longest_foreign_ns. Problems
// of the trace that do not stop the analysis (malformed lines, lost
// events) are "csctl: warning: " lines on `err`. Returns kExitOk, or
// kExitUsage with one "csctl: " line on `err` when an input is bad.
int RunAnalyze(const AnalyzeArgs& args, OutputFormat format, std::ostream& out, std::ostream& err);

}  // namespace cosched::cli

#endif  // COSCHED_CLI_ANALYZE_H_
