// Internal to cosched_policy: the SMT simulator's engine, one host's CPUs,
// run queues and tasks stepped tick by tick, shared by simulator.cc (set-up,
// the tick loop, statistics), simulator_sched.cc (the fair scheduler, core
// scheduling and load balancing) and simulator_workload.cc (the workloads'
// bursts and sleeps and what a tick of execution achieves).
#ifndef COSCHED_POLICY_SIMULATOR_ENGINE_H_
#define COSCHED_POLICY_SIMULATOR_ENGINE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "policy/scenario.h"
#include "policy/simulator.h"

namespace cosched::policy::sim {

inline constexpr int kNone = -1;
inline constexpr double kForever = std::numeric_limits<double>::infinity();

enum class TaskState : uint8_t { kSleeping, kQueued, kRunning };

// Latency histogram in ticks: exact below 64 ticks, then 8 buckets per
// power of two (about 9% resolution).
class LatencyHistogram {
 public:
  static constexpr int kBuckets = 64 + 8 * 26;

  void Add(int64_t ticks) {
    ++counts_[Bucket(ticks)];
    ++total_;
  }
  void Merge(const LatencyHistogram& other) {
    for (int i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    total_ += other.total_;
  }
  // The lower bound of the bucket holding the q-quantile, in ticks.
  double Quantile(double q) const {
    if (total_ == 0) return 0;
    int64_t rank = static_cast<int64_t>(std::ceil(q * total_));
    int64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank && counts_[i] > 0) return LowerBound(i);
    }
    return LowerBound(kBuckets - 1);
  }

 private:
  static int Bucket(int64_t v) {
    if (v < 64) return static_cast<int>(std::max<int64_t>(v, 0));
    int log = 63 - __builtin_clzll(static_cast<uint64_t>(v));  // >= 6
    int sub = static_cast<int>((v >> (log - 3)) & 7);
    return std::min(kBuckets - 1, 64 + 8 * (log - 6) + sub);
  }
  static double LowerBound(int bucket) {
    if (bucket < 64) return bucket;
    int log = (bucket - 64) / 8 + 6;
    int sub = (bucket - 64) % 8;
    return std::ldexp(8 + sub, log - 3);
  }

  uint32_t counts_[kBuckets] = {};
  int64_t total_ = 0;
};

struct Task {
  int vm = 0;
  int cookie = 0;
  int group = 0;
  int tenant = 0;
  const Workload* workload = nullptr;
  bool avx = false;
  double share = 0.625;  // speed while the sibling is busy
  int mask = 0;          // index into Engine::masks_
  TaskState state = TaskState::kSleeping;
  int cpu = 0;           // queue it is on; the last CPU while sleeping
  double vruntime = 0;   // on `cpu`
  double lag = 0;        // vruntime - min_vruntime when it went to sleep
  double remaining = 0;  // work left in this burst, ms at full speed
  int64_t woke_tick = kNone;
  double next_release_ms = 0;  // periodic
  // The task's own random stream (SplitMix64): its bursts and sleeps are
  // the same whatever the layout, so two layouts' predictions differ by
  // what the layout does, not by which draws each task happened to get.
  uint64_t rng = 0;
};

struct Cpu {
  bool online = true;
  int curr = kNone;
  std::vector<int> queue;  // runnable, not running
  int64_t slice_end = 0;
  double min_vruntime = 0;
  bool resched = false;
  bool forced_idle = false;
  int64_t forced_since = 0;  // tick it last became forced idle
  int64_t idle_since = 0;  // tick its last task stopped running on it
  // min_vruntime when its core last started forcing a sibling idle.
  double min_vruntime_fi = 0;
};

struct VmStats {
  double work_ms = 0;
  int64_t requests = 0;
  int64_t on_cpu = 0;
  int64_t same = 0;
  int64_t idle = 0;
  int64_t foreign = 0;
  int64_t cross_tenant = 0;
  LatencyHistogram latency;
};

