// csd_fanout_loadgen's measurements (fanout_measure.h).
#include "tests/bench/fanout_measure.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cosched::bench {

void PrintLatency(const char* name, const LatencySummary& s) {
  std::printf("%-22s p50 %8.2f ms   p99 %8.2f ms   max %8.2f ms   (%zu)\n", name,
              s.p50_ms, s.p99_ms, s.max_ms, s.count);
}

std::optional<ProcessUsage> Usage(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  auto usage = ReadProcessUsage(pid);
  if (!usage.ok()) {
    std::fprintf(stderr, "csd_fanout_loadgen: %s\n",
                 std::string(usage.status().message()).c_str());
    return std::nullopt;
  }
  return *usage;
}

std::optional<ProcessUsage> Usage(const std::vector<pid_t>& pids) {
  std::optional<ProcessUsage> sum;
  for (pid_t pid : pids) {
    std::optional<ProcessUsage> one = Usage(pid);
    if (!one) return std::nullopt;
    if (!sum) sum = ProcessUsage();
    sum->rss_kib += one->rss_kib;
    sum->peak_rss_kib += one->peak_rss_kib;
    sum->threads += one->threads;
    sum->cpu_seconds += one->cpu_seconds;
  }
  return sum;
}

double CpuPercent(const std::optional<ProcessUsage>& before,
                  const std::optional<ProcessUsage>& after, double wall) {
  if (!before || !after || wall <= 0) return 0;
  return 100.0 * (after->cpu_seconds - before->cpu_seconds) / wall;
}

Mark TakeMark(const std::vector<pid_t>& csd_pids, const Fleet& fleet,
              const std::vector<std::string>& metrics) {
  Mark mark;
  for (const std::string& address : metrics) {
    auto text = HttpGet(address, "/metrics");
    if (!text.ok()) {
      std::fprintf(stderr, "csd_fanout_loadgen: %s\n",
                   std::string(text.status().message()).c_str());
      mark.writes.reset();
      break;
    }
    mark.writes = mark.writes.value_or(0) + SumOfMetric(*text, "cosched_store_writes_total");
    mark.revision =
        std::max(mark.revision.value_or(0), SumOfMetric(*text, "cosched_store_revision"));
    mark.write_seconds = mark.write_seconds.value_or(0) +
                         SumOfMetric(*text, "cosched_store_write_duration_seconds_sum");
    mark.heap_bytes = mark.heap_bytes.value_or(0) + SumOfMetric(*text, "cosched_csd_heap_bytes");
    mark.bucket_bytes += SumOfMetric(*text, "cosched_csd_stats_bucket_bytes");
    mark.series += SumOfMetric(*text, "cosched_csd_stats_series");
    mark.folded += SumOfMetric(*text, "cosched_csd_stats_series_folded");
    for (const auto& [thread, seconds] :
         MetricByLabel(*text, "cosched_csd_thread_cpu_seconds_total", "thread")) {
      mark.thread_cpu[thread] += seconds;
    }
  }
  // Read after the scrape: a phase then holds exactly one scrape's cost to
  // csd (its ending mark's), a few ms in a phase of tens of seconds.
  mark.at = Clock::now();
  mark.csd = Usage(csd_pids);
  mark.self = Usage(getpid());
  mark.agents = fleet.counters();
  return mark;
}

namespace {

// csd's CPU by thread over a phase, most first, in % of one core: where it
// goes (docs/benchmarks.md names the threads). Threads under 0.1% are left
// out.
void PrintThreadCpu(const Mark& a, const Mark& b, double s) {
  std::vector<std::pair<double, std::string>> shares;
  for (const auto& [thread, seconds] : b.thread_cpu) {
    auto before = a.thread_cpu.find(thread);
    const double used = seconds - (before == a.thread_cpu.end() ? 0 : before->second);
    if (100 * used / s >= 0.1) shares.emplace_back(100 * used / s, thread);
  }
  if (shares.empty()) return;
  std::sort(shares.rbegin(), shares.rend());
  std::string line;
  for (const auto& [percent, thread] : shares) {
    char figure[32];
    std::snprintf(figure, sizeof(figure), "%.1f", percent);
    absl::StrAppend(&line, line.empty() ? "" : ", ", thread, " ", figure);
  }
  std::printf("  csd CPU by thread, %% of one core: %s\n", line.c_str());
}

}  // namespace

void PrintPhase(const char* name, const Mark& a, const Mark& b) {
  const double s = std::chrono::duration<double>(b.at - a.at).count();
  if (s <= 0) return;
  auto rate = [s](double before, double after) { return (after - before) / s; };
  std::printf("%s, %.1f s:\n", name, s);
  if (a.csd && b.csd) {
    std::printf("  csd CPU %.1f%% of one core (load generator %.1f%%)\n",
                CpuPercent(a.csd, b.csd, s), CpuPercent(a.self, b.self, s));
  }
  PrintThreadCpu(a, b, s);
  std::printf(
      "  Reports accepted %.1f/s (%.1f/s after a watch message), failed %lld; "
      "stats windows %.1f/s; watch messages %.1f/s\n",
      rate(a.agents.reports_ok, b.agents.reports_ok),
      rate(a.agents.reports_after_watch, b.agents.reports_after_watch),
      static_cast<long long>(b.agents.reports_failed - a.agents.reports_failed),
      rate(a.agents.windows, b.agents.windows), rate(a.agents.messages, b.agents.messages));
  if (a.writes && b.writes && a.revision && b.revision) {
    const double writes = *b.writes - *a.writes;
    std::printf(
        "  store writes %.2f/s (mean %.1f ms from submission to durable), revisions "
        "%.2f/s (revision %.0f -> %.0f)\n",
        rate(*a.writes, *b.writes),
        writes > 0 ? 1000 * (*b.write_seconds - *a.write_seconds) / writes : 0.0,
        rate(*a.revision, *b.revision), *a.revision, *b.revision);
  }
}

}  // namespace cosched::bench
