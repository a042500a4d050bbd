// CPU time by thread name, read from /proc at scrape time: where a
// process's CPU goes (csd's store writer, fan-out, stats, gRPC's threads
// handling Reports), so that a benchmark or an operator sees which part
// grew without a profiler (issue #36).
#ifndef COSCHED_METRICS_THREAD_CPU_H_
#define COSCHED_METRICS_THREAD_CPU_H_

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace cosched::metrics {

// One thread as /proc shows it.
struct ThreadCpu {
  std::string name;      // comm: at most 15 bytes
  double seconds = 0;    // user + system
};

// Every thread under `task_dir` (/proc/self/task, or a copy laid out the
// same way) by thread id. A thread that exits while it is read is left
// out. The error names the folder when it cannot be listed.
absl::StatusOr<std::map<int, ThreadCpu>> ReadThreadCpu(const std::string& task_dir);

// Thread-safe. A counter family, one series per thread name (the label
// `thread`), summing the CPU of every thread of that name, those that
// exited included: a thread's last reading is kept when it is gone, so
// the counters never go down (a thread's CPU after the last scrape before
// it exited is not counted). Names are few (each thread pool shares one),
// so the family stays a few series.
class ThreadCpuCollector : public prometheus::Collectable {
 public:
  ThreadCpuCollector(std::string family, std::string help,
                     std::string task_dir = "/proc/self/task");

  std::vector<prometheus::MetricFamily> Collect() const override;

  // The sums Collect() exports, by thread name.
  std::map<std::string, double> Totals() const;

 private:
  const std::string family_;
  const std::string help_;
  const std::string task_dir_;
  mutable std::mutex mu_;
  mutable std::map<int, ThreadCpu> last_;          // by thread id, last reading
  mutable std::map<std::string, double> exited_;   // CPU of threads gone, by name
  mutable std::map<std::string, double> exported_;  // never lowered
};

}  // namespace cosched::metrics

#endif  // COSCHED_METRICS_THREAD_CPU_H_
