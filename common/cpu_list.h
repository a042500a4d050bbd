// The CPU ids of a CPU list's ranges, for the three parsers of kernel CPU
// lists (host/topology.h, telemetry/topology.h, policy/scenario.h).
// Header-only so that telemetry stays free of cosched_common's link
// dependencies.
#ifndef COSCHED_COMMON_CPU_RANGES_H_
#define COSCHED_COMMON_CPU_RANGES_H_

#include <algorithm>
#include <utility>
#include <vector>

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

}  // namespace cosched

#endif  // COSCHED_COMMON_CPU_RANGES_H_
