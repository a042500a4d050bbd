#include "metrics/thread_cpu.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cosched::metrics {
namespace {

bool ReadFile(const std::string& path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  out = text.str();
  return true;
}

// utime + stime of a stat line, in clock ticks; false when it does not
// parse. The name before them is in parentheses and may hold anything,
// ')' included: the fields start after the last ')'.
bool CpuTicks(const std::string& stat, double& ticks) {
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
  // After the name: state (field 3 of proc(5)) ... utime (14), stime (15).
  constexpr size_t kUtime = 14 - 3, kStime = 15 - 3;
  uint64_t user = 0, system = 0;
  if (fields.size() <= kStime || !absl::SimpleAtoi(fields[kUtime], &user) ||
      !absl::SimpleAtoi(fields[kStime], &system)) {
    return false;
  }
  ticks = static_cast<double>(user + system);
  return true;
}

}  // namespace

absl::StatusOr<std::map<int, ThreadCpu>> ReadThreadCpu(const std::string& task_dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(task_dir.c_str()), closedir);
  if (dir == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot list threads in ", task_dir, ": ", std::strerror(errno)));
  }
  static const double kTicksPerSecond = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::map<int, ThreadCpu> threads;
  while (const dirent* entry = readdir(dir.get())) {
    int tid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &tid)) continue;
    const std::string base = absl::StrCat(task_dir, "/", entry->d_name);
    std::string name, stat;
    double ticks = 0;
    // Gone meanwhile, or unreadable: left out.
    if (!ReadFile(base + "/comm", name) || !ReadFile(base + "/stat", stat) ||
        !CpuTicks(stat, ticks)) {
      continue;
    }
    if (!name.empty() && name.back() == '\n') name.pop_back();
    threads[tid] = ThreadCpu{std::move(name), ticks / kTicksPerSecond};
  }
  return threads;
}

ThreadCpuCollector::ThreadCpuCollector(std::string family, std::string help,
                                       std::string task_dir)
    : family_(std::move(family)), help_(std::move(help)), task_dir_(std::move(task_dir)) {}

std::map<std::string, double> ThreadCpuCollector::Totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<std::map<int, ThreadCpu>> now = ReadThreadCpu(task_dir_);
  if (now.ok()) {
    for (const auto& [tid, before] : last_) {
      auto it = now->find(tid);
      // Gone, or its id now another thread's (a new name, or less CPU than
      // the old one had): the old one's last reading stays counted.
      if (it == now->end() || it->second.name != before.name ||
          it->second.seconds < before.seconds) {
        exited_[before.name] += before.seconds;
      }
    }
    last_ = *std::move(now);
  }
  std::map<std::string, double> totals = exited_;
  for (const auto& [tid, thread] : last_) totals[thread.name] += thread.seconds;
  for (auto& [name, seconds] : totals) {
    double& exported = exported_[name];
    exported = std::max(exported, seconds);
    seconds = exported;
  }
  return totals;
}

std::vector<prometheus::MetricFamily> ThreadCpuCollector::Collect() const {
  prometheus::MetricFamily family;
  family.name = family_;
  family.help = help_;
  family.type = prometheus::MetricType::Counter;
  for (const auto& [name, seconds] : Totals()) {
    prometheus::ClientMetric metric;
    metric.label.push_back(prometheus::ClientMetric::Label{"thread", name});
    metric.counter.value = seconds;
    family.metric.push_back(std::move(metric));
  }
  return {std::move(family)};
}

}  // namespace cosched::metrics
