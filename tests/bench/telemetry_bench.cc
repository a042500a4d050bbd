// Throughput of the sibling-share telemetry (issue 4), on one core, over a
// generated trace of 10 M sched_switch events (64 CPUs, 16 VMs, host tasks):
// text parsing, and text parsing with the calculator (csctl analyze), binary
// ring-buffer parsing (the live path), the calculator, and the whole live
// pipeline (parse + merge + compute).
// Then a replay of a full KVM node at 155 k context switches/s: the CPU time
// the collector spends per second of events, i.e. the share of one core;
// once with the telemetry pieces alone, once through cs-agent's collector
// (agent/sibling_share_collector.h) reading a fake tracefs.
//
//   build/tests/bench/telemetry_bench
//
// The figures are printed (events_per_s, core_pct), not asserted.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "agent/sibling_share_collector.h"
#include "benchmark/benchmark.h"
#include "host/sched_trace.h"
#include "host/testing/pseudo_fs_fake.h"
#include "host/testing/sched_trace_fake.h"
#include "telemetry/event_merge.h"
#include "telemetry/ring_buffer.h"
#include "telemetry/sibling_share_calculator.h"
#include "telemetry/trace_text.h"
#include "tests/telemetry/trace_fixtures.h"

namespace cosched::telemetry {
namespace {

constexpr int64_t kEvents = 10'000'000;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// The agent's view: thread -> group in a hash map.
class Classifier {
 public:
  explicit Classifier(const testing::GeneratedTrace& trace) {
    absl::flat_hash_map<std::string, GroupId> vm_ids;
    for (const auto& [tid, vm] : trace.tid_vm) {
      auto [it, inserted] = vm_ids.try_emplace(vm, static_cast<GroupId>(vm_ids.size() + 1));
      groups_->emplace(tid, it->second);
    }
  }
  ThreadClassifier Get() const {
    return [groups = groups_](int32_t tid) {
      auto it = groups->find(tid);
      return it == groups->end() ? kHostGroup : it->second;
    };
  }

