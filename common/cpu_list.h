// The one parser and printer of kernel CPU lists ("0-3,8,10-11": sysfs's
// online and thread_siblings_list, a topology file, a scenario's pins).
// Header-only so that telemetry stays free of cosched_common's link
// dependencies.
#ifndef COSCHED_COMMON_CPU_LIST_H_
#define COSCHED_COMMON_CPU_LIST_H_

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace cosched {

// The ids of the closed ranges [first, last] (0 <= first <= last < 2^31 - 1,
// every caller bounds ids far lower), sorted and distinct. Overlapping ranges are merged before they are expanded, so the
// cost is O(ranges log ranges + ids) however often a range repeats: a
// forged "0-65535,0-65535,..." stays as cheap as one "0-65535" (expanding
// first and deduplicating after took seconds per 4 KiB under the fuzzers).
inline std::vector<int> ExpandCpuRanges(std::vector<std::pair<int, int>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<int> ids;
  int next = 0;  // the lowest id not yet emitted
  bool any = false;
  for (const auto& [first, last] : ranges) {
    const int from = any ? std::max(first, next) : first;
    for (int id = from; id <= last; ++id) ids.push_back(id);
    if (!any || last + 1 > next) next = last + 1;
    any = true;
  }
  return ids;
}

// Far above any kernel's NR_CPUS; bounds what a malformed range can allocate.
inline constexpr int kMaxCpuId = 1 << 16;

// The CPUs of `text`, sorted and distinct; surrounding whitespace (the
// newline of a sysfs file) is ignored, and an empty list is no CPUs.
// INVALID_ARGUMENT quoting the list and the item that is wrong: an empty
// item, one that is not an id or a range of two, a reversed range, an id
// above kMaxCpuId.
inline absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  const absl::string_view list = absl::StripAsciiWhitespace(text);
  auto bad = [list](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed CPU list \"", list.substr(0, 64), "\": ", why));
  };
  auto id = [](absl::string_view s, int* out) {
    return !s.empty() && s.find_first_not_of("0123456789") == absl::string_view::npos &&
           absl::SimpleAtoi(s, out) && *out <= kMaxCpuId;
  };
  std::vector<std::pair<int, int>> ranges;
  if (list.empty()) return std::vector<int>();
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    if (item.empty()) return bad("empty item");
    std::vector<absl::string_view> bounds = absl::StrSplit(item, '-');
    if (bounds.size() > 2) return bad(absl::StrCat("\"", item.substr(0, 32), "\" is not a range"));
    int first = 0;
    int last = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
      if (!id(bounds[i], i == 0 ? &first : &last)) {
        return bad(absl::StrCat("\"", bounds[i].substr(0, 32), "\" is not a CPU id"));
      }
    }
    if (bounds.size() == 1) last = first;
    if (last < first) return bad(absl::StrCat("range \"", item, "\" is reversed"));
    ranges.emplace_back(first, last);
  }
  return ExpandCpuRanges(std::move(ranges));
}

// The list format of sorted, distinct ids: {0,1,2,3,8} -> "0-3,8"; "" for
// none.
inline std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    absl::StrAppend(&out, cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace cosched

#endif  // COSCHED_COMMON_CPU_LIST_H_
