// ValidateStatsWindows (stats_aggregator.h): the contract of agent.proto's
// stats windows, checked before StatsAggregator::Add relies on it.
#include <set>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/sibling_share.h"
#include "common/validation.h"
#include "server/stats/stats_aggregator.h"

namespace cosched::server {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", rule));
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
  absl::flat_hash_set<absl::string_view> ids;
  for (int i = 0; i < w.vms_size(); ++i) {
    const std::string vm_field = absl::StrCat(field, ".vms[", i, "]");
    const v1::VMStats& v = w.vms(i);
    if (absl::Status s = ValidateId(absl::StrCat(vm_field, ".vm_id"), v.vm_id()); !s.ok()) {
      return s;
    }
    if (!ids.insert(v.vm_id()).second) {
      return Invalid(absl::StrCat(vm_field, ".vm_id"),
                     absl::StrCat("'", v.vm_id(), "' appears twice in the window"));
    }
    if (absl::Status s = ValidateSiblingShare(absl::StrCat(vm_field, ".share"), v.share()); !s.ok()) {
      return s;
    }
  }
  if (w.cores_size() > kMaxStatsCores) {
    return Invalid(absl::StrCat(field, ".cores"),
                   absl::StrCat("has ", w.cores_size(), " entries; at most ",
                                kMaxStatsCores, " are allowed"));
  }
  std::set<int32_t> cores;
  for (int i = 0; i < w.cores_size(); ++i) {
    const std::string core_field = absl::StrCat(field, ".cores[", i, "]");
    const v1::CoreShare& c = w.cores(i);
    if (c.core() < 0 || c.core() >= kMaxStatsCores) {
      return Invalid(absl::StrCat(core_field, ".core"),
                     absl::StrCat("must be between 0 and ", kMaxStatsCores - 1));
    }
    if (!cores.insert(c.core()).second) {
      return Invalid(absl::StrCat(core_field, ".core"),
                     absl::StrCat(c.core(), " appears twice in the window"));
    }
    if (c.both_busy_ns() < 0 || c.one_idle_ns() < 0 || c.both_idle_ns() < 0 ||
        c.unknown_ns() < 0) {
      return Invalid(core_field, "figures must not be negative");
    }
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
