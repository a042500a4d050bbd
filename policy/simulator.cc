#include "policy/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cosched::policy {
namespace {

constexpr int kNone = -1;
constexpr double kForever = std::numeric_limits<double>::infinity();

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
};

struct Cpu {
  bool online = true;
  int curr = kNone;
  std::vector<int> queue;  // runnable, not running
  int64_t slice_end = 0;
  double min_vruntime = 0;
  bool resched = false;
  bool forced_idle = false;
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
         const SimConfig& config, const SimParams& params, uint64_t seed)
      : scenario_(scenario),
        instances_(std::move(instances)),
        params_(params),
        mode_(config.mode),
        cores_(scenario.cores),
        rng_(seed) {
    cpus_.resize(2 * cores_);
    running_.assign(2 * cores_, kNone);
    if (mode_ == SmtMode::kNoSmt) {
      for (int c = cores_; c < 2 * cores_; ++c) cpus_[c].online = false;
    }
    for (auto& cpu : cpus_) cpu.queue.reserve(16);
    tick_ = params_.tick_ms;
    cookie_aware_ = params_.cookie_aware_wakeup;
    scan_limit_ = static_cast<size_t>(std::max(1, params_.wake_scan_cpus));
    slice_min_ticks_ = std::max<int64_t>(1, std::llround(params_.min_granularity_ms / tick_));
    hysteresis_ticks_ = std::llround(params_.avx_hysteresis_ms / tick_);
    balance_ticks_ = std::max<int64_t>(1, std::llround(params_.balance_interval_ms / tick_));
    core_avx_until_.assign(cores_, -1);
    core_forced_.assign(cores_, 0);
    stats_.resize(instances_.size());

    std::map<std::string, int> tenant_ids;
    std::map<int, int> cookie_ids;
    std::map<std::vector<int>, int> mask_ids;
    AddMask({}, &mask_ids);  // mask 0: every online CPU
    for (size_t v = 0; v < instances_.size(); ++v) {
      const VmInstance& vm = instances_[v];
      int tenant = tenant_ids.emplace(vm.tenant, tenant_ids.size()).first->second;
      const std::vector<int>& pin =
          config.pin_cpus.empty() ? vm.pin_cpus : config.pin_cpus[v];
      int mask = AddMask(pin, &mask_ids);
      for (int i = 0; i < vm.vcpus; ++i) {
        Task t;
        t.vm = static_cast<int>(v);
        t.cookie = config.cookie.empty() ? static_cast<int>(v) + 1 : config.cookie[v];
        t.group = config.cookie.empty() || config.cookie[v] == 0
                      ? -1 - static_cast<int>(v)  // untagged: its own VM only
                      : config.cookie[v];
        if (mode_ != SmtMode::kCoreSched) t.cookie = 0;
        // Dense cookie numbers, for the per-cookie queue counts.
        t.cookie = cookie_ids.emplace(t.cookie, cookie_ids.size()).first->second;
        t.tenant = tenant;
        t.workload = &vm.workload;
        t.avx = vm.workload.kind == WorkloadKind::kAvx;
        t.share = t.avx ? params_.smt_share_avx
                  : vm.workload.kind == WorkloadKind::kInteractive
                      ? params_.smt_share_interactive
                      : params_.smt_share_cpu;
        t.mask = mask;
        const std::vector<int>& allowed = masks_[mask];
        t.cpu = allowed[(tasks_.size() * 7) % allowed.size()];
        tasks_.push_back(t);
      }
    }
    queued_per_cookie_.assign(cookie_ids.size(), 0);
  }

  SimResult Run(double duration_s) {
    const int64_t total_ticks =
        std::max<int64_t>(1, std::llround(duration_s * 1000 / tick_));
    warmup_ticks_ = std::min<int64_t>(std::llround(1000 / tick_),
                                      std::llround(total_ticks * params_.warmup_share));
    // Everyone starts asleep and wakes in the first 10 ms (periodic tasks at
    // a random phase of their period), so start-up order does not matter.
    for (size_t i = 0; i < tasks_.size(); ++i) {
      Task& t = tasks_[i];
      double start_ms = Uniform() * 10;
      if (t.workload->kind == WorkloadKind::kPeriodic) {
        start_ms = Uniform() * t.workload->period_ms;
        t.next_release_ms = start_ms;
      }
      wakeups_.push({TicksFromMs(start_ms), static_cast<int>(i)});
    }
    for (now_ = 0; now_ < total_ticks; ++now_) {
      measuring_ = now_ >= warmup_ticks_;
      ProcessWakeups();
      if (mode_ == SmtMode::kCoreSched) {
        for (int core = 0; core < cores_; ++core) PickCore(core);
      } else {
        for (int c = 0; c < 2 * cores_; ++c) {
          if (cpus_[c].online && NeedsPick(c)) PickCpu(c);
        }
      }
      if (queued_ > 0) PullToIdle();
      Execute();
      if (now_ % balance_ticks_ == 0) {
        if (mode_ != SmtMode::kNoSmt) SpreadToIdleCores();
        BalanceQueues();
      }
    }
    return Collect(total_ticks);
  }

 private:
  int AddMask(const std::vector<int>& pin, std::map<std::vector<int>, int>* ids) {
    std::vector<int> online;
    if (pin.empty()) {
      for (int c = 0; c < 2 * cores_; ++c) {
        if (cpus_[c].online) online.push_back(c);
      }
    } else {
      for (int c : pin) {
        int cpu = cpus_[c].online ? c : c % cores_;  // nosmt: the core's CPU
        online.push_back(cpu);
      }
      std::sort(online.begin(), online.end());
      online.erase(std::unique(online.begin(), online.end()), online.end());
    }
    auto [it, inserted] = ids->emplace(online, masks_.size());
    if (inserted) {
      std::vector<char> allowed(2 * cores_, 0);
      for (int c : online) allowed[c] = 1;
      masks_.push_back(online);
      allowed_.push_back(std::move(allowed));
    }
    return it->second;
  }

  // 53 random bits in [0, 1).
  double Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  double Exponential(double mean) {
    return -mean * std::log(1.0 - Uniform());
  }
  int64_t TicksFromMs(double ms) const {
    return std::max<int64_t>(0, std::llround(ms / tick_));
  }
  int Sibling(int cpu) const { return cpu < cores_ ? cpu + cores_ : cpu - cores_; }
  int CoreOf(int cpu) const { return cpu % cores_; }
  bool Allowed(const Task& t, int cpu) const { return allowed_[t.mask][cpu] != 0; }
  int NrRunning(int c) const {
    return static_cast<int>(cpus_[c].queue.size()) + (cpus_[c].curr != kNone);
  }
  bool CpuIdle(int c) const { return cpus_[c].curr == kNone && cpus_[c].queue.empty(); }
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

  void Migrate(int task, int to) {
    Task& t = tasks_[task];
    t.vruntime += cpus_[to].min_vruntime - cpus_[t.cpu].min_vruntime;
    t.cpu = to;
  }

  void Enqueue(int task, int c) {
    tasks_[task].state = TaskState::kQueued;
    cpus_[c].queue.push_back(task);
    ++queued_;
    ++queued_per_cookie_[tasks_[task].cookie];
  }

  void RemoveFromQueue(int c, size_t index) {
    auto& q = cpus_[c].queue;
    --queued_per_cookie_[tasks_[q[index]].cookie];
    q[index] = q.back();
    q.pop_back();
    --queued_;
  }

  // Starts `task` on `c` (it must be in c's queue at `index`).
  void StartOnCpu(int c, size_t index) {
    Cpu& cpu = cpus_[c];
    int task = cpu.queue[index];
    RemoveFromQueue(c, index);
    Task& t = tasks_[task];
    t.state = TaskState::kRunning;
    cpu.curr = task;
    cpu.resched = false;
    cpu.forced_idle = false;
    int64_t slice = std::llround(params_.sched_latency_ms / tick_ / (NrRunning(c)));
    cpu.slice_end = now_ + std::max(slice_min_ticks_, slice);
    if (t.woke_tick != kNone) {
      if (measuring_) stats_[t.vm].latency.Add(now_ - t.woke_tick);
      t.woke_tick = kNone;
    }
    ++switches_;
  }

  // Puts the running task of `c` back in its queue.
  void Preempt(int c) {
    Cpu& cpu = cpus_[c];
    if (cpu.curr == kNone) return;
    Enqueue(cpu.curr, c);
    cpu.curr = kNone;
    cpu.idle_since = now_;
  }

  bool NeedsPick(int c) const {
    const Cpu& cpu = cpus_[c];
    if (cpu.curr == kNone) {
      // A forced-idle CPU picks again when its sibling reschedules (which
      // makes the core pick) or at the scheduler tick.
      if (cpu.forced_idle) return !cpu.queue.empty() && now_ % balance_ticks_ == 0;
      return !cpu.queue.empty();
    }
    return cpu.resched || now_ >= cpu.slice_end;
  }

  // Index in c's queue of the task with the least vruntime (and `cookie`,
  // unless it is kNone); kNone when there is none.
  int BestInQueue(int c, int cookie) const {
    const auto& q = cpus_[c].queue;
    int best = kNone;
    for (size_t i = 0; i < q.size(); ++i) {
      const Task& t = tasks_[q[i]];
      if (cookie != kNone && t.cookie != cookie) continue;
      if (best == kNone || t.vruntime < tasks_[q[best]].vruntime) {
        best = static_cast<int>(i);
      }
    }
    return best;
  }

  void UpdateMinVruntime(int c) {
    Cpu& cpu = cpus_[c];
    double low = kForever;
    if (cpu.curr != kNone) low = tasks_[cpu.curr].vruntime;
    for (int task : cpu.queue) low = std::min(low, tasks_[task].vruntime);
    if (low != kForever) cpu.min_vruntime = std::max(cpu.min_vruntime, low);
  }

  void PickCpu(int c) {
    Preempt(c);
    UpdateMinVruntime(c);
    int best = BestInQueue(c, kNone);
    if (best != kNone) StartOnCpu(c, best);
  }

  // Core-wide pick under core scheduling: the task that is most behind its
  // fair share decides the core's cookie; a running task keeps the core
  // against a challenger of another cookie unless the challenger is more
  // than a wake-up granularity behind it (CFS's rule for preemption).
  void PickCore(int core) {
    const int a = core;
    const int b = core + cores_;
    const bool need_a = NeedsPick(a);
    const bool need_b = NeedsPick(b);
    if (!need_a && !need_b) return;
    if (need_a) Preempt(a);
    if (need_b) Preempt(b);
    UpdateMinVruntime(a);
    UpdateMinVruntime(b);
    struct Candidate {
      int task = kNone;
      double lag = 0;  // vruntime relative to its CPU's min_vruntime
      bool incumbent = false;
    };
    auto candidate = [&](int c, bool need) {
      Candidate cand;
      if (!need) {
        cand.task = cpus_[c].curr;
        cand.incumbent = cand.task != kNone;
      } else {
        int best = BestInQueue(c, kNone);
        if (best != kNone) cand.task = cpus_[c].queue[best];
      }
      if (cand.task != kNone) {
        // Across siblings, vruntimes compare against the snapshot taken
        // when the core started forcing idle, so that a task kept waiting
        // by the other cookie gains priority (Linux's fair forced idle).
        const double base = core_forced_[core] ? cpus_[c].min_vruntime_fi
                                               : cpus_[c].min_vruntime;
        cand.lag = tasks_[cand.task].vruntime - base;
      }
      return cand;
    };
    Candidate ca = candidate(a, need_a);
    Candidate cb = candidate(b, need_b);
    int cookie;
    if (ca.task == kNone && cb.task == kNone) return;
    if (ca.task == kNone) {
      cookie = tasks_[cb.task].cookie;
    } else if (cb.task == kNone) {
      cookie = tasks_[ca.task].cookie;
    } else if (tasks_[ca.task].cookie == tasks_[cb.task].cookie) {
      cookie = tasks_[ca.task].cookie;
    } else {
      const double gran = params_.wakeup_granularity_ms;
      bool a_wins;
      if (ca.incumbent) {
        a_wins = !(cb.lag + gran < ca.lag);
      } else if (cb.incumbent) {
        a_wins = ca.lag + gran < cb.lag;
      } else {
        a_wins = ca.lag <= cb.lag;
      }
      cookie = tasks_[a_wins ? ca.task : cb.task].cookie;
    }
    bool forcing = false;
    for (int c : {a, b}) {
      Cpu& cpu = cpus_[c];
      if (cpu.curr != kNone) {
        if (tasks_[cpu.curr].cookie == cookie) continue;
        Preempt(c);
      }
      int best = BestInQueue(c, cookie);
      if (best != kNone) {
        StartOnCpu(c, best);
      } else {
        cpu.forced_idle = !cpu.queue.empty();
        forcing = forcing || cpu.forced_idle;
      }
    }
    if (forcing && !core_forced_[core]) {
      cpus_[a].min_vruntime_fi = cpus_[a].min_vruntime;
      cpus_[b].min_vruntime_fi = cpus_[b].min_vruntime;
    }
    core_forced_[core] = forcing;
  }

  // Wake-up placement, like select_idle_sibling(): the previous CPU if its
  // core is idle, else the first whole idle core, else an idle CPU whose
  // sibling runs a matching cookie, scanning at most wake_scan_cpus CPUs
  // from the previous one; else stay on the previous CPU.
  int SelectCpu(const Task& t) {
    const std::vector<int>& allowed = masks_[t.mask];
    int prev = Allowed(t, t.cpu) ? t.cpu : allowed[0];
    if (CoreIdle(prev)) return prev;
    size_t start = std::lower_bound(allowed.begin(), allowed.end(), prev) - allowed.begin();
    const size_t n = allowed.size();
    const size_t limit = std::min(n, scan_limit_);
    int idle_fit = kNone;
    for (size_t i = 0; i < limit; ++i) {
      int c = allowed[(start + i) % n];
      if (!CpuIdle(c)) continue;
      if (CoreIdle(c)) return c;
      if (idle_fit == kNone && (!cookie_aware_ || CookieFits(t, c))) idle_fit = c;
    }
    if (CpuIdle(prev) && (!cookie_aware_ || CookieFits(t, prev))) return prev;
    if (idle_fit != kNone) return idle_fit;
    return prev;
  }

  void StartBurst(Task& t) {
    const Workload& w = *t.workload;
    switch (w.kind) {
      case WorkloadKind::kCpu:
      case WorkloadKind::kAvx:
        t.remaining = w.util >= 1.0 ? kForever : Exponential(w.burst_ms);
        break;
      case WorkloadKind::kPeriodic:
        t.remaining += w.burst_ms;
        t.next_release_ms += w.period_ms;
        break;
      case WorkloadKind::kInteractive:
        t.remaining = Exponential(w.work_ms);
        break;
    }
  }

  // The burst of `task` is done: count it and put the task to sleep, or
  // start the next burst at once.
  void FinishBurst(int task) {
    Task& t = tasks_[task];
    const Workload& w = *t.workload;
    if (measuring_ && w.kind != WorkloadKind::kCpu && w.kind != WorkloadKind::kAvx) {
      ++stats_[t.vm].requests;
    }
    double sleep_ms = 0;
    switch (w.kind) {
      case WorkloadKind::kCpu:
      case WorkloadKind::kAvx:
        sleep_ms = Exponential(w.burst_ms * (1 - w.util) / w.util);
        break;
      case WorkloadKind::kPeriodic: {
        double now_ms = (now_ + 1) * tick_;
        if (t.next_release_ms <= now_ms) {  // behind: the next one is due
          t.remaining = 0;
          StartBurst(t);
          return;
        }
        sleep_ms = t.next_release_ms - now_ms + Uniform() * w.jitter * w.period_ms;
        break;
      }
      case WorkloadKind::kInteractive:
        sleep_ms = Exponential(w.think_ms);
        break;
    }
    Cpu& cpu = cpus_[t.cpu];
    cpu.curr = kNone;
    cpu.idle_since = now_ + 1;
    t.state = TaskState::kSleeping;
    t.lag = t.vruntime - cpu.min_vruntime;
    t.remaining = 0;
    wakeups_.push({now_ + 1 + TicksFromMs(sleep_ms), task});
  }

  void ProcessWakeups() {
    const double credit = -params_.sched_latency_ms / 2;
    while (!wakeups_.empty() && wakeups_.top().first <= now_) {
      int task = wakeups_.top().second;
      wakeups_.pop();
      Task& t = tasks_[task];
      StartBurst(t);
      int c = SelectCpu(t);
      t.cpu = c;
      Cpu& cpu = cpus_[c];
      t.vruntime = cpu.min_vruntime + std::max(t.lag, credit);
      t.woke_tick = now_;
      Enqueue(task, c);
      if (cpu.curr != kNone &&
          tasks_[cpu.curr].vruntime - t.vruntime > params_.wakeup_granularity_ms) {
        cpu.resched = true;
      }
    }
  }

  // Idle CPUs take a waiting task from the busiest CPU that has one they
  // may run; under core scheduling only one whose cookie matches what the
  // sibling runs (the kernel's cookie steal for forced-idle siblings).
  void PullToIdle() {
    const bool periodic = now_ % balance_ticks_ == 0;
    // A CPU with one waiting task and nothing running picks it itself,
    // unless it is forced idle: only the others give tasks away.
    sources_.clear();
    for (int s = 0; s < 2 * cores_; ++s) {
      if (!cpus_[s].queue.empty() && (NrRunning(s) >= 2 || cpus_[s].forced_idle)) {
        sources_.push_back(s);
      }
    }
    if (sources_.empty()) return;
    for (int c = 0; c < 2 * cores_ && queued_ > 0; ++c) {
      Cpu& cpu = cpus_[c];
      if (!cpu.online || cpu.curr != kNone) continue;
      // A CPU pulls when it has just gone idle (newidle balance) or while
      // it is forced idle (the kernel's cookie steal), else only at the
      // balance tick (nohz idle balance).
      if (!periodic && !cpu.forced_idle && cpu.idle_since != now_) continue;
      if (!cpu.queue.empty() && !cpu.forced_idle) continue;
      int want = kNone;
      if (mode_ == SmtMode::kCoreSched && (cookie_aware_ || cpu.forced_idle)) {
        int other = cpus_[Sibling(c)].curr;
        if (other != kNone) want = tasks_[other].cookie;
      }
      if (want != kNone && queued_per_cookie_[want] == 0) continue;
      int best_cpu = kNone;
      int best_index = kNone;
      int best_load = 0;
      for (int s : sources_) {
        if (s == c || cpus_[s].queue.empty()) continue;
        int load = NrRunning(s);
        if (load <= best_load) continue;
        const auto& q = cpus_[s].queue;
        for (size_t i = 0; i < q.size(); ++i) {
          const Task& t = tasks_[q[i]];
          if (!Allowed(t, c) || (want != kNone && t.cookie != want)) continue;
          best_cpu = s;
          best_index = static_cast<int>(i);
          best_load = load;
          break;
        }
      }
      if (best_cpu == kNone) continue;
      int task = cpus_[best_cpu].queue[best_index];
      RemoveFromQueue(best_cpu, best_index);
      Migrate(task, c);
      Enqueue(task, c);
      // Under core scheduling a task of another cookie waits for the next
      // core-wide pick.
      if (CookieFits(tasks_[task], c)) StartOnCpu(c, cpu.queue.size() - 1);
    }
  }

  void Execute() {
    // Speeds depend on what both siblings ran during this tick, also when
    // one of them finishes its burst in it.
    for (int c = 0; c < 2 * cores_; ++c) running_[c] = cpus_[c].curr;
    for (int c = 0; c < 2 * cores_; ++c) {
      Cpu& cpu = cpus_[c];
      if (!cpu.online) continue;
      if (cpu.curr == kNone) {
        if (measuring_ && cpu.forced_idle && !cpu.queue.empty()) ++forced_idle_ticks_;
        continue;
      }
      const int task = cpu.curr;
      Task& t = tasks_[task];
      const int sib = Sibling(c);
      const int other = cpus_[sib].online ? running_[sib] : kNone;
      const int core = CoreOf(c);
      double speed = other == kNone ? 1.0 : t.share;
      if (!t.avx && (core_avx_until_[core] >= now_ ||
                     (other != kNone && tasks_[other].avx))) {
        speed *= params_.avx_clock;
      }
      double work = std::min(t.remaining, tick_ * speed);
      t.remaining -= work;
      t.vruntime += tick_;
      if (cpu.queue.empty()) cpu.min_vruntime = std::max(cpu.min_vruntime, t.vruntime);
      if (t.avx) core_avx_until_[core] = now_ + hysteresis_ticks_;
      if (measuring_) {
        VmStats& s = stats_[t.vm];
        s.work_ms += work;
        ++s.on_cpu;
        if (other == kNone) {
          ++s.idle;
        } else {
          const Task& o = tasks_[other];
          if (o.vm == t.vm || (t.group >= 0 && o.group == t.group)) {
            ++s.same;
          } else {
            ++s.foreign;
          }
          if (o.tenant != t.tenant) ++s.cross_tenant;
        }
      }
      if (t.remaining <= 1e-9) FinishBurst(task);
    }
  }

  // Load balancing between cores: a whole idle core takes a running task
  // from a core where both siblings are busy, so that busy threads spread
  // over cores before they pair up (what the kernel's SMT domain does).
  void SpreadToIdleCores() {
    int start = static_cast<int>((now_ / balance_ticks_) % cores_);
    int donor = 0;
    for (int i = 0; i < cores_; ++i) {
      int idle_core = (start + i) % cores_;
      if (!CoreIdle(idle_core)) continue;
      for (; donor < cores_; ++donor) {
        int a = donor;
        int b = donor + cores_;
        if (cpus_[a].curr == kNone || cpus_[b].curr == kNone) continue;
        int moved = kNone;
        for (int c : {b, a}) {
          if (Allowed(tasks_[cpus_[c].curr], idle_core)) {
            moved = c;
            break;
          }
        }
        if (moved == kNone) continue;
        int task = cpus_[moved].curr;
        Preempt(moved);
        auto& q = cpus_[moved].queue;
        RemoveFromQueue(moved, std::find(q.begin(), q.end(), task) - q.begin());
        Migrate(task, idle_core);
        Enqueue(task, idle_core);
        StartOnCpu(idle_core, cpus_[idle_core].queue.size() - 1);
        ++donor;
        break;
      }
      if (donor >= cores_) break;
    }
  }

  // Moves waiting tasks from the CPU with the most runnable tasks to the
  // one with the fewest while they differ by two or more.
  void BalanceQueues() {
    for (int round = 0; round < 2 * cores_; ++round) {
      int busiest = kNone;
      int idlest = kNone;
      for (int c = 0; c < 2 * cores_; ++c) {
        if (!cpus_[c].online) continue;
        if (busiest == kNone || NrRunning(c) > NrRunning(busiest)) busiest = c;
        if (idlest == kNone || NrRunning(c) < NrRunning(idlest)) idlest = c;
      }
      if (busiest == kNone || NrRunning(busiest) - NrRunning(idlest) < 2) return;
      auto& q = cpus_[busiest].queue;
      size_t i = 0;
      while (i < q.size() && !Allowed(tasks_[q[i]], idlest)) ++i;
      if (i == q.size()) return;  // pinned elsewhere: leave it
      int task = q[i];
      RemoveFromQueue(busiest, i);
      Migrate(task, idlest);
      Enqueue(task, idlest);
    }
  }

  SimResult Collect(int64_t total_ticks) {
    SimResult r;
    const int64_t measured = total_ticks - warmup_ticks_;
    r.simulated_s = measured * tick_ / 1000;
    int64_t on_cpu = 0, same = 0, idle = 0, foreign = 0, cross = 0;
    LatencyHistogram all;
    for (size_t v = 0; v < instances_.size(); ++v) {
      const VmStats& s = stats_[v];
      VmSimResult vm;
      vm.name = instances_[v].name;
      vm.tenant = instances_[v].tenant;
      vm.measure = instances_[v].measure;
      vm.throughput = s.work_ms / (measured * tick_);
      vm.requests_per_s = s.requests / r.simulated_s;
      double denom = std::max<int64_t>(1, s.on_cpu);
      vm.same_pct = 100.0 * s.same / denom;
      vm.idle_pct = 100.0 * s.idle / denom;
      vm.foreign_pct = 100.0 * s.foreign / denom;
      vm.cross_tenant_pct = 100.0 * s.cross_tenant / denom;
      vm.p99_wakeup_latency_ms = s.latency.Quantile(0.99) * tick_;
      r.total_throughput += vm.throughput;
      if (vm.measure) r.measured_throughput += vm.throughput;
      on_cpu += s.on_cpu;
      same += s.same;
      idle += s.idle;
      foreign += s.foreign;
      cross += s.cross_tenant;
      all.Merge(s.latency);
      r.vms.push_back(std::move(vm));
    }
    double denom = std::max<int64_t>(1, on_cpu);
    r.same_pct = 100.0 * same / denom;
    r.idle_pct = 100.0 * idle / denom;
    r.foreign_pct = 100.0 * foreign / denom;
    r.cross_tenant_pct = 100.0 * cross / denom;
    int online = 0;
    for (const Cpu& cpu : cpus_) online += cpu.online;
    r.forced_idle_pct = 100.0 * forced_idle_ticks_ / std::max<int64_t>(1, online * measured);
    r.p50_wakeup_latency_ms = all.Quantile(0.50) * tick_;
    r.p99_wakeup_latency_ms = all.Quantile(0.99) * tick_;
    r.context_switches = switches_;
    return r;
  }

  const Scenario& scenario_;
  const std::vector<VmInstance> instances_;
  const SimParams params_;
  const SmtMode mode_;
  const int cores_;
  std::mt19937_64 rng_;
  double tick_ = 0.25;
  size_t scan_limit_ = 4;
  bool cookie_aware_ = true;
  int64_t slice_min_ticks_ = 1;
  int64_t hysteresis_ticks_ = 0;
  int64_t balance_ticks_ = 1;
  int64_t warmup_ticks_ = 0;
  int64_t now_ = 0;
  bool measuring_ = false;
  std::vector<Cpu> cpus_;
  std::vector<int> running_;
  std::vector<int> sources_;
  std::vector<Task> tasks_;
  std::vector<std::vector<int>> masks_;
  std::vector<std::vector<char>> allowed_;
  std::vector<int64_t> core_avx_until_;
  std::vector<char> core_forced_;
  std::vector<VmStats> stats_;
  using Wakeup = std::pair<int64_t, int>;
  std::priority_queue<Wakeup, std::vector<Wakeup>, std::greater<Wakeup>> wakeups_;
  int64_t queued_ = 0;
  std::vector<int> queued_per_cookie_;
  int64_t forced_idle_ticks_ = 0;
  int64_t switches_ = 0;
};

}  // namespace

