// Time to reconcile a host of 200 VMs x 20 threads against the fake kernel,
// and the prctl writes a pass makes: all of them tagged from scratch, and a
// pass where nothing changed (goal: zero writes).
//
//   build/tests/bench/reconcile_bench
#include <map>

#include "agent/cookie_reconciler.h"
#include "host/testing/core_sched_fake.h"
#include "benchmark/benchmark.h"

namespace cosched::agent {
namespace {

constexpr int kVms = 200;
constexpr int kThreadsPerVm = 20;

struct Host {
  host::FakeCoreSched kernel;
  std::vector<discovery::DiscoveredVm> vms;
  std::map<std::string, v1::Assignment> assignments;

  Host() {
    for (int v = 0; v < kVms; ++v) {
      discovery::DiscoveredVm vm;
      vm.vm_id = "vm-" + std::to_string(v);
      vm.qemu_pid = 10000 + v * 100;
      for (int t = 0; t < kThreadsPerVm; ++t) {
        int tid = vm.qemu_pid + t;
        auto kind = t == 0 ? discovery::DiscoveredThread::Kind::kEmulator
                           : t <= 8 ? discovery::DiscoveredThread::Kind::kVcpu
                                    : discovery::DiscoveredThread::Kind::kEmulator;
        vm.threads.push_back({tid, vm.qemu_pid, "t", kind});
        kernel.AddTask(tid, vm.qemu_pid);
      }
      v1::Assignment a;
      a.set_vm_id(vm.vm_id);
      // Half the VMs one group each, the rest in tenant groups of 10.
      a.set_trust_group(v < kVms / 2 ? "t/vm/" + vm.vm_id
                                     : "t" + std::to_string(v / 10) + "/tenant");
      a.set_isolation(v < kVms / 2 ? v1::ISOLATION_LEVEL_VM
                                   : v1::ISOLATION_LEVEL_TENANT);
      a.set_thread_scope(v1::THREAD_SCOPE_EMULATOR);
      assignments[vm.vm_id] = a;
      vms.push_back(std::move(vm));
    }
  }

  AssignmentLookup Lookup() {
    return [this](const discovery::DiscoveredVm& vm) -> std::optional<v1::Assignment> {
      return assignments.at(vm.vm_id);
    };
  }
};

ReconcilerOptions Supported() {
  ReconcilerOptions o;
  o.probe.support = v1::CORE_SCHED_SUPPORT_SUPPORTED;
  return o;
}

void BM_ReconcileFromScratch(benchmark::State& state) {
  int writes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto host = std::make_unique<Host>();
    CookieReconciler reconciler(&host->kernel, Supported());
    state.ResumeTiming();
    ReconcileResult r = reconciler.Reconcile(host->vms, host->Lookup());
    writes = r.stats.cookie_writes;
    benchmark::DoNotOptimize(r);
  }
  state.counters["prctl_writes"] = writes;
  state.counters["threads"] = kVms * kThreadsPerVm;
}
BENCHMARK(BM_ReconcileFromScratch)->Unit(benchmark::kMillisecond);

void BM_ReconcileNothingChanged(benchmark::State& state) {
  Host host;
  CookieReconciler reconciler(&host.kernel, Supported());
  reconciler.Reconcile(host.vms, host.Lookup());
  host.kernel.ResetCallCounts();
  int passes = 0;
  for (auto _ : state) {
    ReconcileResult r = reconciler.Reconcile(host.vms, host.Lookup());
    benchmark::DoNotOptimize(r);
    ++passes;
  }
  state.counters["prctl_writes_per_pass"] =
      static_cast<double>(host.kernel.write_calls()) / passes;
  state.counters["prctl_reads_per_pass"] =
      static_cast<double>(host.kernel.get_calls()) / passes;
}
BENCHMARK(BM_ReconcileNothingChanged)->Unit(benchmark::kMillisecond);

void BM_RestartAdoptsCookies(benchmark::State& state) {
  Host host;
  {
    CookieReconciler first(&host.kernel, Supported());
    first.Reconcile(host.vms, host.Lookup());
  }
  host.kernel.ResetCallCounts();
  int passes = 0;
  for (auto _ : state) {
    CookieReconciler restarted(&host.kernel, Supported());
    ReconcileResult r = restarted.Reconcile(host.vms, host.Lookup());
    benchmark::DoNotOptimize(r);
    ++passes;
  }
  state.counters["prctl_writes_per_pass"] =
      static_cast<double>(host.kernel.write_calls()) / passes;
}
BENCHMARK(BM_RestartAdoptsCookies)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cosched::agent

BENCHMARK_MAIN();
