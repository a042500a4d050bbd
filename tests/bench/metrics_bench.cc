// What the metrics cost: recording a stats window of a full host in
// cs-agent, a scrape of that host's /metrics text, and csd taking in one
// Report of a host with its windows.
//
//   build/tests/bench/metrics_bench
#include <sstream>

#include "agent/agent_metrics.h"
#include "benchmark/benchmark.h"
#include "prometheus/text_serializer.h"
#include "server/api/csd_metrics.h"

namespace cosched {
namespace {

constexpr int kVms = 200;
constexpr int kCores = 64;

v1::StatsWindow HostWindow() {
  v1::StatsWindow window;
  for (int v = 0; v < kVms; ++v) {
    v1::VMStats* vm = window.add_vms();
    vm->set_vm_id("vm-" + std::to_string(v));
    v1::SiblingShare* s = vm->mutable_share();
    s->set_run_ns(900000000);
    s->set_same_ns(500000000);
    s->set_idle_ns(390000000);
    s->set_foreign_ns(10000000);
    s->set_foreign_intervals(300);
    s->set_longest_foreign_ns(15000);
    s->set_forced_idle_ns(2000000);
    s->set_forced_idle_known(true);
  }
  for (int c = 0; c < kCores; ++c) {
    v1::CoreShare* core = window.add_cores();
    core->set_core(c);
    core->set_both_busy_ns(600000000);
    core->set_one_idle_ns(300000000);
    core->set_both_idle_ns(100000000);
  }
  return window;
}

std::string GroupOf(const std::string& vm_id) { return "g-" + vm_id; }

void BM_AgentRecordStatsWindow(benchmark::State& state) {
  agent::AgentMetrics metrics;
  const v1::StatsWindow window = HostWindow();
  for (auto _ : state) metrics.RecordStatsWindow(window, GroupOf);
  state.SetLabel("200 VMs, 64 cores per window");
}
BENCHMARK(BM_AgentRecordStatsWindow)->Unit(benchmark::kMicrosecond);

void BM_AgentScrape(benchmark::State& state) {
  agent::AgentMetrics metrics;
  metrics.RecordStatsWindow(HostWindow(), GroupOf);
  size_t bytes = 0;
  for (auto _ : state) {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& c : metrics.collectables()) {
      for (auto& f : c->Collect()) families.push_back(std::move(f));
    }
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, families);
    bytes = out.str().size();
  }
  state.counters["text_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_AgentScrape)->Unit(benchmark::kMicrosecond);

void BM_CsdReport(benchmark::State& state) {
  server::CsdMetrics metrics({});
  v1::ReportRequest report;
  report.set_host_id("hv-1");
  for (int v = 0; v < kVms; ++v) {
    v1::VMObservation* o = report.add_vms();
    o->set_vm_id("vm-" + std::to_string(v));
    o->mutable_enforcement()->set_state(v1::ENFORCEMENT_STATE_ENFORCED);
  }
  // One Report after a 10 s interval of 1 s windows.
  for (int w = 0; w < 10; ++w) *report.add_stats() = HostWindow();
  for (auto _ : state) {
    metrics.RecordAcceptedReport(server::SummarizeReport(report));
  }
  state.SetLabel("200 VMs, 10 windows per Report");
}
BENCHMARK(BM_CsdReport)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace cosched

BENCHMARK_MAIN();
