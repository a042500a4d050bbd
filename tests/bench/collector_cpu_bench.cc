// What cs-agent's sibling-sharing collector costs on this machine's real
// kernel (issue 4, "Agent CPU": under 1% of one core at 155 k context
// switches/s). Needs root (tracefs).
//
//   collector_cpu_bench [--rate 155000] [--seconds 30] [--window-s 10]
//                       [--poll-ms 0] [--buffer-kb 0] [--subbuf-kb 0]
//                       [--max-seconds 3]
//
// The workload: on every online CPU a pair of threads pinned to it passes a
// token back and forth over a futex, so every pass is a context switch on
// that CPU. Throttled, the pairs pass `rate` tokens per second in all (in
// 10 ms bursts; each sleep adds two switches through the idle task, 200/s
// per CPU, and the machine's other tasks switch too, so the rate the
// collector sees is a little above the target: the figures use that one).
//
// The collector is the agent's: the real tracefs SchedTrace (its own
// instance), the real SiblingShareCollector with its own thread, every
// pair a VM of its own trust group, windows of --window-s. Its options are
// the agent's defaults unless a flag says otherwise (0 = default). The
// collector thread's CPU time (CLOCK_THREAD_CPUTIME_ID, and its user and
// system split from getrusage(RUSAGE_THREAD), which the kernel estimates
// from timer ticks, so often all one or the other) is sampled in its
// on_window callback, which runs on that thread, so the figure is exactly
// that thread's, kernel side of the reads included, from the end of the
// first window to the end of the last.
//
// Not the collector's: the cost of writing each event into the ring buffer,
// paid by the kernel in the switching task itself. With --max-seconds the
// pairs first run unthrottled without and with the trace on (no reader),
// and the difference in time per switch is that cost.
//
// With --node-cpus N the pairs switch at a N-CPU node's rate per CPU, and
// the collector's cost per event there (polls, empty reads and cold caches
// included) is priced at --rate: what this 2-CPU machine can say about a
// node's per-CPU overheads.
//
// Printed, not asserted.
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "host/pseudo_fs.h"
#include "host/sched_trace.h"
#include "agent/sibling_share_collector.h"
#include "agent/stats_window_queue.h"
#include "host/topology.h"