 private:
  std::shared_ptr<absl::flat_hash_map<int32_t, GroupId>> groups_ =
      std::make_shared<absl::flat_hash_map<int32_t, GroupId>>();
};

struct Trace {
  testing::GeneratedTrace trace;
  CpuTopology topology;
  SchedSwitchLayout layout;
  PageHeaderLayout header;
  std::string text;
  std::vector<std::vector<std::vector<uint8_t>>> pages;  // per CPU
  int64_t page_count = 0;
  int64_t page_bytes = 0;
};

const Trace& BigTrace() {
  static const Trace* t = [] {
    auto* t = new Trace;
    testing::GenerateOptions o;
    o.cores = 32;
    o.vms = 16;
    o.threads_per_vm = 5;
    o.host_tasks = 32;
    o.events = kEvents;
    std::fprintf(stderr, "generating %lld events...\n", static_cast<long long>(kEvents));
    t->trace = testing::GenerateTrace(o);
    t->topology = *CpuTopology::FromSiblingLists(t->trace.sibling_lists);
    t->layout = *SchedSwitchLayout::FromFormat(testing::kSchedSwitchFormat);
    t->header = *PageHeaderLayout::FromHeaderPage(testing::kHeaderPage);
    t->text = t->trace.Text();
    std::vector<std::vector<SchedSwitch>> per_cpu(t->trace.num_cpus);
    for (const SchedSwitch& ev : t->trace.events) per_cpu[ev.cpu].push_back(ev);
    for (const auto& events : per_cpu) {
      t->pages.push_back(testing::BuildPages(t->layout, events));
      t->page_count += static_cast<int64_t>(t->pages.back().size());
    }
    t->page_bytes = t->page_count * static_cast<int64_t>(testing::kPageSize);
    std::fprintf(stderr, "text %.0f MB, %lld ring-buffer pages (%.0f MB)\n", t->text.size() / 1e6,
                 static_cast<long long>(t->page_count), t->page_bytes / 1e6);
    return t;
  }();
  return *t;
}

void Report(benchmark::State& state, int64_t events, double cpu_s) {
  state.counters["events"] = static_cast<double>(events);
  state.counters["events_per_s"] = static_cast<double>(events) / cpu_s;
}

void BM_TextParse(benchmark::State& state) {
  const Trace& t = BigTrace();
  for (auto _ : state) {
    double start = ThreadCpuSeconds();
    TraceTextReader reader;
    int64_t sum = 0;
    auto on_line = [&](const TraceLine& l) { sum += l.event.next_tid; };
    constexpr size_t kChunk = 1 << 20;  // as csctl analyze reads
    for (size_t i = 0; i < t.text.size(); i += kChunk)
      reader.Feed(std::string_view(t.text).substr(i, kChunk), on_line);
    reader.Finish(on_line);
    benchmark::DoNotOptimize(sum);
    Report(state, reader.counts().events, ThreadCpuSeconds() - start);
    state.counters["MB_per_s"] = t.text.size() / 1e6 / (ThreadCpuSeconds() - start);
  }
}
BENCHMARK(BM_TextParse)->Unit(benchmark::kMillisecond)->Iterations(3);

// `csctl analyze` without the file: text parsing feeding the calculator
// (the text is in time order already), threads mapped to VMs by hash map.
void BM_TextAnalyze(benchmark::State& state) {
  const Trace& t = BigTrace();
  Classifier classifier(t.trace);
  for (auto _ : state) {
    double start = ThreadCpuSeconds();
    TraceTextReader reader;
    SiblingShareCalculator calc(t.topology, classifier.Get());
    auto on_line = [&](const TraceLine& l) {
      if (l.kind == TraceLineKind::kSchedSwitch) calc.Add(l.event);
    };
    constexpr size_t kChunk = 1 << 20;
    for (size_t i = 0; i < t.text.size(); i += kChunk)
      reader.Feed(std::string_view(t.text).substr(i, kChunk), on_line);
    reader.Finish(on_line);
    SiblingShareWindow w = calc.TakeWindow();
    benchmark::DoNotOptimize(w);
    Report(state, w.events, ThreadCpuSeconds() - start);
  }
}
BENCHMARK(BM_TextAnalyze)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_BinaryParse(benchmark::State& state) {
  const Trace& t = BigTrace();
  for (auto _ : state) {
    double start = ThreadCpuSeconds();
    RingBufferPageReader reader(t.header, t.layout);
    int64_t sum = 0;
    for (size_t cpu = 0; cpu < t.pages.size(); ++cpu)
      for (const auto& page : t.pages[cpu]) {
        absl::Status s = reader.ReadPage(page, static_cast<int32_t>(cpu),
                                         [&](const SchedSwitch& ev, const SchedSwitchComms&) {
                                           sum += ev.next_tid;
                                         });
        if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
      }
    benchmark::DoNotOptimize(sum);
    Report(state, reader.counts().sched_switch, ThreadCpuSeconds() - start);
  }
}
BENCHMARK(BM_BinaryParse)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_Calculator(benchmark::State& state) {
  const Trace& t = BigTrace();
  Classifier classifier(t.trace);
  for (auto _ : state) {
    double start = ThreadCpuSeconds();
    SiblingShareCalculator calc(t.topology, classifier.Get());
    for (const SchedSwitch& ev : t.trace.events) calc.Add(ev);
    SiblingShareWindow w = calc.TakeWindow();
    benchmark::DoNotOptimize(w);
    Report(state, w.events, ThreadCpuSeconds() - start);
  }
}
BENCHMARK(BM_Calculator)->Unit(benchmark::kMillisecond)->Iterations(3);

// The live path end to end: read every CPU's pages, merge each core's CPUs
// by time, compute.
void BM_BinaryParseMergeCompute(benchmark::State& state) {
  const Trace& t = BigTrace();
  Classifier classifier(t.trace);
  for (auto _ : state) {
    double start = ThreadCpuSeconds();
    RingBufferPageReader reader(t.header, t.layout);
    SiblingShareCalculator calc(t.topology, classifier.Get());
    std::vector<std::vector<SchedSwitch>> per_cpu(t.pages.size());
    for (size_t cpu = 0; cpu < t.pages.size(); ++cpu)
      for (const auto& page : t.pages[cpu])
        (void)reader.ReadPage(page, static_cast<int32_t>(cpu),
                              [&](const SchedSwitch& ev, const SchedSwitchComms&) {
                                per_cpu[cpu].push_back(ev);
                              });
    // The calculator needs time order per core only: merge each core's CPUs.
    for (int core = 0; core < t.topology.num_cores(); ++core) {
      std::vector<std::span<const SchedSwitch>> runs;
      for (int cpu : t.topology.core_cpus(core)) runs.emplace_back(per_cpu[cpu]);
      MergeSortedRuns(runs, [&](const SchedSwitch& ev) { calc.Add(ev); });
    }
    SiblingShareWindow w = calc.TakeWindow();
    benchmark::DoNotOptimize(w);
    Report(state, w.events, ThreadCpuSeconds() - start);
  }
}
BENCHMARK(BM_BinaryParseMergeCompute)->Unit(benchmark::kMillisecond)->Iterations(3);

// A full KVM node: 96 CPUs (48 cores x 2), 20 VMs of 6 threads, 40 host
// tasks, 155 k switches/s over 10 s. A loop every 100 ms (the per-event
// cost hardly depends on it; BM_LiveCollector155kPerSecond polls at the
// agent's interval): read each CPU's pages of that tick, append them to the
// merger, emit up to the tick, feed the calculator; take a window every
// 10 s. CPU time over trace time is the share of one core this uses.
constexpr int64_t kTickNs = 100'000'000;

testing::GeneratedTrace FullNode() {
  constexpr double kRate = 155'000;
  constexpr int64_t kSeconds = 10;
  testing::GenerateOptions o;
  o.cores = 48;
  o.vms = 20;
  o.threads_per_vm = 6;
  o.host_tasks = 40;
  o.idle_share = 0.2;
  // Mean run of 96 / 155 k s = 619 us.
  o.min_run_ns = 10'000;
  o.max_run_ns = 1'229'000;
  o.events = static_cast<int64_t>(kRate * kSeconds);
  return testing::GenerateTrace(o);
}

void BM_Replay155kPerSecond(benchmark::State& state) {
  testing::GeneratedTrace trace = FullNode();
  const int64_t t0 = trace.events.front().ts_ns;
  const double span_s = (trace.events.back().ts_ns - t0) / 1e9;
  auto topology = *CpuTopology::FromSiblingLists(trace.sibling_lists);
  auto layout = *SchedSwitchLayout::FromFormat(testing::kSchedSwitchFormat);
  auto header = *PageHeaderLayout::FromHeaderPage(testing::kHeaderPage);
  // pages[tick][cpu]: what a read of that CPU's buffer returns at that tick.
  const int64_t ticks = (trace.events.back().ts_ns - t0) / kTickNs + 1;
  std::vector<std::vector<std::vector<SchedSwitch>>> by_tick(
      ticks, std::vector<std::vector<SchedSwitch>>(trace.num_cpus));
  for (const SchedSwitch& ev : trace.events) by_tick[(ev.ts_ns - t0) / kTickNs][ev.cpu].push_back(ev);
  std::vector<std::vector<std::vector<std::vector<uint8_t>>>> pages(ticks);
  for (int64_t k = 0; k < ticks; ++k)
    for (const auto& events : by_tick[k]) pages[k].push_back(testing::BuildPages(layout, events));
  Classifier classifier(trace);

  for (auto _ : state) {
    double start = ThreadCpuSeconds();
    RingBufferPageReader reader(header, layout);
    SchedSwitchMerger merger(topology);
    SiblingShareCalculator calc(topology, classifier.Get());
    std::vector<SchedSwitch> batch;
    int64_t windows = 0;
    for (int64_t k = 0; k < ticks; ++k) {
      for (int cpu = 0; cpu < trace.num_cpus; ++cpu) {
        batch.clear();
        for (const auto& page : pages[k][cpu])
          (void)reader.ReadPage(page, cpu, [&](const SchedSwitch& ev, const SchedSwitchComms&) {
            batch.push_back(ev);
          });
        merger.Append(cpu, batch);
      }
      merger.EmitUntil(t0 + (k + 1) * kTickNs, [&](const SchedSwitch& ev) { calc.Add(ev); });
      if ((k + 1) % 100 == 0) {
        benchmark::DoNotOptimize(calc.TakeWindow(t0 + (k + 1) * kTickNs));
        ++windows;
      }
    }
    merger.EmitAll([&](const SchedSwitch& ev) { calc.Add(ev); });
    SiblingShareWindow w = calc.TakeWindow();
    benchmark::DoNotOptimize(w);
    const double cpu_s = ThreadCpuSeconds() - start;
    state.counters["events"] = static_cast<double>(reader.counts().sched_switch);
    state.counters["switches_per_s"] = reader.counts().sched_switch / span_s;
    state.counters["cpu_ms_per_s"] = cpu_s * 1000 / span_s;
    state.counters["core_pct"] = 100.0 * cpu_s / span_s;
  }
}
BENCHMARK(BM_Replay155kPerSecond)->Unit(benchmark::kMillisecond)->Iterations(5);

// The same node through cs-agent's collector: every poll interval (the
// agent's default) it reads each CPU's pages from a fake tracefs (a 4 KiB
// copy per page, as the kernel's read does), merges, computes, and every
// 10 s closes a StatsWindow (protos, the queue). Only the collector's calls
// are timed, not the feeding, nor the kernel's side of the reads
// (collector_cpu_bench measures that on the real kernel).
void BM_LiveCollector155kPerSecond(benchmark::State& state) {
  testing::GeneratedTrace trace = FullNode();
  const int64_t t0 = trace.events.front().ts_ns;
  const double span_s = (trace.events.back().ts_ns - t0) / 1e9;
  auto layout = *SchedSwitchLayout::FromFormat(testing::kSchedSwitchFormat);
  const int64_t tick_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              agent::SiblingShareCollectorOptions{}.poll_interval)
                              .count();
  const int64_t ticks = (trace.events.back().ts_ns - t0) / tick_ns + 1;
  std::vector<std::vector<std::vector<SchedSwitch>>> by_tick(
      ticks, std::vector<std::vector<SchedSwitch>>(trace.num_cpus));
  for (const SchedSwitch& ev : trace.events) by_tick[(ev.ts_ns - t0) / tick_ns][ev.cpu].push_back(ev);
  std::vector<std::vector<std::vector<std::vector<uint8_t>>>> pages(ticks);
  for (int64_t k = 0; k < ticks; ++k)
    for (const auto& events : by_tick[k]) pages[k].push_back(testing::BuildPages(layout, events));
  v1::Topology topology;
  for (int core = 0; core < trace.num_cpus / 2; ++core) {
    v1::Core* c = topology.add_cores();
    c->add_cpus(core);
    c->add_cpus(core + trace.num_cpus / 2);
  }
  std::map<std::string, agent::CollectedVm> by_vm;
  for (const auto& [tid, vm] : trace.tid_vm) {
    by_vm[vm].vm_id = vm;
    by_vm[vm].trust_group = vm;
    by_vm[vm].tids.push_back(tid);
  }
  std::vector<agent::CollectedVm> vms;
  for (auto& [id, vm] : by_vm) vms.push_back(vm);
  host::SchedTraceFormat format;
  format.sched_switch_format = std::string(testing::kSchedSwitchFormat);
  format.header_page = std::string(testing::kHeaderPage);
  format.num_cpus = trace.num_cpus;
  host::FakePseudoFs fs;
  fs.SetFile("/proc/sys/kernel/sched_schedstats", "0\n");

