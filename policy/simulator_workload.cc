// The simulated workloads: bursts of work and the sleeps between them, and
// the speed model of one tick of execution (SMT sibling share, AVX-512
// clock) with its on-CPU accounting.
#include "policy/simulator_engine.h"

#include <algorithm>

namespace cosched::policy::sim {

void Engine::StartBurst(Task& t) {
  const Workload& w = *t.workload;
  switch (w.kind) {
    case WorkloadKind::kCpu:
    case WorkloadKind::kAvx:
      t.remaining = w.util >= 1.0 ? kForever : Exponential(t, w.burst_ms);
      break;
    case WorkloadKind::kPeriodic:
      t.remaining += w.burst_ms;
      t.next_release_ms += w.period_ms;
      break;
    case WorkloadKind::kInteractive:
      t.remaining = Exponential(t, w.work_ms);
      break;
  }
}

// The burst of `task` is done: count it and put the task to sleep, or
// start the next burst at once.
void Engine::FinishBurst(int task) {
  Task& t = tasks_[task];
  const Workload& w = *t.workload;
  if (measuring_ && w.kind != WorkloadKind::kCpu && w.kind != WorkloadKind::kAvx) {
    ++stats_[t.vm].requests;
  }
  double sleep_ms = 0;
  switch (w.kind) {
    case WorkloadKind::kCpu:
    case WorkloadKind::kAvx:
      sleep_ms = Exponential(t, w.burst_ms * (1 - w.util) / w.util);
      break;
    case WorkloadKind::kPeriodic: {
      double now_ms = (now_ + 1) * tick_;
      if (t.next_release_ms <= now_ms) {  // behind: the next one is due
        t.remaining = 0;
        StartBurst(t);
        return;
      }
      sleep_ms = t.next_release_ms - now_ms + Uniform(t) * w.jitter * w.period_ms;
      break;
    }
    case WorkloadKind::kInteractive:
      sleep_ms = Exponential(t, w.think_ms);
      break;
  }
  Cpu& cpu = cpus_[t.cpu];
  SetCurr(t.cpu, kNone);
  AddRunnable(t.cpu, -1);
  cpu.idle_since = now_ + 1;
  MarkStopped(t.cpu, now_ + 1);
  t.state = TaskState::kSleeping;
  t.lag = t.vruntime - cpu.min_vruntime;
  t.remaining = 0;
  AddWakeup(now_ + 1 + TicksFromMs(sleep_ms), task);
}

void Engine::AddWakeup(int64_t tick, int task) {
  if (tick - now_ < kWheelTicks) {
    wheel_[tick % kWheelTicks].push_back(task);
  } else {
    later_.push({tick, task});
  }
}

void Engine::ProcessWakeups() {
  const double credit = -params_.sched_latency_ms / 2;
  // Wake-ups are always for a later tick, so the bucket holds this tick's.
  std::vector<int>& bucket = wheel_[now_ % kWheelTicks];
  while (!later_.empty() && later_.top().first <= now_) {
    bucket.push_back(later_.top().second);
    later_.pop();
  }
  if (bucket.empty()) return;
  waking_.swap(bucket);
  bucket.clear();
  std::sort(waking_.begin(), waking_.end());
  for (int task : waking_) {
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

void Engine::Execute() {
  // Speeds depend on what both siblings ran during this tick, also when
  // one of them finishes its burst in it.
  for (int c = 0; c < 2 * cores_; ++c) running_[c] = cpus_[c].curr;
  for (size_t w = 0; w < run_bits_.size(); ++w) {
    // Forced idle with a task queued (a forced-idle CPU runs nothing).
    if (measuring_) forced_idle_ticks_ += __builtin_popcountll(forced_bits_[w] & one_bits_[w]) +
                                          __builtin_popcountll(forced_bits_[w] & two_bits_[w]);
  }
  for (size_t w = 0; w < run_bits_.size(); ++w) {
    // The CPUs that run a task at the start of the tick, in CPU order.
    for (uint64_t bits = run_bits_[w]; bits != 0; bits &= bits - 1) {
      ExecuteOn(static_cast<int>(64 * w) + __builtin_ctzll(bits));
    }
  }
}

// One tick of the task running on `c`.
void Engine::ExecuteOn(int c) {
  Cpu& cpu = cpus_[c];
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
  // A runnable vCPU of the same guest is waiting for a CPU: the running
  // ones wait for it at their next lock, IPI or barrier.
  if (vm_coupled_[t.vm] && vm_queued_[t.vm] > 0) speed *= 1 - params_.vcpu_coupling;
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

}  // namespace cosched::policy::sim
