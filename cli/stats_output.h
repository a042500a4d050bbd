// How `csctl stats` reads its --window and shows a GetStats answer: per VM
// rows with run time and the same/idle/foreign/unknown split (the columns
// and JSON keys of `csctl analyze`), a total for host, tenant and trust
// group subjects, and per-core figures for a host.
#ifndef COSCHED_CLI_STATS_OUTPUT_H_
#define COSCHED_CLI_STATS_OUTPUT_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/control_plane.pb.h"
#include "nlohmann/json.hpp"

namespace cosched::cli {

// "300", "300s", "5m", "1h", "1d" -> seconds. INVALID_ARGUMENT naming
// `field` unless it is a whole number of seconds from 1 to 86400.
absl::StatusOr<int32_t> ParseStatsWindow(absl::string_view field,
                                         absl::string_view text);

// Keys: vm, runtime_ns, same_pct, idle_pct, foreign_pct, unknown_pct
// (percent of runtime_ns, 4 decimals), foreign_intervals,
// longest_foreign_ns, and forced_idle_ns only when it was measured.
nlohmann::json SiblingShareToJson(absl::string_view vm,
                                  const v1::SiblingShare& share);

// Keys: subject ({"vm": ID} or host, tenant, trust_group), window_seconds,
// start_unix_ns, end_unix_ns, windows, lost_events, dropped_windows, vms
// (array of SiblingShareToJson), total (the same keys, vm "total"), and
// for a host cores (array of core, both_busy_ns, one_idle_ns,
// both_idle_ns, unknown_ns).
nlohmann::json StatsToJson(const v1::GetStatsRequest& request,
                           const v1::GetStatsResponse& response);

// A summary line, the host's cores on one line, then the table (one row
// per VM and, unless the subject is one VM, a TOTAL row).
void PrintStats(const v1::GetStatsRequest& request,
                const v1::GetStatsResponse& response, std::ostream& out);

}  // namespace cosched::cli

#endif  // COSCHED_CLI_STATS_OUTPUT_H_