  for (auto _ : state) {
    host::FakeSchedTrace fake(format);
    agent::StatsWindowQueue queue;
    agent::SiblingShareCollector collector(
        {}, topology, &fake, &fs,
        [&]() -> absl::StatusOr<std::vector<agent::CollectedVm>> { return vms; }, &queue);
    fake.SetNowNs(t0);
    if (!collector.Open().ok()) state.SkipWithError("collector did not open");
    double cpu_s = 0;
    for (int64_t k = 0; k < ticks; ++k) {
      for (int cpu = 0; cpu < trace.num_cpus; ++cpu)
        for (const auto& page : pages[k][cpu]) fake.AddPage(cpu, page);
      // The collector processes up to 2 ms before "now".
      fake.SetNowNs(t0 + (k + 1) * tick_ns + 2'000'000);
      const double start = ThreadCpuSeconds();
      collector.Poll();
      cpu_s += ThreadCpuSeconds() - start;
    }
    const double start = ThreadCpuSeconds();
    collector.CloseWindow();
    cpu_s += ThreadCpuSeconds() - start;
    state.counters["events"] = static_cast<double>(collector.events_read());
    state.counters["windows"] = static_cast<double>(queue.size());
    state.counters["switches_per_s"] = collector.events_read() / span_s;
    state.counters["cpu_ms_per_s"] = cpu_s * 1000 / span_s;
    state.counters["core_pct"] = 100.0 * cpu_s / span_s;
  }
}
BENCHMARK(BM_LiveCollector155kPerSecond)->Unit(benchmark::kMillisecond)->Iterations(5);

// What the fake above does not cost: the kernel's side of a read of
// trace_pipe_raw. On this machine's real tracefs (needs root), 2 s of
// polling every 100 ms; prints the CPU time per read. At 155 k switches/s
// a node's buffers fill 155 k x 68 B / 4 KiB = ~2600 pages/s, plus one
// empty read per CPU and poll (96 x 10/s): multiply.
void BM_TracefsReadCost(benchmark::State& state) {
  for (auto _ : state) {
    auto trace = host::MakeTracefsSchedTrace("/sys/kernel/tracing", "cs-agent-bench");
    absl::StatusOr<host::SchedTraceFormat> format = trace->Start({});
    if (!format.ok()) {
      state.SkipWithError(std::string(format.status().message()).c_str());
      return;
    }
    std::vector<uint8_t> page(format->page_size);
    int64_t reads = 0, pages = 0;
    double cpu_s = 0;
    for (int tick = 0; tick < 20; ++tick) {
      const double start = ThreadCpuSeconds();
      for (int cpu = 0; cpu < format->num_cpus; ++cpu) {
        while (true) {
          absl::StatusOr<size_t> n = trace->ReadPage(cpu, page);
          ++reads;
          if (!n.ok() || *n == 0) break;
          ++pages;
        }
      }
      cpu_s += ThreadCpuSeconds() - start;
      timespec pause{0, 100'000'000};
      nanosleep(&pause, nullptr);
    }
    trace->Stop();
    state.counters["reads"] = static_cast<double>(reads);
    state.counters["pages"] = static_cast<double>(pages);
    state.counters["us_per_read"] = cpu_s * 1e6 / static_cast<double>(reads);
  }
}
BENCHMARK(BM_TracefsReadCost)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace cosched::telemetry

BENCHMARK_MAIN();
