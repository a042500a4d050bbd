// The simulated scheduler: CFS run queues per CPU, the core-wide pick of
// core scheduling, wake-up placement, and load balancing (idle pulls,
// spreading over idle cores, evening out queue lengths).
#include "policy/simulator_engine.h"

#include <algorithm>
#include <vector>

namespace cosched::policy::sim {

void Engine::Migrate(int task, int to) {
  Task& t = tasks_[task];
  t.vruntime += cpus_[to].min_vruntime - cpus_[t.cpu].min_vruntime;
  t.cpu = to;
}

void Engine::Enqueue(int task, int c) {
  tasks_[task].state = TaskState::kQueued;
  cpus_[c].queue.push_back(task);
  AddRunnable(c, 1);
  ++queued_;
  ++queued_per_cookie_[tasks_[task].cookie];
  ++vm_queued_[tasks_[task].vm];
}

void Engine::RemoveFromQueue(int c, size_t index) {
  auto& q = cpus_[c].queue;
  --queued_per_cookie_[tasks_[q[index]].cookie];
  --vm_queued_[tasks_[q[index]].vm];
  q[index] = q.back();
  q.pop_back();
  AddRunnable(c, -1);
  --queued_;
}

// Starts `task` on `c` (it must be in c's queue at `index`).
void Engine::StartOnCpu(int c, size_t index) {
  Cpu& cpu = cpus_[c];
  int task = cpu.queue[index];
  RemoveFromQueue(c, index);
  Task& t = tasks_[task];
  t.state = TaskState::kRunning;
  SetCurr(c, task);
  AddRunnable(c, 1);
  cpu.resched = false;
  if (cpu.forced_idle) SetForcedIdle(c, false);
  // Rounded to the nearest tick (a positive number).
  int64_t slice = static_cast<int64_t>(latency_ticks_ / NrRunning(c) + 0.5);
  cpu.slice_end = now_ + std::max(slice_min_ticks_, slice);
  if (t.woke_tick != kNone) {
    if (measuring_) stats_[t.vm].latency.Add(now_ - t.woke_tick);
    t.woke_tick = kNone;
  }
  ++switches_;
}

// Puts the running task of `c` back in its queue.
void Engine::Preempt(int c) {
  Cpu& cpu = cpus_[c];
  if (cpu.curr == kNone) return;
  Enqueue(cpu.curr, c);
  SetCurr(c, kNone);
  AddRunnable(c, -1);
  cpu.idle_since = now_;
  MarkStopped(c, now_);
}

// Index in c's queue of the task with the least vruntime (and `cookie`,
// unless it is kNone); kNone when there is none.
int Engine::BestInQueue(int c, int cookie) const {
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

void Engine::UpdateMinVruntime(int c) {
  Cpu& cpu = cpus_[c];
  double low = kForever;
  if (cpu.curr != kNone) low = tasks_[cpu.curr].vruntime;
  for (int task : cpu.queue) low = std::min(low, tasks_[task].vruntime);
  if (low != kForever) cpu.min_vruntime = std::max(cpu.min_vruntime, low);
}

void Engine::PickCpu(int c) {
  Preempt(c);
  UpdateMinVruntime(c);
  int best = BestInQueue(c, kNone);
  if (best != kNone) StartOnCpu(c, best);
}

// Core-wide pick under core scheduling: the task that is most behind its
// fair share decides the core's cookie, the running one included. As in
// the 2019 patch sets the published figures come from, there is no
// wake-up granularity across siblings: a woken task with its sleeper
// credit takes the core from a running task of another cookie.
void Engine::PickCore(int core) {
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
  };
  auto candidate = [&](int c, bool need) {
    Candidate cand;
    if (!need) {
      cand.task = cpus_[c].curr;
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
    bool a_wins = ca.lag <= cb.lag;
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
      const bool was_forced = cpu.forced_idle;
      SetForcedIdle(c, !cpu.queue.empty());
      if (cpu.forced_idle && !was_forced) {
        cpu.forced_since = now_;
        MarkStopped(c, now_);
      }
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
int Engine::SelectCpu(const Task& t) {
  const std::vector<int>& allowed = masks_[t.mask];
  int prev = Allowed(t, t.cpu) ? t.cpu : allowed[0];
  if (CoreIdle(prev)) return prev;
  const size_t n = allowed.size();
  const size_t limit = std::min(n, scan_limit_);
  int idle_fit = kNone;
  size_t next = scan_start_[t.mask][prev];
  for (size_t i = 0; i < limit; ++i, ++next) {
    if (next == n) next = 0;
    int c = allowed[next];
    if (!CpuIdle(c)) continue;
    if (CoreIdle(c)) return c;
    if (idle_fit == kNone && (!cookie_aware_ || CookieFits(t, c))) idle_fit = c;
  }
  if (CpuIdle(prev) && (!cookie_aware_ || CookieFits(t, prev))) return prev;
  if (idle_fit != kNone) return idle_fit;
  return prev;
}

// Idle CPUs take a waiting task from the busiest CPU that has one they
// may run; under core scheduling only one whose cookie matches what the
// sibling runs (the kernel's cookie steal for forced-idle siblings).
void Engine::PullToIdle() {
  // A CPU pulls when it has just gone idle (newidle balance) or has just
  // been forced idle (the forced-newidle cookie steal, done when the core
  // picks), else only at the balance tick (nohz idle balance). Between
  // balance ticks only the CPUs that stopped running a task in this tick
  // can pull; they are listed as they stop, in CPU order here.
  pullers_.clear();
  if (balance_tick_) {
    for (int c = 0; c < 2 * cores_; ++c) {
      if (cpus_[c].online && cpus_[c].curr == kNone) pullers_.push_back(c);
    }
  } else {
    const std::vector<uint64_t>& stopped = stopped_[now_ & 1];
    for (size_t w = 0; w < stopped.size(); ++w) {
      for (uint64_t bits = stopped[w] & ~run_bits_[w]; bits != 0; bits &= bits - 1) {
        const int c = static_cast<int>(64 * w) + __builtin_ctzll(bits);
        const Cpu& cpu = cpus_[c];
        const bool just_forced = cpu.forced_idle && cpu.forced_since == now_;
        if (just_forced || cpu.idle_since == now_) pullers_.push_back(c);
      }
    }
  }
  // A CPU with one waiting task and nothing running picks it itself,
  // unless it is forced idle: only the others give tasks away. Listed
  // when a puller first needs them.
  bool listed = false;
  auto overloaded = [&] {  // a CPU has two or more runnable tasks
    for (uint64_t word : two_bits_) {
      if (word != 0) return true;
    }
    return false;
  };
  for (int c : pullers_) {
    if (queued_ == 0) break;
    Cpu& cpu = cpus_[c];
    if (cpu.curr != kNone) continue;
    if (!cpu.queue.empty() && !cpu.forced_idle) continue;
    int want = kNone;
    if (mode_ == SmtMode::kCoreSched && (cookie_aware_ || cpu.forced_idle)) {
      int other = cpus_[Sibling(c)].curr;
      if (other != kNone) want = tasks_[other].cookie;
    }
    if (want != kNone && queued_per_cookie_[want] == 0) continue;
    if (want == kNone && !overloaded()) continue;  // nothing to balance
    if (!listed) {
      // Two or more runnable means one queued; forced idle means none runs.
      sources_.clear();
      for (size_t w = 0; w < two_bits_.size(); ++w) {
        for (uint64_t bits = two_bits_[w] | (one_bits_[w] & forced_bits_[w]); bits != 0;
             bits &= bits - 1) {
          sources_.push_back(static_cast<int>(64 * w) + __builtin_ctzll(bits));
        }
      }
      listed = true;
    }
    int best_cpu = kNone;
    int best_index = kNone;
    int best_load = 0;
    for (int s : sources_) {
      int load = NrRunning(s);
      // Load balancing leaves a CPU's only task where it is; the cookie
      // steal takes it from a forced-idle CPU.
      if (want == kNone && load < 2) continue;
      if (load <= best_load || s == c || cpus_[s].queue.empty()) continue;
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

// Load balancing between cores: a whole idle core takes a running task
// from a core where both siblings are busy, so that busy threads spread
// over cores before they pair up (what the kernel's SMT domain does).
void Engine::SpreadToIdleCores() {
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
void Engine::BalanceQueues() {
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

}  // namespace cosched::policy::sim
