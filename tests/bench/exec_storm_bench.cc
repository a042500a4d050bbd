// What an exec storm costs cs-agent (issue 13, 7b): reconcile passes per
// second and the agent's CPU per second while unrelated processes exec at a
// given rate (monitoring agents and cron jobs exec thousands of times a
// second on a busy hypervisor), with 50 VMs on the host. Needs root (the
// netlink proc connector).
//
//   exec_storm_bench [--vms 50] [--threads 4] [--seconds 10]
//                    [--connector-rates 1000] [--synthetic-rates 1000,5000]
//
// The agent is the agent's own pipeline: the real proc connector
// (ProcConnectorEvents) feeding a ReconcileLoop with its default options
// (the agent's), over the real procfs discovery of this machine's /proc and
// a CookieReconciler on the fake kernel (this build machine has no SMT, so
// prctl(PR_SCHED_CORE) cannot run here; reconcile_bench prices the cookie
// reads, about 0.2 us each). The VMs are real processes: this binary run as
// `qemu-system-x86_64 -name guest=vm-N` with --threads threads named
// "CPU n/KVM", so discovery finds them as it finds QEMU. Every VM is
// assigned a trust group of its own.
//
// Two ways to make the storm, because this 2-core machine cannot run 5 000
// real execs a second (about 1 800 with both cores spawning /bin/true, and
// then there is nothing left for the agent):
//  - connector: a child process spawns /bin/true at the rate; the agent
//    hears the real fork, exec and exit events of every one. The rate the
//    agent saw is printed.
//  - synthetic: a thread of this process hands the agent's listener, every
//    ProcConnectorEvents::kBatchInterval (as often as the connector's thread
//    takes events in a storm), the fork, exec and exit events that rate
//    would give,
//    through the connector's own DelayedExecClassifier, as the connector's
//    thread does. With --lifetime short each process exits a batch after
//    its exec, as `true`, `grep` or a health check does (the pid is
//    one no process has); with long it outlives the classifier's delay and
//    is a real, live, unrelated process, so each exec costs a real read of
//    its /proc/<pid>/cmdline. The thread stands in for the connector's
//    receive thread and is counted as agent CPU, without the recv calls:
//    compare connector and synthetic at 1 000/s for what those cost.
//
// Agent CPU is getrusage(RUSAGE_SELF) over the measured run: every thread
// of this process (the connector's, the loop's, the synthetic source's and
// an idle main thread), not the VMs, the spawner or its children, which
// are other processes. Printed, not asserted.
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "agent/cookie_reconciler.h"
#include "agent/reconcile_loop.h"
#include "discovery/exec_classifier.h"
#include "discovery/procfs_discovery.h"
#include "host/process_events.h"
#include "host/pseudo_fs.h"
#include "host/testing/core_sched_fake.h"
#include "glog/logging.h"

extern char** environ;

namespace cosched::agent {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kRoleVariable[] = "COSCHED_EXEC_STORM_ROLE";

// --- The other processes: this binary run under another role. -----------

// A VM stand-in: `threads` threads that block forever, named as QEMU names
// its vCPUs; dies with the benchmark.
[[noreturn]] void RunVm(int threads) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (int i = 0; i < threads; ++i) {
    std::thread([i] {
      const std::string name = "CPU " + std::to_string(i) + "/KVM";
      pthread_setname_np(pthread_self(), name.c_str());
      while (true) pause();
    }).detach();
  }
  while (true) pause();
}

// Spawns /bin/true `rate` times a second, in 1 ms steps, as fast as it can
// when it falls behind; its children are reaped by the kernel.
[[noreturn]] void RunSpawner(int rate) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGCHLD, SIG_IGN);
  char true_path[] = "/bin/true";
  char* argv[] = {true_path, nullptr};
  const auto start = Clock::now();
  long spawned = 0;
  while (true) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const long due = static_cast<long>(elapsed * rate);
    for (; spawned < due; ++spawned) {
      pid_t pid;
      if (posix_spawn(&pid, true_path, nullptr, nullptr, argv, environ) != 0) _exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// A process that only sleeps: the unrelated program that synthetic execs
// name.
[[noreturn]] void RunBystander() {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  while (true) pause();
}

pid_t SpawnSelf(const std::string& role, std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(std::string(kRoleVariable) + "=" + role);
  std::vector<char*> env;
  for (std::string& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), env.data()) != 0) {
    std::perror("posix_spawn");
    std::exit(1);
  }
  return pid;
}

