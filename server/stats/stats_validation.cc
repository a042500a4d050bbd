// ValidateStatsWindows (stats_aggregator.h): the contract of agent.proto's
// stats windows, checked before StatsAggregator::Add relies on it.
#include <bitset>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/sibling_share.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "server/stats/stats_aggregator.h"

namespace cosched::server {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", rule));
}

// One VM's entry of a window, its fields named within it; `ids`: the
// window's VM ids so far.
absl::Status ValidateVmStats(const v1::VMStats& v, absl::flat_hash_set<absl::string_view>& ids) {
  RETURN_IF_ERROR(ValidateId("vm_id", v.vm_id()));
  if (!ids.insert(v.vm_id()).second) {
    return Invalid("vm_id", absl::StrCat("'", v.vm_id(), "' appears twice in the window"));
  }
  return ValidateSiblingShare("share", v.share());
}

// One core's entry of a window, named within it; `cores`: the window's
// cores so far.
absl::Status ValidateCoreShare(const v1::CoreShare& c, std::bitset<kMaxStatsCores>& cores) {
  if (c.core() < 0 || c.core() >= kMaxStatsCores) {
    return Invalid("core", absl::StrCat("must be between 0 and ", kMaxStatsCores - 1));
  }
  if (cores.test(static_cast<size_t>(c.core()))) {
    return Invalid("core", absl::StrCat(c.core(), " appears twice in the window"));
  }
  cores.set(static_cast<size_t>(c.core()));
  for (const auto& [name, ns] : {std::pair<absl::string_view, int64_t>{"both_busy_ns", c.both_busy_ns()},
                                 {"one_idle_ns", c.one_idle_ns()},
                                 {"both_idle_ns", c.both_idle_ns()},
                                 {"unknown_ns", c.unknown_ns()}}) {
    if (ns < 0) return Invalid(name, "must not be negative");
  }
  return absl::OkStatus();
}

// `status` of element `index` of the window's `repeated` field, named from
// the Report ("stats[0].vms[3].vm_id ...").
absl::Status InWindow(const std::string& window, absl::string_view repeated, int index,
                      absl::Status status) {
  if (status.ok()) return status;
  return InElement(absl::StrCat(window, ".", repeated), index, std::move(status));
}

absl::Status ValidateWindow(const std::string& field, const v1::StatsWindow& w) {
  if (w.start_unix_ns() < 0) {
    return Invalid(absl::StrCat(field, ".start_unix_ns"), "must not be negative");
  }
  if (w.end_unix_ns() <= w.start_unix_ns()) {
    return Invalid(absl::StrCat(field, ".end_unix_ns"), "must be after start_unix_ns");
  }
  if (w.events() < 0) return Invalid(absl::StrCat(field, ".events"), "must not be negative");
  if (w.lost_events() < 0) {
    return Invalid(absl::StrCat(field, ".lost_events"), "must not be negative");
  }
  if (w.vms_size() > kMaxStatsVmsPerWindow) {
    return Invalid(absl::StrCat(field, ".vms"),
                   absl::StrCat("has ", w.vms_size(), " entries; at most ",
                                kMaxStatsVmsPerWindow, " are allowed"));
  }
  // Field names are built only for an error (InElement): a window of
  // every VM of a host arrives from each agent every few seconds.
  absl::flat_hash_set<absl::string_view> ids;
  ids.reserve(static_cast<size_t>(w.vms_size()));
  for (int i = 0; i < w.vms_size(); ++i) {
    RETURN_IF_ERROR(InWindow(field, "vms", i, ValidateVmStats(w.vms(i), ids)));
  }
  if (w.cores_size() > kMaxStatsCores) {
    return Invalid(absl::StrCat(field, ".cores"),
                   absl::StrCat("has ", w.cores_size(), " entries; at most ",
                                kMaxStatsCores, " are allowed"));
  }
  std::bitset<kMaxStatsCores> cores;
  for (int i = 0; i < w.cores_size(); ++i) {
    RETURN_IF_ERROR(InWindow(field, "cores", i, ValidateCoreShare(w.cores(i), cores)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateStatsWindows(
    const google::protobuf::RepeatedPtrField<v1::StatsWindow>& stats,
    int64_t dropped_windows) {
  if (dropped_windows < 0) return Invalid("dropped_windows", "must not be negative");
  if (stats.size() > kMaxStatsWindows) {
    return Invalid("stats", absl::StrCat("has ", stats.size(), " windows; at most ",
                                         kMaxStatsWindows, " are allowed"));
  }
  for (int i = 0; i < stats.size(); ++i) {
    const std::string field = absl::StrCat("stats[", i, "]");
    if (absl::Status s = ValidateWindow(field, stats[i]); !s.ok()) return s;
    if (i > 0 && stats[i].start_unix_ns() < stats[i - 1].end_unix_ns()) {
      return Invalid(absl::StrCat(field, ".start_unix_ns"),
                     "must not be before the end of stats[" + std::to_string(i - 1) +
                         "] (windows come oldest first and do not overlap)");
    }
  }
  return absl::OkStatus();
}

}  // namespace cosched::server