absl::StatusOr<SimResult> Simulate(const Scenario& scenario,
                                   const SimConfig& config,
                                   const SimParams& params, const SimRun& run) {
  std::vector<VmInstance> instances = ExpandInstances(scenario);
  if (!config.cookie.empty() && config.cookie.size() != instances.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.cookie has ", config.cookie.size(),
                     " entries for ", instances.size(), " VMs"));
  }
  if (!config.pin_cpus.empty() && config.pin_cpus.size() != instances.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.pin_cpus has ", config.pin_cpus.size(),
                     " entries for ", instances.size(), " VMs"));
  }
  const int cpus = 2 * scenario.cores;
  for (size_t v = 0; v < instances.size(); ++v) {
    const std::vector<int>& pin =
        config.pin_cpus.empty() ? instances[v].pin_cpus : config.pin_cpus[v];
    for (int c : pin) {
      if (c < 0 || c >= cpus) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the pin of VM '", instances[v].name, "' names CPU ", c,
            ", but the host has CPUs 0-", cpus - 1));
      }
    }
  }
  if (params.tick_ms <= 0) {
    return absl::InvalidArgumentError("params.tick_ms must be positive");
  }
  double duration_s = run.duration_s.value_or(scenario.duration_s);
  if (!(duration_s > 0)) {
    return absl::InvalidArgumentError("duration_s must be positive");
  }
  Engine engine(scenario, std::move(instances), config, params,
                run.seed.value_or(scenario.seed));
  return engine.Run(duration_s);
}

}  // namespace cosched::policy