std::vector<int> Tids(int pid) {
  host::LocalPseudoFs fs;
  std::vector<int> tids;
  auto names = fs.ListDirectory("/proc/" + std::to_string(pid) + "/task");
  if (!names.ok()) return tids;
  for (const std::string& n : *names) tids.push_back(std::atoi(n.c_str()));
  return tids;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// --- The agent. ------------------------------------------------------------

struct Counts {
  std::atomic<long> execs{0};
  std::atomic<long> lost{0};
  std::atomic<long> reads{0};  // synthetic: execs classified by a read
  std::mutex mu;
  long passes = 0;
  std::chrono::nanoseconds pass_time{0};
};

struct Figures {
  double execs_per_s = 0;
  double passes_per_s = 0;
  double cpu_percent = 0;
  double ms_per_pass = 0;
  double reads_per_s = -1;  // unknown for the connector
  long lost = 0;
};

class Host {
 public:
  Host(int vms, int threads) {
    for (int v = 0; v < vms; ++v) {
      vm_pids_.push_back(SpawnSelf(
          "vm:" + std::to_string(threads),
          {"qemu-system-x86_64", "-name", "guest=vm-" + std::to_string(v) + ",debug-threads=on",
           "-uuid", "00000000-0000-0000-0000-" + std::to_string(100000000000 + v)}));
    }
    for (int pid : vm_pids_) {
      while (static_cast<int>(Tids(pid).size()) < threads + 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      for (int tid : Tids(pid)) kernel_.AddTask(tid, pid);
    }
    bystander_ = SpawnSelf("bystander", {"cron-job"});
  }

  ~Host() {
    for (int pid : vm_pids_) kill(pid, SIGKILL);
    kill(bystander_, SIGKILL);
    for (int pid : vm_pids_) waitpid(pid, nullptr, 0);
    waitpid(bystander_, nullptr, 0);
  }

  host::FakeCoreSched& kernel() { return kernel_; }
  int bystander() const { return bystander_; }

 private:
  host::FakeCoreSched kernel_;
  std::vector<int> vm_pids_;
  int bystander_ = 0;
};

// One measured run: the agent's pipeline from start, `seconds` of storm at
// `rate` after one second of settling, and the figures of that span.
Figures Measure(Host& host, bool connector, bool long_lived, int rate, double seconds) {
  ReconcilerOptions reconciler_options;
  reconciler_options.probe.support = v1::CORE_SCHED_SUPPORT_SUPPORTED;
  CookieReconciler reconciler(&host.kernel(), reconciler_options);
  discovery::ProcfsDiscovery discovery(std::make_shared<host::LocalPseudoFs>());
  Counts counts;
  ReconcileLoopOptions options;  // the agent's defaults
  options.on_pass = [&counts](const PassRecord& pass) {
    std::lock_guard<std::mutex> lock(counts.mu);
    ++counts.passes;
    counts.pass_time += pass.duration;
  };
  ReconcileLoop loop(
      options, &discovery, &reconciler,
      [](const discovery::DiscoveredVm& vm) -> std::optional<v1::Assignment> {
        v1::Assignment a;
        a.set_vm_id(vm.vm_id);
        a.set_trust_group("t/vm/" + vm.vm_id);
        a.set_isolation(v1::ISOLATION_LEVEL_VM);
        return a;
      },
      nullptr);
  // Connector: the spawner's children, by their fork events (the
  // classifier drops most of their execs unread, so those cannot be
  // counted here). Synthetic: every exec made.
  std::atomic<int> spawner{0};
  host::ProcessEventListener listener = [&counts, &loop, &spawner](const host::ProcessEvent& event) {
    if (event.kind == host::ProcessEventKind::kFork && event.tgid != event.parent_tgid &&
        event.parent_tgid == spawner.load(std::memory_order_relaxed)) {
      counts.execs.fetch_add(1, std::memory_order_relaxed);
    }
    if (event.kind == host::ProcessEventKind::kLost) counts.lost.fetch_add(1, std::memory_order_relaxed);
    loop.NoteProcessEvent(event);
  };
  loop.Start();
  if (!loop.WaitForPasses(1, std::chrono::seconds(30))) {
    std::fprintf(stderr, "the first reconcile pass did not finish\n");
    std::exit(1);
  }

  host::ProcConnectorEvents events(
      discovery::DelayedExecStage(std::make_shared<host::LocalPseudoFs>(), "/proc"));
  std::atomic<bool> stop{false};
  std::thread synthetic;
  if (connector) {
    if (absl::Status started = events.Start(listener); !started.ok()) {
      std::fprintf(stderr, "%s\n", std::string(started.message()).c_str());
      std::exit(1);
    }
    spawner = SpawnSelf("spawner:" + std::to_string(rate), {"exec-storm"});
  } else {
    synthetic = std::thread([&stop, &listener, &counts, long_lived, rate,
                             bystander = host.bystander()] {
      discovery::DelayedExecClassifier execs(std::make_shared<host::LocalPseudoFs>(), "/proc",
                                             discovery::DelayedExecClassifier::kDefaultDelay,
                                             listener);
      const auto start = Clock::now();
      long sent = 0;
      int next_child = 1 << 22;  // pids no process has here
      std::vector<int> exiting;  // short-lived processes of the last tick
      while (!stop.load()) {
        const auto now = Clock::now();
        for (int pid : exiting) execs.Add(host::ProcessEvent{host::ProcessEventKind::kExit, pid, pid, 0, true, {}}, now);
        exiting.clear();
        const double elapsed = std::chrono::duration<double>(now - start).count();
        for (const long due = static_cast<long>(elapsed * rate); sent < due; ++sent) {
          const int child = next_child++;
          const int pid = long_lived ? bystander : child;
          execs.Add(host::ProcessEvent{host::ProcessEventKind::kFork, child, child, 1, true, {}}, now);
          execs.Add(host::ProcessEvent{host::ProcessEventKind::kExec, pid, pid, 0, true, {}}, now);
          counts.execs.fetch_add(1, std::memory_order_relaxed);
          if (!long_lived) exiting.push_back(child);
        }
        execs.Flush(now);
        counts.reads.store(execs.classified(), std::memory_order_relaxed);
        std::this_thread::sleep_for(host::ProcConnectorEvents::kBatchInterval);
      }
    });
  }

  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto snapshot = [&counts] {
    std::lock_guard<std::mutex> lock(counts.mu);
    return std::pair(counts.passes, counts.pass_time);
  };
  const auto [passes0, time0] = snapshot();
  const long execs0 = counts.execs.load();
  const long lost0 = counts.lost.load();
  const long reads0 = counts.reads.load();
  const double cpu0 = CpuSeconds();
  const auto wall0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
  const double cpu = CpuSeconds() - cpu0;
  const auto [passes1, time1] = snapshot();
  const long execs = counts.execs.load() - execs0;
  const long lost = counts.lost.load() - lost0;
  const long reads = counts.reads.load() - reads0;

  if (connector) {
    kill(spawner.load(), SIGKILL);
    waitpid(spawner.load(), nullptr, 0);
    events.Stop();
  } else {
    stop = true;
    synthetic.join();
  }
  loop.Stop();

  Figures f;
  f.execs_per_s = execs / wall;
  f.passes_per_s = (passes1 - passes0) / wall;
  f.cpu_percent = 100.0 * cpu / wall;
  f.ms_per_pass = passes1 > passes0
                      ? std::chrono::duration<double, std::milli>(time1 - time0).count() /
                            static_cast<double>(passes1 - passes0)
                      : 0;
  f.lost = lost;
  if (!connector) f.reads_per_s = reads / wall;
  return f;
}

std::vector<int> ParseRates(const std::string& text) {
  std::vector<int> rates;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) rates.push_back(std::atoi(text.substr(start, comma - start).c_str()));
    start = comma + 1;
  }
  return rates;
}