class Engine {
 public:
  Engine(const Scenario& scenario, std::vector<VmInstance> instances,
         const SimConfig& config, const SimParams& params, uint64_t seed);

  // Sets the run's length and puts every task to sleep until its start;
  // once, before Advance.
  void Start(double duration_s);
  // Runs ticks until `until` (at most the run's end).
  void Advance(int64_t until);
  // The statistics of the measured ticks run so far.
  SimResult Collect() const;
  int64_t now() const { return now_; }
  int64_t warmup_ticks() const { return warmup_ticks_; }
  int64_t total_ticks() const { return total_ticks_; }
  double tick_ms() const { return tick_; }

 private:
  // simulator.cc
  int AddMask(const std::vector<int>& pin, std::map<std::vector<int>, int>* ids);

  // 53 random bits in [0, 1) from the stream of `t`.
  static double Uniform(Task& t) {
    uint64_t z = (t.rng += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  }
  static double Exponential(Task& t, double mean) {
    return -mean * std::log(1.0 - Uniform(t));
  }
  int64_t TicksFromMs(double ms) const {
    return std::max<int64_t>(0, std::llround(ms / tick_));
  }
  int Sibling(int cpu) const { return cpu < cores_ ? cpu + cores_ : cpu - cores_; }
  int CoreOf(int cpu) const { return cpu % cores_; }
  bool Allowed(const Task& t, int cpu) const { return allowed_[t.mask][cpu] != 0; }
  int NrRunning(int c) const { return nr_running_[c]; }
  void AddRunnable(int c, int delta) {
    const uint64_t bit = uint64_t{1} << (c % 64);
    nr_running_[c] += delta;
    one_bits_[c / 64] = nr_running_[c] == 1 ? one_bits_[c / 64] | bit : one_bits_[c / 64] & ~bit;
    two_bits_[c / 64] = nr_running_[c] >= 2 ? two_bits_[c / 64] | bit : two_bits_[c / 64] & ~bit;
  }
  void SetCurr(int c, int task) {
    const uint64_t bit = uint64_t{1} << (c % 64);
    cpus_[c].curr = task;
    run_bits_[c / 64] = task != kNone ? run_bits_[c / 64] | bit : run_bits_[c / 64] & ~bit;
  }
  void SetForcedIdle(int c, bool forced) {
    const uint64_t bit = uint64_t{1} << (c % 64);
    cpus_[c].forced_idle = forced;
    forced_bits_[c / 64] = forced ? forced_bits_[c / 64] | bit : forced_bits_[c / 64] & ~bit;
  }
  bool CpuIdle(int c) const { return nr_running_[c] == 0; }
  bool CoreIdle(int c) const {
    int s = Sibling(c);
    return CpuIdle(c) && (!cpus_[s].online || CpuIdle(s));
  }
  // Whether `t` may run on `c` now without forcing its sibling idle.
  bool CookieFits(const Task& t, int c) const {
    if (mode_ != SmtMode::kCoreSched) return true;
    int other = cpus_[Sibling(c)].curr;
    return other == kNone || tasks_[other].cookie == t.cookie;
  }

  // simulator_sched.cc
  void Migrate(int task, int to);
  void Enqueue(int task, int c);
  void RemoveFromQueue(int c, size_t index);
  void StartOnCpu(int c, size_t index);
  void Preempt(int c);
  // Whether `c` must pick a task now (the tick loop asks every CPU).
  bool NeedsPick(int c) const {
    if (nr_running_[c] == 0) return false;
    const Cpu& cpu = cpus_[c];
    if (cpu.curr == kNone) {  // and a task is queued
      // A forced-idle CPU picks again when its sibling reschedules or goes
      // idle (either makes the core pick) or at the scheduler tick.
      if (cpu.forced_idle) return balance_tick_ || cpus_[Sibling(c)].curr == kNone;
      return true;
    }
    return cpu.resched || now_ >= cpu.slice_end;
  }
  int BestInQueue(int c, int cookie) const;
  void UpdateMinVruntime(int c);
  void PickCpu(int c);
  void PickCore(int core);
  int SelectCpu(const Task& t);
  void PullToIdle();
  void SpreadToIdleCores();
  void BalanceQueues();

  // simulator_workload.cc
  void StartBurst(Task& t);
  void FinishBurst(int task);
  void ProcessWakeups();
  void Execute();
  void ExecuteOn(int c);

  const Scenario& scenario_;
  const std::vector<VmInstance> instances_;
  const SimParams params_;
  const SmtMode mode_;
  const int cores_;
  const uint64_t seed_;
  double tick_ = 0.25;
  size_t scan_limit_ = 4;
  bool cookie_aware_ = true;
  int64_t slice_min_ticks_ = 1;
  double latency_ticks_ = 1;  // sched_latency_ms in ticks
  int64_t hysteresis_ticks_ = 0;
  int64_t balance_ticks_ = 1;
  int64_t warmup_ticks_ = 0;
  int64_t total_ticks_ = 0;
  int64_t now_ = 0;
  bool measuring_ = false;
  bool balance_tick_ = false;  // now_ is a multiple of balance_ticks_
  std::vector<Cpu> cpus_;
  // Per CPU: its queue's length plus one if it runs a task. Kept apart
  // from Cpu, in one cache line or two, for the wake-up scan and balancing.
  std::vector<int> nr_running_;
  // Bit c of word c / 64: CPU c has one runnable task; two or more; is
  // forced idle; runs a task. PullToIdle lists the CPUs it may take tasks
  // from with them, Execute the CPUs that run.
  std::vector<uint64_t> run_bits_;
  std::vector<uint64_t> one_bits_;
  std::vector<uint64_t> two_bits_;
  std::vector<uint64_t> forced_bits_;
  std::vector<int> running_;
  std::vector<int> sources_;
  std::vector<Task> tasks_;
  std::vector<std::vector<int>> masks_;
  std::vector<std::vector<char>> allowed_;
  // Per mask and CPU: the index in the mask of the first allowed CPU at or
  // after it (0 past the end), where a wake-up's scan starts.
  std::vector<std::vector<int>> scan_start_;
  std::vector<int> pullers_;
  // Bitsets of the CPUs whose task stopped (idle_since or forced_since set
  // to the tick) in even and odd ticks; they may have run again since.
  std::vector<uint64_t> stopped_[2];
  void MarkStopped(int c, int64_t tick) {
    stopped_[tick & 1][c / 64] |= uint64_t{1} << (c % 64);
  }
  std::vector<int64_t> core_avx_until_;
  std::vector<char> core_forced_;
  std::vector<VmStats> stats_;
  // Per VM, for the vCPU coupling: whether its vCPUs wait for each other,
  // and how many of them are queued (runnable, not running) now.
  std::vector<char> vm_coupled_;
  std::vector<int> vm_queued_;
  // Sleeping tasks by wake-up tick: a ring of buckets for the next
  // kWheelTicks ticks (A1 wakes ~30 000 tasks per simulated second; a heap
  // was a tenth of the run time), later ones in a heap until they are
  // near. Within a tick tasks wake in task order.
  static constexpr int64_t kWheelTicks = 4096;
  void AddWakeup(int64_t tick, int task);
  std::vector<std::vector<int>> wheel_;
  using Wakeup = std::pair<int64_t, int>;
  std::priority_queue<Wakeup, std::vector<Wakeup>, std::greater<Wakeup>> later_;
  std::vector<int> waking_;
  int64_t queued_ = 0;
  std::vector<int> queued_per_cookie_;
  int64_t forced_idle_ticks_ = 0;
  int64_t switches_ = 0;
};

}  // namespace cosched::policy::sim

#endif  // COSCHED_POLICY_SIMULATOR_ENGINE_H_
