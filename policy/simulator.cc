// The simulator's entry points, Simulate() and Simulation, which check the
// config, and the engine's set-up, tick loop and result statistics. The engine itself is in
// simulator_engine.h.
#include "policy/simulator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "policy/simulator_engine.h"

namespace cosched::policy::sim {

Engine::Engine(const Scenario& scenario, std::vector<VmInstance> instances,
               const SimConfig& config, const SimParams& params, uint64_t seed)
    : scenario_(scenario),
      instances_(std::move(instances)),
      params_(params),
      mode_(config.mode),
      cores_(scenario.cores),
      seed_(seed) {
  cpus_.resize(2 * cores_);
  running_.assign(2 * cores_, kNone);
  nr_running_.assign(2 * cores_, 0);
  const size_t words = (2 * cores_ + 63) / 64;
  run_bits_.assign(words, 0);
  stopped_[0].assign(words, 0);
  stopped_[1].assign(words, 0);
  one_bits_.assign(words, 0);
  two_bits_.assign(words, 0);
  forced_bits_.assign(words, 0);
  if (mode_ == SmtMode::kNoSmt) {
    for (int c = cores_; c < 2 * cores_; ++c) cpus_[c].online = false;
  }
  for (auto& cpu : cpus_) cpu.queue.reserve(16);
  tick_ = params_.tick_ms;
  cookie_aware_ = params_.cookie_aware_wakeup;
  scan_limit_ = static_cast<size_t>(std::max(1, params_.wake_scan_cpus));
  latency_ticks_ = params_.sched_latency_ms / tick_;
  slice_min_ticks_ = std::max<int64_t>(1, std::llround(params_.min_granularity_ms / tick_));
  hysteresis_ticks_ = std::llround(params_.avx_hysteresis_ms / tick_);
  balance_ticks_ = std::max<int64_t>(1, std::llround(params_.balance_interval_ms / tick_));
  core_avx_until_.assign(cores_, -1);
  core_forced_.assign(cores_, 0);
  stats_.resize(instances_.size());
  wheel_.resize(kWheelTicks);
  vm_queued_.assign(instances_.size(), 0);
  for (const VmInstance& vm : instances_) vm_coupled_.push_back(vm.coupled && vm.vcpus > 1);

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
      // Streams far apart: SplitMix64's state advances by a constant, so
      // offsets by distinct multiples of 2^40 never meet in a run.
      t.rng = seed_ + (static_cast<uint64_t>(tasks_.size()) << 40) * 0x9e3779b97f4a7c15;
      const std::vector<int>& allowed = masks_[mask];
      t.cpu = allowed[(tasks_.size() * 7) % allowed.size()];
      tasks_.push_back(t);
    }
  }
  queued_per_cookie_.assign(cookie_ids.size(), 0);
}

void Engine::Start(double duration_s) {
  total_ticks_ = std::max<int64_t>(1, std::llround(duration_s * 1000 / tick_));
  warmup_ticks_ = std::min<int64_t>(std::llround(1000 / tick_),
                                    std::llround(total_ticks_ * params_.warmup_share));
  // Everyone starts asleep and wakes in the first 10 ms (periodic tasks at
  // a random phase of their period), so start-up order does not matter.
  for (size_t i = 0; i < tasks_.size(); ++i) {
    Task& t = tasks_[i];
    double start_ms = Uniform(t) * 10;
    if (t.workload->kind == WorkloadKind::kPeriodic) {
      start_ms = Uniform(t) * t.workload->period_ms;
      t.next_release_ms = start_ms;
    }
    AddWakeup(TicksFromMs(start_ms), static_cast<int>(i));
  }
}

void Engine::Advance(int64_t until) {
  for (until = std::min(until, total_ticks_); now_ < until; ++now_) {
    measuring_ = now_ >= warmup_ticks_;
    balance_tick_ = now_ % balance_ticks_ == 0;
    ProcessWakeups();
    if (mode_ == SmtMode::kCoreSched) {
      for (int core = 0; core < cores_; ++core) {
        if (NeedsPick(core) || NeedsPick(core + cores_)) PickCore(core);
      }
    } else {
      for (int c = 0; c < 2 * cores_; ++c) {
        if (cpus_[c].online && NeedsPick(c)) PickCpu(c);
      }
    }
    if (queued_ > 0) PullToIdle();
    Execute();
    if (balance_tick_) {
      if (mode_ != SmtMode::kNoSmt) SpreadToIdleCores();
      BalanceQueues();
    }
    std::fill(stopped_[now_ & 1].begin(), stopped_[now_ & 1].end(), 0);
  }
}

int Engine::AddMask(const std::vector<int>& pin,
                    std::map<std::vector<int>, int>* ids) {
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
    std::vector<int> start(2 * cores_);
    for (int c = 0; c < 2 * cores_; ++c) {
      size_t i = std::lower_bound(online.begin(), online.end(), c) - online.begin();
      start[c] = i == online.size() ? 0 : static_cast<int>(i);
    }
    masks_.push_back(online);
    allowed_.push_back(std::move(allowed));
    scan_start_.push_back(std::move(start));
  }
  return it->second;
}

SimResult Engine::Collect() const {
  SimResult r;
  // At least one tick, so that a result taken during warm-up is zeros.
  const int64_t measured = std::max<int64_t>(1, now_ - warmup_ticks_);
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

}  // namespace cosched::policy::sim

namespace cosched::policy {

using sim::Engine;

absl::StatusOr<std::unique_ptr<Simulation>> Simulation::Create(const Scenario& scenario,
                                                             const SimConfig& config,
                                                             const SimParams& params,
                                                             const SimRun& run) {
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
  auto engine = std::make_unique<Engine>(scenario, std::move(instances), config, params,
                                         run.seed.value_or(scenario.seed));
  engine->Start(duration_s);
  return std::unique_ptr<Simulation>(new Simulation(std::move(engine), duration_s));
}

Simulation::Simulation(std::unique_ptr<Engine> engine, double duration_s)
    : engine_(std::move(engine)), duration_s_(duration_s) {}

Simulation::~Simulation() = default;

SimResult Simulation::RunTo(double simulated_s) {
  const int64_t ticks = std::llround(simulated_s * 1000 / engine_->tick_ms());
  engine_->Advance(std::max(ticks, engine_->warmup_ticks() + 1));
  return engine_->Collect();
}

bool Simulation::done() const { return engine_->now() >= engine_->total_ticks(); }

absl::StatusOr<SimResult> Simulate(const Scenario& scenario,
                                   const SimConfig& config,
                                   const SimParams& params, const SimRun& run) {
  ASSIGN_OR_RETURN(std::unique_ptr<Simulation> simulation,
                   Simulation::Create(scenario, config, params, run));
  return simulation->RunTo(simulation->duration_s());
}

}  // namespace cosched::policy
