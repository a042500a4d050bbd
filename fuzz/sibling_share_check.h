// What the fuzzers of trace parsers do with the events they parse: feed them
// to the sibling-share computation, as cs-agent and `csctl analyze` do, and
// check the invariants its header promises.
#ifndef COSCHED_FUZZ_SIBLING_SHARE_CHECK_H_
#define COSCHED_FUZZ_SIBLING_SHARE_CHECK_H_

#include <cstdint>
#include <cstdlib>

#include "telemetry/sibling_share_calculator.h"

namespace cosched::fuzz {

// 8 CPUs, SMT-2 as Linux numbers them on x86 (CPU n and n+4 share a core),
// so that events of CPUs 8 and up exercise the "outside the topology" path.
inline telemetry::CpuTopology FuzzTopology() {
  std::vector<std::vector<int>> lists(8);
  for (int cpu = 0; cpu < 8; ++cpu) lists[cpu] = {cpu % 4, cpu % 4 + 4};
  return *telemetry::CpuTopology::FromSiblingLists(lists);
}

// A few groups (VMs) and the host: small ids, as the classifier must give.
inline telemetry::SiblingShareCalculator FuzzCalculator() {
  return telemetry::SiblingShareCalculator(
      FuzzTopology(), [](int32_t tid) { return static_cast<telemetry::GroupId>(tid & 3); });
}

inline void CheckWindow(const telemetry::SiblingShareWindow& w) {
  auto check = [](bool ok) {
    if (!ok) std::abort();
  };
  check(w.end_ns >= w.start_ns);
  for (const telemetry::SiblingShareStats& s : w.groups) {
    check(s.run_ns >= 0 && s.same_ns >= 0 && s.idle_ns >= 0 && s.foreign_ns >= 0 &&
          s.unknown_ns >= 0 && s.foreign_intervals >= 0 && s.longest_foreign_ns >= 0);
    // Exact, unless the sums saturated (a trace of 2^63 ns).
    const __int128 parts = __int128{s.same_ns} + s.idle_ns + s.foreign_ns + s.unknown_ns;
    check(s.run_ns == INT64_MAX ? parts >= INT64_MAX : parts == s.run_ns);
  }
  for (const telemetry::CoreShareStats& c : w.cores)
    check(c.both_busy_ns >= 0 && c.one_idle_ns >= 0 && c.both_idle_ns >= 0 &&
          c.unknown_ns >= 0);
}

}  // namespace cosched::fuzz

#endif  // COSCHED_FUZZ_SIBLING_SHARE_CHECK_H_
