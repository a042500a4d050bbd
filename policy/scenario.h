// A what-if scenario for the SMT core-scheduling simulator: one host, the
// VMs on it with their workloads, and the tenants' isolation policies. The
// YAML format is documented in docs/scenarios.md. Parsing works on a string
// (no I/O here: csctl reads the file). Plain data; thread-compatible.
#ifndef COSCHED_POLICY_SCENARIO_H_
#define COSCHED_POLICY_SCENARIO_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/types.pb.h"

namespace cosched::policy {

enum class WorkloadKind {
  // Compute-bound: runs `burst_ms` on average, then sleeps so that it is
  // runnable `util` of the time when it has a CPU to itself.
  kCpu,
  // Wakes every `period_ms` (shifted by up to `jitter` x period) to do
  // `burst_ms` of work; work not done by the next period is carried over.
  kPeriodic,
  // Latency-sensitive closed loop: waits `think_ms` (exponential), then
  // serves a request of `work_ms` of CPU work (exponential).
  kInteractive,
  // Like kCpu, but AVX-512 heavy: while it runs (and `avx_hysteresis_ms`
  // after), the core's clock is lowered for the sibling too.
  kAvx,
};

// "cpu", "periodic", "interactive", "avx".
const char* WorkloadKindName(WorkloadKind kind);

struct Workload {
  WorkloadKind kind = WorkloadKind::kCpu;
  double util = 1.0;
  double burst_ms = 10.0;
  double period_ms = 100.0;
  double jitter = 0.1;
  double think_ms = 1.0;
  double work_ms = 1.0;

  // The share of one hardware thread this workload uses when it has the
  // CPU to itself: its declared load, used by the policy engine.
  double DeclaredLoad() const;
};

// One `vms:` entry: `count` identical VMs.
struct VmSpec {
  std::string name;
  int count = 1;
  int vcpus = 1;
  // A tenant id, or kPerVmTenant: every instance is a tenant of its own.
  std::string tenant;
  // Sorted, unique.
  std::vector<std::string> classes;
  Workload workload;
  // The CPU ids every vCPU of the VM may run on; empty: any. CPU ids follow
  // Linux on x86: CPU `core` is the first sibling of `core`, CPU
  // `core + cores` the second.
  std::vector<int> pin_cpus;
  // Counted in `measured_throughput` (the benchmark's figure). Default true.
  bool measure = true;
  // Whether its threads are the vCPUs of one guest, which wait for each
  // other (SimParams::vcpu_coupling). False for a group of independent
  // processes (docs/scenarios.md B's cgroups). Default true.
  bool coupled = true;
};

inline constexpr char kPerVmTenant[] = "per-vm";

struct TenantSpec {
  // tenant_id, default_isolation, allowed_isolation; validated with
  // ValidateTenantPolicy.
  v1::TenantPolicy policy;
  // Most forced idle (percent of the host's CPU time) the engine may plan
  // for this tenant's VMs.
  std::optional<double> forced_idle_budget_pct;
};

struct Scenario {
  std::string name;
  std::string description;
  uint64_t seed = 1;
  double duration_s = 10;
  int cores = 1;
  int threads_per_core = 2;
  std::vector<VmSpec> vms;
  // Tenants without an entry get DefaultTenantPolicy (vm; every level but none).
  std::vector<TenantSpec> tenants;
  // Pairs of interference classes that must never share a core.
  std::vector<std::pair<std::string, std::string>> conflicts;
  // Most forced idle (percent of the host's CPU time) the engine may plan.
  std::optional<double> forced_idle_budget_pct;
  // Whether the policy engine may pin VMs that the scenario leaves unpinned.
  bool policy_may_pin = true;

  int cpus() const { return cores * threads_per_core; }
};

// One VM after expanding `count` (names "<name>-<i>" when count > 1) and
// `tenant: per-vm` (the tenant is the instance name).
struct VmInstance {
  std::string name;
  std::string tenant;
  int spec = 0;  // index into Scenario::vms
  int vcpus = 1;
  std::vector<std::string> classes;
  Workload workload;
  std::vector<int> pin_cpus;
  bool measure = true;
  bool coupled = true;
};

std::vector<VmInstance> ExpandInstances(const Scenario& scenario);

// Parses a scenario. INVALID_ARGUMENT naming the key and the rule it breaks
// ("vms[2].workload.util must be in (0, 1]"), for malformed YAML (with the
// line), unknown keys and missing required keys.
absl::StatusOr<Scenario> ParseScenarioYaml(absl::string_view yaml);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}. INVALID_ARGUMENT naming `field`.
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view field,
                                              absl::string_view list);

}  // namespace cosched::policy

#endif  // COSCHED_POLICY_SCENARIO_H_
