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
    FlushCpu(c);
    Cpu& cpu = cpus_[c];
    t.vruntime = cpu.min_vruntime + std::max(t.lag, credit);
    t.woke_tick = now_;
    Enqueue(task, c);
    if (cpu.curr != kNone &&
        tasks_[cpu.curr].vruntime - t.vruntime > params_.wakeup_granularity_ms) {
      cpu.resched = true;
      resched_cpus_.push_back(c);
    }
  }
}

void Engine::AddFinishCheck(int64_t tick, int c) {
  finish_at_[c] = tick;
  finish_checks_.emplace_back(tick, c);
  std::push_heap(finish_checks_.begin(), finish_checks_.end(), std::greater<>());
}

void Engine::ProcessFinishes() {
  for (int core : dirty_cores_) {
    core_dirty_[core] = 0;
    EstimateFinish(core);
  }
  dirty_cores_.clear();
  if (measuring_) forced_idle_ticks_ += fi_cpus_;
  while (!finish_checks_.empty() && finish_checks_.front().first <= now_) {
    const int c = finish_checks_.front().second;
    std::pop_heap(finish_checks_.begin(), finish_checks_.end(), std::greater<>());
    finish_checks_.pop_back();
    // Checks estimated again since were moved to another tick.
    if (finish_at_[c] != now_) continue;
    finish_at_[c] = kNone;
    const int core = CoreOf(c);
    Flush(core, now_);
    const int task = cpus_[c].curr;
    assert(task != kNone);
    if (tasks_[task].remaining <= 1e-9) FinishBurst(task);
    // Ended (the sibling now runs alone, or the next periodic burst
    // began) or not yet (it ran slower than the estimate assumed).
    MarkDirty(core);
  }
}

void Engine::EstimateFinish(int core) {
  for (int c : {core, core + cores_}) {
    const int task = cpus_[c].curr;
    if (task == kNone) {
      finish_at_[c] = kNone;
      continue;
    }
    const Task& t = tasks_[task];
    // The fastest it may run from now on: the AVX clock of its sibling's
    // past AVX code expires, nothing else changes without flushing the core.
    const int other = cpus_[Sibling(c)].online ? cpus_[Sibling(c)].curr : kNone;
    double speed = other == kNone ? 1.0 : t.share;
    if (!t.avx && other != kNone && tasks_[other].avx) speed *= params_.avx_clock;
    if (vm_coupled_[t.vm] && vm_queued_[t.vm] > 0) speed *= 1 - params_.vcpu_coupling;
    const double step = tick_ * speed;
    if (finish_at_[c] != kNone && estimated_task_[c] == task && estimated_step_[c] == step) {
      continue;
    }
    estimated_task_[c] = task;
    estimated_step_[c] = step;
    finish_at_[c] = kNone;
    if (std::isinf(t.remaining)) continue;  // util 1: never ends
    // At that speed it ends in the ceil(x)-th tick at the earliest; one
    // tick earlier covers the rounding of the tick-by-tick subtraction.
    const double x = (t.remaining - 1e-9) / step;
    const double ticks = std::max(1.0, std::ceil(x) - 1);
    const int64_t at = core_done_[core] + static_cast<int64_t>(std::min(ticks, 1e15));
    assert(at >= now_);
    AddFinishCheck(at, c);
  }
}

void Engine::Flush(int core, int64_t through) {
  const int64_t from = core_done_[core] + 1;
  if (from > through) return;
  core_done_[core] = through;
  const int a = core;
  const int b = core + cores_;
  const int task_a = cpus_[a].curr;
  const int task_b = b < 2 * cores_ && cpus_[b].online ? cpus_[b].curr : kNone;
  // In a tick the first CPU runs before the second: AVX code on the first
  // sets the core's AVX clock for the second in the same tick; that is
  // also the case ExecuteTask's "sibling runs AVX code" covers.
  if (task_a != kNone) ExecuteTask(a, task_a, task_b, from, through);
  if (task_b != kNone) ExecuteTask(b, task_b, task_a, from, through);
  const bool avx = (task_a != kNone && tasks_[task_a].avx) ||
                   (task_b != kNone && tasks_[task_b].avx);
  if (avx) core_avx_until_[core] = through + hysteresis_ticks_;
}

void Engine::ExecuteTask(int c, int task, int other, int64_t from, int64_t through) {
  Task& t = tasks_[task];
  Cpu& cpu = cpus_[c];
  const int core = CoreOf(c);
  double base = other == kNone ? 1.0 : t.share;
  // A runnable vCPU of the same guest is waiting for a CPU: the running
  // ones wait for it at their next lock, IPI or barrier.
  const bool coupled = vm_coupled_[t.vm] && vm_queued_[t.vm] > 0;
  // The core runs at the AVX clock while the sibling runs AVX code, and
  // for hysteresis_ticks_ after AVX code last ran (core_avx_until_, which
  // this flush does not move: AVX code on the core means the sibling runs
  // it, or this task is AVX code and is not slowed).
  const bool sibling_avx = other != kNone && tasks_[other].avx;
  const int64_t slow_until =
      t.avx ? -1 : sibling_avx ? through : core_avx_until_[core];
  VmStats& s = stats_[t.vm];
  double remaining = t.remaining;
  double vruntime = t.vruntime;
  // Segments of one speed and one measuring state.
  for (int64_t start = from; start <= through;) {
    const bool slow = start <= slow_until;
    const bool measured = start >= warmup_ticks_;
    int64_t end = through;
    if (slow) end = std::min(end, slow_until);
    if (!measured) end = std::min(end, warmup_ticks_ - 1);
    double speed = base;
    if (slow) speed *= params_.avx_clock;
    if (coupled) speed *= 1 - params_.vcpu_coupling;
    const double step = tick_ * speed;
    double work = 0;
    for (int64_t tick = start; tick <= end; ++tick) {
      const double done = std::min(remaining, step);
      remaining -= done;
      vruntime += tick_;
      work += done;
    }
    // Its burst ends only in a tick ProcessFinishes checks.
    assert(remaining > 1e-9 || end == through);
    if (measured) {
      const int64_t ticks = end - start + 1;
      s.work_ms += work;
      s.on_cpu += ticks;
      if (other == kNone) {
        s.idle += ticks;
      } else {
        const Task& o = tasks_[other];
        if (o.vm == t.vm || (t.group >= 0 && o.group == t.group)) {
          s.same += ticks;
        } else {
          s.foreign += ticks;
        }
        if (o.tenant != t.tenant) s.cross_tenant += ticks;
      }
    }
    start = end + 1;
  }
  t.remaining = remaining;
  t.vruntime = vruntime;
  // min_vruntime follows the running task's vruntime while nothing waits
  // (each tick took the larger of the two; vruntime only grows).
  if (cpu.queue.empty()) cpu.min_vruntime = std::max(cpu.min_vruntime, vruntime);
}

void Engine::FlushRunnersOf(int vm) {
  for (int task : vm_tasks_[vm]) {
    const Task& t = tasks_[task];
    if (t.state != TaskState::kRunning) continue;
    Flush(CoreOf(t.cpu), horizon_);
    MarkDirty(CoreOf(t.cpu));
  }
}

}  // namespace cosched::policy::sim