namespace cosched::agent {
namespace {

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Context switches of the whole machine since boot (/proc/stat "ctxt").
int64_t MachineContextSwitches() {
  std::ifstream in("/proc/stat");
  std::string key;
  int64_t value = 0;
  while (in >> key) {
    if (key == "ctxt") {
      in >> value;
      return value;
    }
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

void FutexWait(std::atomic<int>* word, int value) {
  syscall(SYS_futex, reinterpret_cast<int*>(word), FUTEX_WAIT_PRIVATE, value, nullptr, nullptr, 0);
}
void FutexWake(std::atomic<int>* word) {
  syscall(SYS_futex, reinterpret_cast<int*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Two threads on one CPU passing a token. `turn` says who holds it (0 the
// leader, 1 the follower); the holder hands it over and waits for it back.
class PingPongPair {
 public:
  PingPongPair(int cpu, std::atomic<bool>* stop) : cpu_(cpu), stop_(stop) {}

  // passes_per_s <= 0: as fast as possible.
  void Start(double passes_per_s) {
    passes_per_s_ = passes_per_s;
    follower_ = std::thread([this] { Follower(); });
    leader_ = std::thread([this] { Leader(); });
  }
  // After *stop is set: wakes whichever thread waits for the token.
  void Join() {
    turn_.store(2);
    syscall(SYS_futex, reinterpret_cast<int*>(&turn_), FUTEX_WAKE_PRIVATE, 2, nullptr, nullptr, 0);
    leader_.join();
    follower_.join();
  }
  int64_t passes() const { return passes_.load(std::memory_order_relaxed); }
  std::vector<int> tids() const { return {leader_tid_.load(), follower_tid_.load()}; }

 private:
  void Pass(int to) {
    turn_.store(to, std::memory_order_release);
    FutexWake(&turn_);
    passes_.fetch_add(1, std::memory_order_relaxed);
    const int me = 1 - to;
    while (turn_.load(std::memory_order_acquire) != me && !stop_->load()) FutexWait(&turn_, to);
  }

  void Leader() {
    PinTo(cpu_);
    leader_tid_ = static_cast<int>(gettid());
    const int64_t start = MonoNs();
    int64_t done = 0;
    while (!stop_->load()) {
      if (passes_per_s_ > 0) {
        const double due = (MonoNs() - start) * passes_per_s_ / 1e9;
        if (done >= due) {
          timespec pause{0, 10'000'000};
          nanosleep(&pause, nullptr);
          continue;
        }
      }
      Pass(1);  // the follower passes it back: two passes
      done += 2;
    }
  }

  void Follower() {
    PinTo(cpu_);
    follower_tid_ = static_cast<int>(gettid());
    while (!stop_->load()) {
      while (turn_.load(std::memory_order_acquire) != 1 && !stop_->load()) FutexWait(&turn_, 0);
      if (stop_->load()) break;
      Pass(0);
    }
  }

  const int cpu_;
  std::atomic<bool>* const stop_;
  double passes_per_s_ = 0;
  std::atomic<int> turn_{0};
  std::atomic<int64_t> passes_{0};
  std::atomic<int> leader_tid_{0}, follower_tid_{0};
  std::thread leader_, follower_;
};

class Workload {
 public:
  explicit Workload(std::vector<int> cpus) {
    for (int cpu : cpus) pairs_.push_back(std::make_unique<PingPongPair>(cpu, &stop_));
  }
  ~Workload() { Stop(); }
  void Start(double total_passes_per_s) {
    for (auto& p : pairs_) p->Start(total_passes_per_s / static_cast<double>(pairs_.size()));
    // Until every thread has published its tid.
    for (auto& p : pairs_)
      while (p->tids()[0] == 0 || p->tids()[1] == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    stop_ = true;
    for (auto& p : pairs_) p->Join();
  }
  int64_t passes() const {
    int64_t n = 0;
    for (const auto& p : pairs_) n += p->passes();
    return n;
  }
  const std::vector<std::unique_ptr<PingPongPair>>& pairs() const { return pairs_; }

 private:
  std::atomic<bool> stop_{false};
  bool stopped_ = false;
  std::vector<std::unique_ptr<PingPongPair>> pairs_;
};

// Unthrottled for `seconds`: switches per second (token passes, and the
// machine's count).
struct MaxRate {
  double passes_per_s = 0;
  double machine_per_s = 0;
};
MaxRate RunFlatOut(const std::vector<int>& cpus, double seconds) {
  Workload w(cpus);
  w.Start(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // warm up
  const int64_t p0 = w.passes(), c0 = MachineContextSwitches(), t0 = MonoNs();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const int64_t p1 = w.passes(), c1 = MachineContextSwitches(), t1 = MonoNs();
  w.Stop();
  const double s = (t1 - t0) / 1e9;
  return {(p1 - p0) / s, (c1 - c0) / s};
}

// One window as the collector's thread saw it when it closed.
struct Sample {
  int64_t mono_ns = 0;
  int64_t thread_cpu_ns = 0;
  int64_t user_ns = 0;
  int64_t sys_ns = 0;
  int64_t events = 0;
  int64_t lost = 0;
};

Sample TakeSample(const v1::StatsWindow& window) {
  Sample s;
  s.mono_ns = MonoNs();
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  s.thread_cpu_ns = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  s.user_ns = ru.ru_utime.tv_sec * 1'000'000'000LL + ru.ru_utime.tv_usec * 1000LL;
  s.sys_ns = ru.ru_stime.tv_sec * 1'000'000'000LL + ru.ru_stime.tv_usec * 1000LL;
  s.events = window.events();
  s.lost = window.lost_events();
  return s;
}

int Main(int argc, char** argv) {
  CLI::App app{"cs-agent collector CPU on the real kernel"};
  double rate = 155'000;
  double seconds = 30;
  double window_s = 10;
  int poll_ms = 0, buffer_kb = 0, subbuf_kb = 0;
  double max_seconds = 3;
  int node_cpus = 0;
  app.add_option("--rate", rate, "token passes (context switches) per second, all CPUs");
  app.add_option("--seconds", seconds, "length of the measured run");
  app.add_option("--window-s", window_s, "stats window (the agent's report interval)");
  app.add_option("--poll-ms", poll_ms, "collector poll interval; 0: the agent's default");
  app.add_option("--buffer-kb", buffer_kb, "per-CPU ring buffer; 0: the agent's default");
  app.add_option("--subbuf-kb", subbuf_kb, "ring-buffer sub-buffer; 0: the agent's default");
  app.add_option("--max-seconds", max_seconds,
                 "unthrottled runs without and with tracing first (3 of each); 0 skips them");
  app.add_option("--node-cpus", node_cpus,
                 "emulate the per-CPU density of a node of this many CPUs: run at "
                 "rate x CPUs here / node-cpus, and price its cost per event at --rate");
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "needs root (tracefs)\n");
    return 1;
  }

  host::LocalPseudoFs fs;
  absl::StatusOr<v1::Topology> topology = host::ReadTopology(fs, "/sys");
  if (!topology.ok()) {
    std::fprintf(stderr, "topology: %s\n", topology.status().ToString().c_str());
    return 1;
  }
  std::vector<int> cpus;
  for (const v1::Core& core : topology->cores())
    for (int cpu : core.cpus()) cpus.push_back(cpu);

  SiblingShareCollectorOptions options;
  if (poll_ms > 0) options.poll_interval = std::chrono::milliseconds(poll_ms);
  if (buffer_kb > 0) options.trace.buffer_size_kb = buffer_kb;
  if (subbuf_kb > 0) options.trace.subbuf_size_kb = subbuf_kb;
  options.window = std::chrono::milliseconds(static_cast<int64_t>(window_s * 1000));
  std::printf("machine: %zu CPUs; collector: poll %lld ms, buffer %d KiB/CPU, sub-buffer %d KiB, "
              "window %.1f s\n",
              cpus.size(), static_cast<long long>(options.poll_interval.count()),
              options.trace.buffer_size_kb, options.trace.subbuf_size_kb, window_s);

  if (max_seconds > 0) {
    // Other tasks of the machine take CPU time from the pairs at random:
    // three runs each way, alternating, and the fastest of each.
    MaxRate plain, traced;
    for (int round = 0; round < 3; ++round) {
      const MaxRate p = RunFlatOut(cpus, max_seconds);
      if (p.passes_per_s > plain.passes_per_s) plain = p;
      auto trace = host::MakeTracefsSchedTrace("/sys/kernel/tracing", "cs-agent-cpu-bench");
      absl::StatusOr<host::SchedTraceFormat> started = trace->Start(options.trace);
      if (!started.ok()) {
        std::fprintf(stderr, "trace: %s\n", started.status().ToString().c_str());
        return 1;
      }
      const MaxRate t = RunFlatOut(cpus, max_seconds);
      trace->Stop();
      if (t.passes_per_s > traced.passes_per_s) traced = t;
    }
    const double n = static_cast<double>(cpus.size());
    // Each CPU runs one pair flat out: its time per switch is 1 / (its rate).
    const double plain_ns = 1e9 * n / plain.passes_per_s;
    const double traced_ns = 1e9 * n / traced.passes_per_s;
    std::printf("flat out, no trace:   %.0f switches/s (/proc/stat ctxt %.0f/s), %.0f ns/switch\n",
                plain.passes_per_s, plain.machine_per_s, plain_ns);
    std::printf("flat out, trace on:   %.0f switches/s (/proc/stat ctxt %.0f/s), %.0f ns/switch\n",
                traced.passes_per_s, traced.machine_per_s, traced_ns);
    std::printf("kernel tracing cost in the switching tasks: %.0f ns/switch, %.2f%% of one core "
                "at %.0f switches/s (not the collector's)\n",
                traced_ns - plain_ns, (traced_ns - plain_ns) * rate / 1e7, rate);
  }

  std::mutex mu;
  std::vector<Sample> samples;
  options.on_window = [&](const v1::StatsWindow& window) {
    Sample s = TakeSample(window);
    std::lock_guard<std::mutex> lock(mu);
    samples.push_back(s);
  };
  const double scale = node_cpus > 0 ? static_cast<double>(node_cpus) / cpus.size() : 1.0;
  const double run_rate = rate / scale;
  Workload workload(cpus);
  workload.Start(run_rate);
  std::vector<CollectedVm> vms;
  for (size_t i = 0; i < workload.pairs().size(); ++i)
    vms.push_back({absl::StrCat("vm-", i), absl::StrCat("tg-", i), workload.pairs()[i]->tids(), ""});
  auto trace = host::MakeTracefsSchedTrace("/sys/kernel/tracing", "cs-agent-cpu-bench");
  StatsWindowQueue queue;
  SiblingShareCollector collector(
      options, *topology, trace.get(), &fs,
      [&]() -> absl::StatusOr<std::vector<CollectedVm>> { return vms; }, &queue);
  const int64_t p0 = workload.passes(), c0 = MachineContextSwitches(), t0 = MonoNs();
  if (absl::Status s = collector.Start(); !s.ok()) {
    std::fprintf(stderr, "collector: %s\n", s.ToString().c_str());
    return 1;
  }
  // One window more than measured: the first one's start is not a sample.
  const size_t windows = static_cast<size_t>(seconds / window_s) + 1;
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard<std::mutex> lock(mu);
    if (samples.size() >= windows) break;
  }
  const int64_t p1 = workload.passes(), c1 = MachineContextSwitches(), t1 = MonoNs();
  const int64_t pages_after_loss = collector.pages_after_loss();
  collector.Stop();
  workload.Stop();

  const Sample& a = samples.front();
  const Sample& b = samples[windows - 1];
  int64_t events = 0, lost = 0;
  for (size_t i = 1; i < windows; ++i) {
    events += samples[i].events;
    lost += samples[i].lost;
  }
  const double span_s = (b.mono_ns - a.mono_ns) / 1e9;
  const double wall_s = (t1 - t0) / 1e9;
  std::printf("run: %.1f s; token passes %.0f/s, /proc/stat ctxt %.0f/s (whole machine)\n", wall_s,
              (p1 - p0) / wall_s, (c1 - c0) / wall_s);
  std::printf("collector over %zu windows (%.1f s): %.0f events/s processed, %lld lost\n",
              windows - 1, span_s, events / span_s, static_cast<long long>(lost));
  std::printf("collector thread CPU: %.3f%% of one core (user %.3f%%, system %.3f%%; "
              "thread clock %.3f%%)\n",
              100.0 * ((b.user_ns - a.user_ns) + (b.sys_ns - a.sys_ns)) / 1e9 / span_s,
              100.0 * (b.user_ns - a.user_ns) / 1e9 / span_s,
              100.0 * (b.sys_ns - a.sys_ns) / 1e9 / span_s,
              100.0 * (b.thread_cpu_ns - a.thread_cpu_ns) / 1e9 / span_s);
  std::printf("collector thread CPU per event: %.0f ns; lost: %lld ring-buffer pages after a "
              "loss, %lld events whose predecessor was missing\n",
              (b.thread_cpu_ns - a.thread_cpu_ns) / static_cast<double>(events),
              static_cast<long long>(pages_after_loss),
              static_cast<long long>(lost - pages_after_loss));
  if (node_cpus > 0) {
    // Per event at a node's density per CPU, polls and reads included; the
    // per-poll costs that do not grow with CPUs are spread over 1/scale of
    // a node's events, so this errs high.
    const double ns_per_event = (b.thread_cpu_ns - a.thread_cpu_ns) / static_cast<double>(events);
    std::printf("per CPU: %.0f events/s here (a %d-CPU node at %.0f/s has %.0f); "
                "that cost per event at %.0f switches/s: %.3f%% of one core\n",
                events / span_s / cpus.size(), node_cpus, rate, rate / node_cpus, rate,
                100.0 * ns_per_event * rate / 1e9);
  }
  return 0;
}

}  // namespace
}  // namespace cosched::agent

int main(int argc, char** argv) { return cosched::agent::Main(argc, argv); }
