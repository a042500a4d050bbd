// What csd's load generators share: latency percentiles, what a process
// costs (/proc/PID/status and /proc/PID/stat), and csd run as a separate
// process on a temporary data dir so that its memory and CPU are its own.
#ifndef COSCHED_TESTS_BENCH_LOADGEN_SUPPORT_H_
#define COSCHED_TESTS_BENCH_LOADGEN_SUPPORT_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cosched::bench {

struct LatencySummary {
  size_t count = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
};

// Percentiles of latencies in microseconds (nearest rank, no interpolation).
LatencySummary Summarize(std::vector<int64_t> micros);

// What a process has cost so far.
struct ProcessUsage {
  int64_t rss_kib = 0;       // VmRSS
  int64_t peak_rss_kib = 0;  // VmHWM
  int threads = 0;
  double cpu_seconds = 0;  // utime + stime
};

// NOT_FOUND when the process is gone.
absl::StatusOr<ProcessUsage> ReadProcessUsage(pid_t pid);

// Raises this process's RLIMIT_NOFILE (soft, and hard when needed: that
// takes root) to at least `wanted`. Children inherit it.
absl::Status RaiseOpenFileLimit(uint64_t wanted);

// A loopback port that was free a moment ago.
absl::StatusOr<int> FreeLoopbackPort();

// The body of GET http://<address><path> (address "127.0.0.1:PORT"), read
// to the end of the connection; for scraping a Prometheus /metrics page.
absl::StatusOr<std::string> HttpGet(const std::string& address,
                                    const std::string& path);

// The sum of every sample of metric `name` (all label sets) in Prometheus
// text; 0 when it has none.
double SumOfMetric(const std::string& text, const std::string& name);
// Metric `name`'s samples in Prometheus text by the value of `label`,
// summed over the other labels; samples without that label are left out.
std::map<std::string, double> MetricByLabel(const std::string& text, const std::string& name,
                                            const std::string& label);

// The csd binary serving plaintext on a free loopback port, on a fresh data
// dir under /tmp, with its log in <dir>/csd.log. SIGTERM, then the dir is
// removed, on destruction.
class CsdProcess {
 public:
  // UNAVAILABLE (with the end of csd's log) when csd exits or does not
  // answer health checks within 20 s. With `serve_metrics`, csd also serves
  // /metrics on another free loopback port (metrics_address()); without,
  // its metrics server is off, so it costs nothing.
  // `extra_config` is appended to its csd.yaml (a store: section).
  static absl::StatusOr<std::unique_ptr<CsdProcess>> Start(
      const std::string& binary, bool serve_metrics = false,
      const std::string& extra_config = "");
  ~CsdProcess();
  CsdProcess(const CsdProcess&) = delete;
  CsdProcess& operator=(const CsdProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  // "127.0.0.1:PORT" of /metrics; empty unless started with serve_metrics.
  const std::string& metrics_address() const { return metrics_address_; }
  const std::string& log_path() const { return log_path_; }
  // The last 2000 bytes of csd's log.
  std::string LogTail() const;

 private:
  CsdProcess() = default;

  pid_t pid_ = -1;
  std::string dir_;
  std::string address_;
  std::string metrics_address_;
  std::string log_path_;
};

}  // namespace cosched::bench

#endif  // COSCHED_TESTS_BENCH_LOADGEN_SUPPORT_H_
