// csd's stats aggregator (server/stats/stats_aggregator.h) under fleet-sized load:
// adding one Report's window (50 VMs, 64 cores) from many hosts, on one and
// two threads; answering GetStats for a tenant of 1000 VMs spread over 200
// hosts, over 5 minutes (minute buckets) and a day (hour buckets); the
// heap a (host, VM) series holds once its buckets are all in use; the
// buckets a VM's series keeps two hours after it left every host; and the
// heap under VM churn, with and without the fold of gone VMs.
//
//   build/tests/bench/stats_aggregator_bench
//
// The figures are printed (items_per_second, bytes_per_vm_series), not
// asserted.
#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "benchmark/benchmark.h"
#include "server/stats/stats_aggregator.h"

namespace cosched::server {
namespace {

constexpr int64_t kSec = 1000000000;
constexpr int kVmsPerHost = 50;
constexpr int kCores = 64;

using Windows = google::protobuf::RepeatedPtrField<v1::StatsWindow>;

// A 10 s window ending at end_ns, with kVmsPerHost VMs and kCores cores.
Windows OneWindow(int host, int64_t end_ns) {
  Windows ws;
  v1::StatsWindow* w = ws.Add();
  w->set_end_unix_ns(end_ns);
  w->set_start_unix_ns(end_ns - 10 * kSec);
  w->set_events(50000);
  for (int v = 0; v < kVmsPerHost; ++v) {
    v1::VMStats* vm = w->add_vms();
    vm->set_vm_id("vm-" + std::to_string(host) + "-" + std::to_string(v));
    v1::SiblingShare* s = vm->mutable_share();
    s->set_run_ns(8 * kSec);
    s->set_same_ns(4 * kSec);
    s->set_idle_ns(3 * kSec);
    s->set_foreign_ns(kSec);
    s->set_foreign_intervals(100);
    s->set_longest_foreign_ns(20000);
  }
  for (int c = 0; c < kCores; ++c) {
    v1::CoreShare* core = w->add_cores();
    core->set_core(c);
    core->set_both_busy_ns(5 * kSec);
    core->set_one_idle_ns(3 * kSec);
    core->set_both_idle_ns(2 * kSec);
  }
  return ws;
}

constexpr int64_t kStart = 1800000000LL * kSec;
// csd's clock in the Add benchmark: the latest window end any thread sent.
std::atomic<int64_t> g_latest_end{kStart};

void BM_AddReport(benchmark::State& state) {
  static StatsAggregator* stats = nullptr;
  // Few enough hosts that most Reports find their series (the steady
  // state); the first Report of each host creates 50.
  constexpr int kHosts = 200;
  if (state.thread_index() == 0) {
    stats = new StatsAggregator([] { return g_latest_end.load(); });
  }
  // Each thread reports for its own hosts, as gRPC threads do.
  std::vector<Windows> reports;
  for (int h = 0; h < 16; ++h) reports.push_back(OneWindow(h, 0));
  int64_t round = 1;
  int64_t ignored = 0;
  int host = state.thread_index();
  for (auto _ : state) {
    Windows& ws = reports[host % reports.size()];
    // Each host's next window follows its last one.
    const int64_t end = kStart + round * 10 * kSec;
    ws[0].set_end_unix_ns(end);
    ws[0].set_start_unix_ns(end - 10 * kSec);
    int64_t latest = g_latest_end.load();
    while (latest < end && !g_latest_end.compare_exchange_weak(latest, end)) {
    }
    ignored += stats->Add("hv-" + std::to_string(host), ws, 0, {}, kVmsPerHost);
    host += state.threads();
    if (host >= kHosts) {
      host = state.thread_index();
      ++round;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["vms_per_report"] =
      benchmark::Counter(kVmsPerHost, benchmark::Counter::kAvgThreads);
  // Must be 0: every window was taken.
  state.counters["ignored"] = benchmark::Counter(static_cast<double>(ignored),
                                                 benchmark::Counter::kAvgThreads);
  if (state.thread_index() == 0) {
    delete stats;
    stats = nullptr;
  }
}
BENCHMARK(BM_AddReport)->Threads(1)->Threads(2)->UseRealTime()->MinTime(2.0);

void BM_QueryTenant(benchmark::State& state) {
  constexpr int kHosts = 200;
  StatsAggregator stats([] { return kStart; });
  // 30 min of 10 s windows from every host, plus hourly ones for a day.
  for (int h = 0; h < kHosts; ++h) {
    for (int i = 180; i > 0; --i) {
      stats.Add("hv-" + std::to_string(h), OneWindow(h, kStart - i * 10 * kSec), 0, {},
                kVmsPerHost);
    }
  }
  // The tenant: 5 VMs of each host.
  std::vector<std::string> tenant;
  for (int h = 0; h < kHosts; ++h) {
    for (int v = 0; v < 5; ++v) {
      tenant.push_back("vm-" + std::to_string(h) + "-" + std::to_string(v));
    }
  }
  for (auto _ : state) {
    v1::GetStatsResponse r = stats.QueryVms(tenant, state.range(0));
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["vms"] = static_cast<double>(tenant.size());
}
BENCHMARK(BM_QueryTenant)->Arg(300)->Arg(86400);

// Every bucket of every series used: 20 hosts x 50 VMs report a day of
// windows ending at `now`, one per 10 minutes (every hour bucket) and one
// a minute over the last hour (every minute bucket).
void ReportADay(StatsAggregator& stats, int64_t now) {
  for (int h = 0; h < 20; ++h) {
    std::vector<int64_t> ends;
    for (int i = 24 * 6; i > 6; --i) ends.push_back(now - i * 600 * kSec);
    for (int i = 60; i >= 1; --i) ends.push_back(now - i * 60 * kSec + kSec);
    for (int64_t end : ends) {
      stats.Add("hv-" + std::to_string(h), OneWindow(h, end), 0, {}, kVmsPerHost);
    }
  }
}

// Heap bytes in use (freed memory that malloc keeps does not count).
size_t HeapInUse() { return mallinfo2().uordblks; }

// The heap of a series with every bucket used (ReportADay).
void BM_MemoryPerVmSeries(benchmark::State& state) {
  for (auto _ : state) {
    const size_t before = HeapInUse();
    const int64_t now = kStart;
    StatsAggregator stats([&] { return now; });
    ReportADay(stats, now);
    const size_t after = HeapInUse();
    state.counters["vm_series"] = static_cast<double>(stats.VmSeriesCount());
    state.counters["bytes_per_vm_series"] =
        static_cast<double>(after - before) / static_cast<double>(stats.VmSeriesCount());
    // The hosts' own rings (64 cores each) are in the figure too. The VMs'
    // buckets alone, packed, with their rings' room:
    state.counters["vm_bucket_bytes_per_series"] =
        static_cast<double>(stats.VmBucketBytes()) / static_cast<double>(stats.VmSeriesCount());
    state.counters["vm_bytes_per_bucket"] =
        static_cast<double>(stats.VmBucketBytes()) / static_cast<double>(stats.VmBucketCount());
  }
}
BENCHMARK(BM_MemoryPerVmSeries)->Iterations(1);

// Buckets per series held by VMs gone from every host (issue #36 item 3):
// the 20 hosts' 50 VMs report a day (ReportADay), then every host reports 50
// other VMs, one window a minute, for two hours. The gone VMs' buckets are
// the aggregator's less those of a second one fed only the two hours.
void BM_BucketsOfGoneVms(benchmark::State& state) {
  for (auto _ : state) {
    int64_t now = kStart;
    StatsAggregator stats([&] { return now; });
    StatsAggregator later_only([&] { return now; });
    ReportADay(stats, now);
    const double gone = static_cast<double>(stats.VmSeriesCount());
    state.counters["buckets_per_series_at_leaving"] =
        static_cast<double>(stats.VmBucketCount()) / gone;
    for (int m = 1; m <= 120; ++m) {
      now = kStart + m * 60 * kSec;
      for (int h = 0; h < 20; ++h) {
        // Host h's new VMs are named as host h + 1000's.
        stats.Add("hv-" + std::to_string(h), OneWindow(h + 1000, now), 0, {}, kVmsPerHost);
        later_only.Add("hv-" + std::to_string(h), OneWindow(h + 1000, now), 0, {},
                       kVmsPerHost);
      }
    }
    const double left =
        static_cast<double>(stats.VmBucketCount() - later_only.VmBucketCount()) / gone;
    state.counters["buckets_per_gone_series_2h_later"] = left;
    state.counters["bytes_per_gone_series_2h_later"] =
        static_cast<double>(stats.VmBucketBytes() - later_only.VmBucketBytes()) / gone;
  }
}
BENCHMARK(BM_BucketsOfGoneVms)->Iterations(1);

// VM churn (issue #36's "1 000 VMs a minute created and deleted"): 200
// hosts of 50 VMs report a window a minute for 30 minutes while 1 000 VMs a
// minute are replaced by new ones (5 per host). With the store's answers
// (Arg 1: what csd's store would say, the running set and 20 tenants) the
// gone VMs' series fold into their tenants'; without (Arg 0: the aggregator
// before the fold) they stay until their host's series limit evicts them.
// Counters: the aggregator's heap and series at minutes 5, 15 and 30.
Windows WindowOf(const std::vector<std::string>& vms, int64_t end_ns) {
  Windows ws;
  v1::StatsWindow* w = ws.Add();
  w->set_end_unix_ns(end_ns);
  w->set_start_unix_ns(end_ns - 10 * kSec);
  for (const std::string& id : vms) {
    v1::VMStats* vm = w->add_vms();
    vm->set_vm_id(id);
    vm->mutable_share()->set_run_ns(8 * kSec);
    vm->mutable_share()->set_same_ns(8 * kSec);
  }
  return ws;
}

void BM_ChurnHeap(benchmark::State& state) {
  constexpr int kHosts = 200;
  constexpr int kChurnPerMinute = 1000;
  constexpr int kMinutes = 30;
  const bool fold = state.range(0) != 0;
  for (auto _ : state) {
    const size_t before = HeapInUse();
    int64_t now = kStart;
    int64_t next_id = 0;
    absl::flat_hash_set<std::string> running;
    std::vector<std::vector<std::string>> vms(kHosts);
    auto fresh = [&] {
      std::string id = "churn-" + std::to_string(next_id++);
      running.insert(id);
      return id;
    };
    for (auto& host : vms) {
      for (int v = 0; v < kVmsPerHost; ++v) host.push_back(fresh());
    }
    StatsAggregator stats([&] { return now; });
    if (fold) {
      stats.SetVmFacts([&](const std::vector<std::string>& ids) {
        absl::flat_hash_map<std::string, StatsAggregator::VmFacts> facts;
        for (const std::string& id : ids) {
          facts[id] = {running.contains(id),
                       "tenant-" + std::to_string(std::hash<std::string>()(id) % 20)};
        }
        return facts;
      });
    }
    for (int m = 1; m <= kMinutes; ++m) {
      now = kStart + m * 60 * kSec;
      for (int c = 0; c < kChurnPerMinute; ++c) {
        std::string& slot = vms[c % kHosts][(m * 7 + c / kHosts) % kVmsPerHost];
        running.erase(slot);
        slot = fresh();
      }
      for (int h = 0; h < kHosts; ++h) {
        stats.Add("hv-" + std::to_string(h), WindowOf(vms[h], now), 0, {}, kVmsPerHost);
      }
      if (m == 5 || m == 15 || m == kMinutes) {
        const std::string at = "_min" + std::to_string(m);
        state.counters["heap_mib" + at] =
            static_cast<double>(HeapInUse() - before) / (1024.0 * 1024.0);
        state.counters["series" + at] = static_cast<double>(stats.VmSeriesCount());
      }
    }
    state.counters["folded"] = static_cast<double>(stats.FoldedSeriesCount());
    state.counters["evicted"] = static_cast<double>(stats.EvictedSeriesCount());
    state.counters["live_vms"] = kHosts * kVmsPerHost;
  }
}
BENCHMARK(BM_ChurnHeap)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cosched::server

BENCHMARK_MAIN();
