// What a phase of csd_fanout_loadgen is measured by: csd's and the load
// generator's usage from /proc, what the agents did, and csd's own figures
// from its /metrics (store writes, revision, heap, stats series, CPU by
// thread), taken as a Mark at each end of a phase and printed as the
// difference.
#ifndef COSCHED_TESTS_BENCH_FANOUT_MEASURE_H_
#define COSCHED_TESTS_BENCH_FANOUT_MEASURE_H_

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/bench/fanout_fleet.h"
#include "tests/bench/loadgen_support.h"

namespace cosched::bench {

void PrintLatency(const char* name, const LatencySummary& s);

// csd's usage, or nothing when its pid is unknown.
std::optional<ProcessUsage> Usage(pid_t pid);
// The replicas' sum.
std::optional<ProcessUsage> Usage(const std::vector<pid_t>& pids);

// csd's CPU, in % of one core, over a span of `wall` seconds.
double CpuPercent(const std::optional<ProcessUsage>& before,
                  const std::optional<ProcessUsage>& after, double wall);

// What a phase is measured between: csd's and the load generator's usage,
// what the agents did, and csd's store counters from its /metrics.
struct Mark {
  Clock::time_point at;
  std::optional<ProcessUsage> csd, self;
  Fleet::Counters agents;
  std::optional<double> writes, revision, write_seconds;
  // What csd's heap holds (cosched_csd_heap_bytes), and of it the stats
  // series' buckets; the series held and folded; summed over the replicas.
  std::optional<double> heap_bytes;
  double bucket_bytes = 0, series = 0, folded = 0;
  // csd's CPU seconds by thread name (cosched_csd_thread_cpu_seconds_total),
  // summed over the replicas.
  std::map<std::string, double> thread_cpu;
};

// Several replicas: writes summed, the revision (etcd's, shared) the
// highest any of them has.
Mark TakeMark(const std::vector<pid_t>& csd_pids, const Fleet& fleet,
              const std::vector<std::string>& metrics);

// One line per figure of the phase between two marks.
void PrintPhase(const char* name, const Mark& a, const Mark& b);

}  // namespace cosched::bench

#endif  // COSCHED_TESTS_BENCH_FANOUT_MEASURE_H_
