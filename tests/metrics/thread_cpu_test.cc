// ThreadCpuCollector: CPU by thread name from a /proc task folder, whose
// counters never go down as threads come and go; and the real
// /proc/self/task, where a thread named by NameThisThread shows up with the
// CPU it used.
#include "metrics/thread_cpu.h"

#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cosched::metrics {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::DoubleEq;
using ::testing::Key;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

class FakeTasks {
 public:
  FakeTasks() {
    std::string pattern = (fs::temp_directory_path() / "thread-cpu-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
  }
  ~FakeTasks() { fs::remove_all(dir_); }

  // A thread as proc(5) shows it: utime and stime in clock ticks.
  void Set(int tid, const std::string& name, long utime, long stime) {
    const fs::path task = fs::path(dir_) / std::to_string(tid);
    fs::create_directories(task);
    std::ofstream(task / "comm") << name << "\n";
    std::ofstream(task / "stat") << tid << " (" << name << ") S 1 1 1 0 -1 4194560 10 0 0 0 "
                                 << utime << " " << stime << " 0 0 20 0 1 0 100 0 0\n";
  }
  void Remove(int tid) { fs::remove_all(fs::path(dir_) / std::to_string(tid)); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

double Ticks(long n) { return static_cast<double>(n) / static_cast<double>(sysconf(_SC_CLK_TCK)); }

TEST(ThreadCpu, ReadsNameAndUserPlusSystemTimeOfEveryThread) {
  FakeTasks tasks;
  tasks.Set(101, "cs-stats", 30, 12);
  // A name with ") " in it: the fields are those after the last ')'.
  tasks.Set(102, "odd) R 1 (x", 7, 0);
  absl::StatusOr<std::map<int, ThreadCpu>> threads = ReadThreadCpu(tasks.dir());
  ASSERT_TRUE(threads.ok()) << threads.status();
  ASSERT_EQ(threads->size(), 2u);
  EXPECT_EQ(threads->at(101).name, "cs-stats");
  EXPECT_THAT(threads->at(101).seconds, DoubleEq(Ticks(42)));
  EXPECT_EQ(threads->at(102).name, "odd) R 1 (x");
  EXPECT_THAT(threads->at(102).seconds, DoubleEq(Ticks(7)));
}

TEST(ThreadCpu, AFolderThatCannotBeListedIsAnErrorNamingIt) {
  absl::StatusOr<std::map<int, ThreadCpu>> threads = ReadThreadCpu("/nonexistent/task");
  ASSERT_FALSE(threads.ok());
  EXPECT_THAT(std::string(threads.status().message()),
              ::testing::HasSubstr("/nonexistent/task"));
}

TEST(ThreadCpu, CountersSumByNameAndNeverGoDownAsThreadsComeAndGo) {
  FakeTasks tasks;
  tasks.Set(101, "cs-stats", 100, 0);
  tasks.Set(102, "nexting_thread", 40, 10);
  tasks.Set(103, "nexting_thread", 5, 5);
  ThreadCpuCollector collector("cpu_total", "help", tasks.dir());
  EXPECT_THAT(collector.Totals(), UnorderedElementsAre(Pair("cs-stats", DoubleEq(Ticks(100))),
                                                       Pair("nexting_thread", DoubleEq(Ticks(60)))));
  // 102 exits; a new gRPC thread starts; 101's id is reused by a new
  // thread of another name.
  tasks.Remove(102);
  tasks.Set(104, "nexting_thread", 3, 0);
  tasks.Set(101, "cs-query", 2, 0);
  EXPECT_THAT(collector.Totals(), UnorderedElementsAre(Pair("cs-stats", DoubleEq(Ticks(100))),
                                                       Pair("nexting_thread", DoubleEq(Ticks(63))),
                                                       Pair("cs-query", DoubleEq(Ticks(2)))));
  // The family Prometheus scrapes: a counter, one series per name.
  std::vector<prometheus::MetricFamily> families = collector.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "cpu_total");
  EXPECT_EQ(families[0].type, prometheus::MetricType::Counter);
  ASSERT_EQ(families[0].metric.size(), 3u);
  EXPECT_EQ(families[0].metric[0].label[0].name, "thread");
}

// The thread's own CPU clock, in seconds.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

TEST(ThreadCpu, ANamedThreadOfThisProcessShowsUpWithItsCpu) {
  // Longer than the 15 bytes Linux keeps: cut there.
  const std::string name = "cs-test-burner-thread";
  const std::string kept = name.substr(0, 15);
  std::map<int, ThreadCpu> seen;
  std::thread burner([&] {
    NameThisThread(name);
    // Several clock ticks of CPU, so that /proc has counted some.
    volatile uint64_t sink = 0;
    while (ThreadCpuSeconds() < 0.2) sink = sink + 1;
    seen = *ReadThreadCpu("/proc/self/task");
  });
  burner.join();
  double burned = 0;
  for (const auto& [tid, thread] : seen) {
    if (thread.name == kept) burned = thread.seconds;
  }
  EXPECT_GT(burned, 0.1) << "no thread named " << kept << " with its CPU";
  // By default, this process's threads: its main thread has the program's
  // name, and the burner's CPU stays counted after it exited only if a
  // scrape saw it (none did here).
  ThreadCpuCollector collector("cpu_total", "help");
  EXPECT_THAT(collector.Totals(), Contains(Key("metrics_test")));
}

}  // namespace
}  // namespace cosched::metrics
