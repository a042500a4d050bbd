// A discrete-time simulator of one SMT host under Linux's fair scheduler,
// with and without core scheduling: what a grouping, a pinning or turning
// SMT off would cost. The model and its few global parameters are described
// in docs/scenarios.md. Pure and deterministic: the same scenario, config,
// parameters and seed always give the same result. Thread-compatible; runs
// on the caller's thread.
#ifndef COSCHED_POLICY_SIMULATOR_H_
#define COSCHED_POLICY_SIMULATOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "policy/scenario.h"

namespace cosched::policy {

// The model's parameters. They are global: the calibration against the
// published figures (docs/scenarios.md) uses these defaults for every
// scenario, and none may be changed per scenario.
struct SimParams {
  // Time step. Sleeps and runs shorter than a tick last one tick.
  double tick_ms = 0.25;
  // Speed of a thread while its sibling runs another thread, as a share of
  // its speed alone on the core. Scalar integer code (cpu and periodic
  // workloads): 0.85, 1.7x per pair, from docs/scenarios.md B at 64/64, where
  // every thread is paired and each group gets half the machine in every
  // mode, so coresched / nosmt for sysbench is 2 x this share (published
  // 17022 / 9990 = 1.70). sysbench's trial division waits on the divider's
  // latency, which leaves the sibling most of the core; this is above the
  // 0.96-1.3x quoted for other code (docs/scenarios.md, "Calibration").
  // Latency-bound code with misses (interactive, A1's database) 1.3x, the
  // top of that range; two vectorised threads (AVX-512, linpack's DGEMM)
  // share the vector units: 1.0x, with vcpu_coupling from A3's nosmt
  // -22.5%.
  double smt_share_cpu = 0.85;
  double smt_share_interactive = 0.65;
  double smt_share_avx = 0.5;
  // Core clock while AVX-512 code runs on either sibling, and for this long
  // after it stopped, as a share of the normal clock; applies to non-AVX
  // threads on that core (AVX threads are measured at their own clock).
  // From B at 64/64 too: smt / nosmt = 2 x the mean share of a sysbench
  // thread whose sibling is sysbench half the time and gemm half the time,
  // 1.53 = 0.85 x (1 + avx_clock).
  double avx_clock = 0.8;
  double avx_hysteresis_ms = 2.0;
  // Coupling between the vCPUs of one guest: they wait for each other
  // (spinlocks, IPIs, TLB shootdowns, barriers), so while any runnable
  // vCPU of a VM waits for a host CPU, its running vCPUs do useful work
  // at (1 - vcpu_coupling) of their speed (the rest is spinning or
  // waiting on the descheduled one). Set, with smt_share_avx = 0.5, to
  // A3's nosmt -22.5%; A1's and A2's costs follow from it.
  double vcpu_coupling = 0.22;
  // CFS defaults for 8 or more CPUs (sysctl_sched_*, scaled by 4).
  double sched_latency_ms = 24.0;
  double min_granularity_ms = 3.0;
  double wakeup_granularity_ms = 4.0;
  // How many CPUs a wake-up scans for an idle one (the kernel limits its
  // scan of the last-level cache domain when it is busy).
  int wake_scan_cpus = 8;
  // Whether wake-up placement skips idle CPUs whose sibling runs another
  // cookie (Linux >= 5.14). The published figures are from 2019 patch sets
  // without it.
  bool cookie_aware_wakeup = false;
  // How often busy CPUs balance load and idle cores pull from busy ones.
  double balance_interval_ms = 4.0;
  // Statistics start after this share of the run (at most 1 s).
  double warmup_share = 0.1;
};

enum class SmtMode {
  // SMT on, nothing tagged: any two threads may share a core.
  kSmt,
  // SMT on, core scheduling: two threads share a core only when their
  // cookies match.
  kCoreSched,
  // SMT off: one hardware thread per core.
  kNoSmt,
};

// How the host runs the scenario's VM instances (ExpandInstances order).
struct SimConfig {
  SmtMode mode = SmtMode::kSmt;
  // Per instance: its cookie under kCoreSched (0 = untagged; equal values
  // share). Also its trust group for the same/foreign statistics in every
  // mode; empty means one group per VM.
  std::vector<int> cookie;
  // Per instance: the CPUs its vCPUs may use (empty: any). Empty vector:
  // each instance's own `pin_cpus`.
  std::vector<std::vector<int>> pin_cpus;
};

struct VmSimResult {
  std::string name;
  std::string tenant;
  // Work done, in "core-seconds at full single-thread speed" per second.
  double throughput = 0;
  // Interactive: requests served per second; periodic: bursts finished.
  double requests_per_s = 0;
  // Share of the VM's on-CPU time its sibling ran: a thread of the same
  // trust group, nothing, anything else; and a thread of another tenant.
  double same_pct = 0;
  double idle_pct = 0;
  double foreign_pct = 0;
  double cross_tenant_pct = 0;
  double p99_wakeup_latency_ms = 0;
  bool measure = true;
};

struct SimResult {
  std::vector<VmSimResult> vms;
  double total_throughput = 0;
  // Sum over VMs with measure = true (the benchmark's figure).
  double measured_throughput = 0;
  // Over all VMs' on-CPU time.
  double same_pct = 0;
  double idle_pct = 0;
  double foreign_pct = 0;
  double cross_tenant_pct = 0;
  // Share of all online CPU time a CPU sat idle although a task was queued
  // on it, because its sibling ran another cookie.
  double forced_idle_pct = 0;
  double p50_wakeup_latency_ms = 0;
  double p99_wakeup_latency_ms = 0;
  // Measured time (after warm-up).
  double simulated_s = 0;
  int64_t context_switches = 0;
};

// What to run beyond the scenario's own seed and duration.
struct SimRun {
  // Default: scenario.seed.
  std::optional<uint64_t> seed;
  // Default: scenario.duration_s.
  std::optional<double> duration_s;
};

// Runs `scenario` under `config`. INVALID_ARGUMENT when the config's vectors
// do not match the scenario's instances.
absl::StatusOr<SimResult> Simulate(const Scenario& scenario,
                                   const SimConfig& config,
                                   const SimParams& params = SimParams(),
                                   const SimRun& run = SimRun());

namespace sim {
class Engine;
}

// Simulate() in steps: a caller that may stop early (the policy engine's
// screen, tradeoff.h) looks at what was measured so far and runs on only
// when it needs to. Running to the run's duration in any number of steps
// gives exactly Simulate()'s result. Keeps a reference to the scenario,
// which must outlive it.
class Simulation {
 public:
  // INVALID_ARGUMENT as Simulate().
  static absl::StatusOr<std::unique_ptr<Simulation>> Create(const Scenario& scenario,
                                                            const SimConfig& config,
                                                            const SimParams& params = SimParams(),
                                                            const SimRun& run = SimRun());
  ~Simulation();

  // Runs on until `simulated_s` seconds from the start (at least the
  // warm-up and one tick more, at most the run's duration; never back)
  // and returns the statistics of the measured time so far.
  SimResult RunTo(double simulated_s);
  // The run's duration, warm-up included.
  double duration_s() const { return duration_s_; }
  // Whether it has run its whole duration.
  bool done() const;

 private:
  Simulation(std::unique_ptr<sim::Engine> engine, double duration_s);

  std::unique_ptr<sim::Engine> engine_;
  double duration_s_;
};

}  // namespace cosched::policy

#endif  // COSCHED_POLICY_SIMULATOR_H_