int Main(int argc, char** argv) {
  if (const char* role = std::getenv(kRoleVariable)) {
    const std::string r = role;
    if (r.rfind("vm:", 0) == 0) RunVm(std::atoi(r.c_str() + 3));
    if (r.rfind("spawner:", 0) == 0) RunSpawner(std::atoi(r.c_str() + 8));
    RunBystander();
  }
  CLI::App app{"cs-agent under exec storms: reconcile passes and agent CPU per second"};
  int vms = 50;
  int threads = 4;
  double seconds = 10;
  std::string connector_rates = "1000";
  std::string synthetic_rates = "1000,5000";
  std::string lifetimes = "short,long";
  app.add_option("--vms", vms, "VM stand-ins (real processes that look like QEMU)");
  app.add_option("--threads", threads, "vCPU threads per VM (besides its main thread)");
  app.add_option("--seconds", seconds, "length of each measured run");
  app.add_option("--connector-rates", connector_rates,
                 "execs/s of real /bin/true heard through the proc connector (comma-separated; "
                 "empty: none)");
  app.add_option("--synthetic-rates", synthetic_rates,
                 "execs/s handed to the agent's listener directly (comma-separated; empty: none)");
  app.add_option("--lifetime", lifetimes,
                 "synthetic processes: short (exit 1 ms after exec), long (outlive the "
                 "classifier's delay), or both: short,long");
  CLI11_PARSE(app, argc, argv);
  FLAGS_minloglevel = google::GLOG_WARNING;  // the pass lines would drown the table

  Host host(vms, threads);
  std::printf("%d VMs x %d threads; %.0f s per run; agent CPU in %% of one core\n", vms,
              threads + 1, seconds);
  std::printf("%-11s %8s %10s %10s %10s %10s %10s %6s\n", "source", "target", "execs/s",
              "reads/s", "passes/s", "agent_cpu%", "ms/pass", "lost");
  auto run = [&](bool connector, bool long_lived, int rate) {
    Figures f = Measure(host, connector, long_lived, rate, seconds);
    const std::string reads = f.reads_per_s < 0 ? "-" : std::to_string(std::lround(f.reads_per_s));
    std::printf("%-11s %8d %10.0f %10s %10.1f %10.2f %10.2f %6ld\n",
                connector ? "connector" : long_lived ? "synth-long" : "synth-short", rate,
                f.execs_per_s, reads.c_str(), f.passes_per_s, f.cpu_percent, f.ms_per_pass, f.lost);
    std::fflush(stdout);
  };
  for (int rate : ParseRates(connector_rates)) run(true, false, rate);
  for (const std::string& lifetime : {std::string("short"), std::string("long")}) {
    if (lifetimes.find(lifetime) == std::string::npos) continue;
    for (int rate : ParseRates(synthetic_rates)) run(false, lifetime == "long", rate);
  }
  return 0;
}

}  // namespace
}  // namespace cosched::agent

int main(int argc, char** argv) { return cosched::agent::Main(argc, argv); }
