// One pass of csd's policy engine (server/engine/engine_loop.h) over a whole
// fleet, from stats, as csd runs it every replan_interval: the fleet is
// written straight into a fresh SQLite store (hosts of 32 cores x 2
// siblings, 20 VMs of 2 vCPUs each, four tenants of which two are in mode
// auto and allow vm and tenant), every host then Reports its VMs with one
// stats window through Reports::ApplyReport (each VM busy 20-90% of the time), and
// the engine's RunPass is timed twice:
//   - cold: every host runs engine-managed VMs at level vm, so each is
//     read, predicted twice (now and planned) and, where the gain is
//     enough, rewritten;
//   - steady: the next pass, with no new stats: hosts that took the
//     engine's layout are read and grouped, nothing predicted or written;
//     hosts that min_gain refused are judged again.
// Prints hosts per second and CPU seconds of each pass; fails only when
// the fleet cannot be written or reported.
//
// With --noise SD, more passes follow, each after every host reported one
// more minute's window in which each VM's load is its own plus a normal
// deviate of SD: the steady state of a fleet whose measured loads wander.
//
// With --compare-fresh, a second fleet, the same in every way, is planned
// pass for pass by an engine that predicts a host again whenever any load
// moved (EngineOptions' reuse bounds 0): after each pass the bench counts
// the hosts and VMs whose layouts differ, what reusing predictions within
// the default bounds changed in the engine's decisions, and compares the
// two engines' dry-run plans of every host: gains and verdicts. Those plans
// are predicted and memoized too, so the fleet's pass figures in this mode
// are not the engine's alone: time without it.
//
// With --etcd, the fleet's store is a local etcd member (Debian's etcd,
// fsync off: this is not about durability) instead of SQLite, and the
// engine reads it through EtcdStore's cache (issue #35 item 4).
//
// With --concurrent-plans N (issue #32 item 9), no pass runs: for
// --seconds, N clients ask for a dry-run Plan of the whole fleet over and
// over while one host Reports a changed VM list every 100 ms, and the bench
// prints the Reports' latency and the Plans answered and refused. With
// --plans-on callers each Plan runs on its client's thread (as csd ran them
// on gRPC's callback threads before); with --plans-on pool they go through
// csd's QueryPool (default options), and a refused client retries after
// 100 ms.
//
//   build/tests/bench/engine_pass_bench [--hosts 10000] [--etcd] [--threads N] [--predict-s S]
//       [--screen-s S] [--noise SD [--noisy-passes N]] [--compare-fresh]
//       [--concurrent-plans N --plans-on callers|pool --seconds S]
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/api/query_pool.h"
#include "server/engine/engine_loop.h"
#include "store/etcd_store.h"
#include "store/sqlite_store.h"
#include "tests/server/test_state.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/temp_dir.h"

namespace cosched {
namespace {

struct FleetShape {
  int hosts = 10000;
  int vms_per_host = 20;
  int cores = 32;
  int vcpus = 2;
};

// Passes timed before the steady one, at most: a host has a groups move and
// at most five pinnings.
constexpr int kMaxPasses = 8;

std::string HostId(int h) { return absl::StrCat("host-", h); }
std::string VmId(int h, int v) { return absl::StrCat("vm-", h, "-", v); }
std::string TenantOf(int v) { return absl::StrCat("t", v % 4); }

absl::Status WriteFleet(store::Store& store, const FleetShape& shape, int hosts_per_commit) {
  for (int t = 0; t < 4; ++t) {
    absl::Status s = store.WriteSync([&](store::Transaction& txn) {
      v1::TenantPolicy p;
      p.set_tenant_id(absl::StrCat("t", t));
      p.set_explicitly_set(true);
      p.set_default_isolation(v1::ISOLATION_LEVEL_VM);
      p.add_allowed_isolation(v1::ISOLATION_LEVEL_VM);
      if (t < 2) {
        p.add_allowed_isolation(v1::ISOLATION_LEVEL_TENANT);
        p.set_mode(v1::POLICY_MODE_AUTO);
      }
      return txn.PutTenantPolicy(p);
    });
    if (!s.ok()) return s;
  }
  // Several hosts a transaction: each is one commit of the store.
  for (int first = 0; first < shape.hosts; first += hosts_per_commit) {
    absl::Status s = store.WriteSync([&](store::Transaction& txn) -> absl::Status {
      for (int h = first; h < std::min(shape.hosts, first + hosts_per_commit); ++h) {
        v1::Host host;
        host.set_host_id(HostId(h));
        for (int c = 0; c < shape.cores; ++c) {
          v1::Core* core = host.mutable_topology()->add_cores();
          core->set_core_id(c);
          core->add_cpus(c);
          core->add_cpus(c + shape.cores);
        }
        host.mutable_capabilities()->set_smt_active(true);
        if (absl::Status put = txn.PutHost(host); !put.ok()) return put;
        std::vector<v1::VMObservation> reported;
        for (int v = 0; v < shape.vms_per_host; ++v) {
          v1::VM vm;
          vm.set_vm_id(VmId(h, v));
          vm.set_tenant_id(TenantOf(v));
          vm.set_host_id(host.host_id());
          v1::Assignment* a = vm.mutable_assignment();
          a->set_vm_id(vm.vm_id());
          a->set_tenant_id(vm.tenant_id());
          a->set_isolation(v1::ISOLATION_LEVEL_VM);
          a->set_trust_group(absl::StrCat(vm.tenant_id(), "/vm/", vm.vm_id()));
          vm.mutable_decision()->set_decided_by(v1::DECIDED_BY_OPERATOR);
          if (absl::Status put = txn.PutVm(vm); !put.ok()) return put;
          v1::VMObservation o;
          o.set_vm_id(vm.vm_id());
          o.mutable_enforcement()->set_vcpus(shape.vcpus);
          reported.push_back(std::move(o));
        }
        if (absl::Status put =
                store::ReplaceObservations(txn, host.host_id(), reported).status();
            !put.ok()) {
          return put;
        }
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

constexpr int64_t kWindowNs = int64_t{60} * 1000000000;

// Every host reports its VMs with one window of a minute ending at `end`, at most
// `in_flight` Reports at a time. Each VM's load is the same in every call
// (its base, 20-90% busy) plus, with `noise` > 0, a normal deviate of that
// standard deviation drawn anew for each window (clamped to 1-100%).
absl::Status ReportStats(server::TestState& state, const FleetShape& shape, int in_flight,
                         int64_t end, double noise = 0, uint64_t window = 0) {
  std::mt19937_64 rng(1);
  std::mt19937_64 noise_rng(window + 2);
  std::normal_distribution<double> deviate(0, noise > 0 ? noise : 1);
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;
  absl::Status first_error;
  const int64_t span = kWindowNs;
  for (int h = 0; h < shape.hosts; ++h) {
    v1::ReportRequest request;
    request.set_host_id(HostId(h));
    v1::StatsWindow* w = request.add_stats();
    w->set_start_unix_ns(end - span);
    w->set_end_unix_ns(end);
    for (int v = 0; v < shape.vms_per_host; ++v) {
      v1::VMObservation* o = request.add_vms();
      o->set_vm_id(VmId(h, v));
      o->mutable_enforcement()->set_vcpus(shape.vcpus);
      double load = 0.2 + 0.7 * static_cast<double>(rng() % 1000) / 1000;
      if (noise > 0) load = std::clamp(load + deviate(noise_rng), 0.01, 1.0);
      v1::VMStats* s = w->add_vms();
      s->set_vm_id(o->vm_id());
      const auto run = static_cast<int64_t>(load * span * shape.vcpus);
      s->mutable_share()->set_run_ns(run);
      s->mutable_share()->set_idle_ns(run);
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return pending < in_flight; });
    ++pending;
    lock.unlock();
    state.reports.ApplyReport(request, [&](absl::StatusOr<v1::ReportResponse> r) {
      std::lock_guard<std::mutex> done(mu);
      if (!r.ok() && first_error.ok()) first_error = r.status();
      --pending;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return pending == 0; });
  return first_error;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// Times one pass; returns how many predictions it made.
int64_t TimePass(server::EngineLoop& engine, store::Store& store, const std::string& name,
                 int hosts) {
  const int64_t revision = store.CurrentRevision();
  const double cpu = CpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  const int64_t predicted = engine.predictions();
  const int64_t screened = engine.screened_predictions();
  const int changed = engine.RunPass(true);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-7s pass: %d hosts in %.2f s = %.0f hosts/s; %d changed; %.2f CPU s (%.2f cores); "
              "%lld predicted, %lld of them settled by the screen; store revision +%lld\n",
              name.c_str(), hosts, wall, hosts / wall, changed, CpuSeconds() - cpu,
              (CpuSeconds() - cpu) / wall,
              static_cast<long long>(engine.predictions() - predicted),
              static_cast<long long>(engine.screened_predictions() - screened),
              static_cast<long long>(store.CurrentRevision() - revision));
  return engine.predictions() - predicted;
}

// One fleet in a store of its own, reported to, with the engine that
// plans it. Its stats clock is the caller's.
struct BenchFleet {
  cosched::testing::TempDir dir;
  std::unique_ptr<cosched::testing::EtcdMember> etcd;  // with --etcd
  std::unique_ptr<store::Store> store;
  std::unique_ptr<server::TestState> state;
  std::unique_ptr<server::EngineLoop> engine;
};

absl::StatusOr<std::unique_ptr<BenchFleet>> MakeFleet(const FleetShape& shape,
                                                     const server::EngineOptions& options,
                                                     std::atomic<int64_t>& stats_now,
                                                     bool on_etcd) {
  auto fleet = std::make_unique<BenchFleet>();
  // etcd takes a few hosts a Txn (its request size limit), SQLite hundreds.
  int hosts_per_commit = 250;
  if (on_etcd) {
    cosched::testing::EtcdMemberOptions member;
    member.max_txn_ops = 10000;
    fleet->etcd = std::make_unique<cosched::testing::EtcdMember>(member);
    if (absl::Status s = fleet->etcd->Start(); !s.ok()) return s;
    store::EtcdStoreOptions store_options;
    store_options.client = fleet->etcd->ClientOptions();
    auto store = store::EtcdStore::Open(store_options);
    if (!store.ok()) return store.status();
    fleet->store = std::move(*store);
    hosts_per_commit = 5;
  } else {
    store::SqliteStoreOptions store_options;
    store_options.data_dir = fleet->dir.Sub("data");
    auto store = store::SqliteStore::Open(store_options);
    if (!store.ok()) return store.status();
    fleet->store = std::move(*store);
  }
  if (absl::Status s = WriteFleet(*fleet->store, shape, hosts_per_commit); !s.ok()) return s;
  fleet->state = std::make_unique<server::TestState>(
      *fleet->store, [&stats_now] { return stats_now.load(); });
  if (absl::Status s = fleet->state->Load(); !s.ok()) return s;
  if (absl::Status s = ReportStats(*fleet->state, shape, 64, stats_now); !s.ok()) return s;
  fleet->engine = fleet->state->MakeEngine(options);
  return fleet;
}

// Every VM of `store`, ordered by id.
absl::StatusOr<std::vector<v1::VM>> AllVms(store::Store& store) {
  std::vector<v1::VM> all;
  absl::Status read = store.Read([&](store::Transaction& txn) -> absl::Status {
    store::Page page;
    page.limit = 1000;
    while (true) {
      auto vms = txn.ListVms(store::VmFilter(), page);
      if (!vms.ok()) return vms.status();
      if (vms->empty()) return absl::OkStatus();
      page.after = vms->back().vm_id();
      for (v1::VM& vm : *vms) all.push_back(std::move(vm));
    }
  });
  if (!read.ok()) return read;
  return all;
}

// Prints how many hosts and VMs hold another layout (level, trust group or
// pin) in `fresh` than in `fleet`: the two fleets are the same and saw the
// same windows, so that is what reusing predictions changed.
absl::Status CompareLayouts(store::Store& fleet, store::Store& fresh) {
  ASSIGN_OR_RETURN(std::vector<v1::VM> a, AllVms(fleet));
  ASSIGN_OR_RETURN(std::vector<v1::VM> b, AllVms(fresh));
  if (a.size() != b.size()) {
    return absl::InternalError(absl::StrCat(a.size(), " VMs against ", b.size()));
  }
  std::set<std::string> hosts;
  int vms = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const v1::Assignment& x = a[i].assignment();
    const v1::Assignment& y = b[i].assignment();
    if (x.isolation() != y.isolation() || x.trust_group() != y.trust_group() ||
        x.pin().SerializeAsString() != y.pin().SerializeAsString()) {
      ++vms;
      hosts.insert(a[i].host_id());
    }
  }
  std::printf("        layouts unlike those re-predicted at every move: %zu hosts, %d VMs\n",
              hosts.size(), vms);
  return absl::OkStatus();
}

// What the two engines would do now (EngineLoop::Plan, a dry run of every
// host): how far the fleet's predicted gains, reused within the bounds, are
// from the fresh ones, and on how many hosts the verdict differs (a
// change, and whether it would be applied).
absl::Status ComparePlans(server::EngineLoop& fleet, server::EngineLoop& fresh) {
  ASSIGN_OR_RETURN(v1::PlanResponse a, fleet.Plan(v1::PlanRequest()));
  ASSIGN_OR_RETURN(v1::PlanResponse b, fresh.Plan(v1::PlanRequest()));
  if (a.hosts_size() != b.hosts_size()) {
    return absl::InternalError(absl::StrCat(a.hosts_size(), " hosts planned against ",
                                            b.hosts_size()));
  }
  double sum = 0;
  double max = 0;
  int verdicts = 0;
  for (int i = 0; i < a.hosts_size(); ++i) {
    const v1::HostLayoutPlan& x = a.hosts(i);
    const v1::HostLayoutPlan& y = b.hosts(i);
    const double off = std::abs(x.planned().gain() - y.planned().gain());
    sum += off;
    max = std::max(max, off);
    if (x.changes().empty() != y.changes().empty() || x.would_apply() != y.would_apply()) {
      ++verdicts;
    }
  }
  std::printf("        planned gain against fresh predictions: mean %.3f, max %.3f percentage "
              "points; verdict differs on %d of %d hosts\n",
              a.hosts_size() > 0 ? 100 * sum / a.hosts_size() : 0.0, 100 * max, verdicts,
              a.hosts_size());
  return absl::OkStatus();
}

// --concurrent-plans: Report latency while `clients` ask for fleet-wide
// Plans, on their own threads or through a QueryPool.
int RunPlanContention(BenchFleet& fleet, const FleetShape& shape, int clients, bool pool,
                      double seconds) {
  // The bench's host Reports faster than an agent does, for more samples.
  fleet.state->reports.report_rate().set_options({.per_second = 0});
  std::optional<server::QueryPool> queries;
  if (pool) queries.emplace(server::QueryPoolOptions{});
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> planners;
  for (int c = 0; c < clients; ++c) {
    planners.emplace_back([&] {
      while (!stop.load()) {
        if (!queries) {
          if (fleet.engine->Plan(v1::PlanRequest()).ok()) ++answered;
          continue;
        }
        std::promise<void> done;
        absl::Status queued = queries->Submit("Plan", [&](absl::Status expired) {
          if (expired.ok() && fleet.engine->Plan(v1::PlanRequest()).ok()) {
            ++answered;
          } else {
            ++refused;
          }
          done.set_value();
        });
        if (!queued.ok()) {
          ++refused;
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          continue;
        }
        done.get_future().wait();
      }
    });
  }
  std::vector<double> latencies_ms;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
    v1::ReportRequest request;
    request.set_host_id(HostId(0));
    for (int v = 0; v < shape.vms_per_host; ++v) {
      v1::VMObservation* o = request.add_vms();
      o->set_vm_id(VmId(0, v));
      o->mutable_enforcement()->set_vcpus(shape.vcpus);
      // A changed Report each time: a durable write, as a VM's change is.
      o->mutable_enforcement()->set_threads_found(v == 0 ? i % 2 + 1 : 1);
    }
    std::promise<absl::Status> result;
    const auto sent = std::chrono::steady_clock::now();
    fleet.state->reports.ApplyReport(request, [&](absl::StatusOr<v1::ReportResponse> r) {
      result.set_value(r.status());
    });
    absl::Status status = result.get_future().get();
    latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent)
            .count());
    if (!status.ok()) {
      std::fprintf(stderr, "report: %s\n", status.ToString().c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  for (std::thread& t : planners) t.join();
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto at = [&](double q) {
    return latencies_ms[std::min(latencies_ms.size() - 1,
                                 static_cast<size_t>(q * static_cast<double>(latencies_ms.size())))];
  };
  std::printf("%d concurrent fleet-wide Plans on %s for %.0f s: %zu Reports, latency p50 %.2f ms, "
              "p99 %.2f ms, max %.2f ms; Plans answered %d, refused %d\n",
              clients, pool ? "the query pool" : "their callers' threads", seconds,
              latencies_ms.size(), at(0.5), at(0.99), latencies_ms.back(), answered.load(),
              refused.load());
  return 0;
}

int Run(int argc, char** argv) {
  FleetShape shape;
  int threads = server::DefaultPlannerThreads();
  CLI::App app{"Times one pass of csd's policy engine over a fleet, from stats."};
  app.add_option("--hosts", shape.hosts, "hosts in the fleet")->check(CLI::Range(1, 100000));
  app.add_option("--vms-per-host", shape.vms_per_host, "VMs on each host")
      ->check(CLI::Range(1, 64));
  app.add_option("--threads", threads, "engine.planner_threads")->check(CLI::Range(1, 64));
  double predict_s = server::EngineOptions().predict_s;
  app.add_option("--predict-s", predict_s, "engine.predict_s")->check(CLI::Range(0.25, 10.0));
  double screen_s = server::EngineOptions().screen_s;
  app.add_option("--screen-s", screen_s, "engine.screen_s (0: off)")
      ->check(CLI::Range(0.0, 10.0));
  double noise = 0;
  int noisy_passes = 5;
  app.add_option("--noise", noise,
                 "after the steady pass: a new window each pass, every VM's load its own "
                 "plus a normal deviate of this standard deviation (0: off)")
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--noisy-passes", noisy_passes, "passes with --noise")
      ->check(CLI::Range(1, 60));
  bool compare_fresh = false;
  app.add_flag("--compare-fresh", compare_fresh,
               "plan a second, identical fleet whose predictions are made again at every "
               "load move (reuse bounds 0), and count after each pass the layouts that differ");
  int concurrent_plans = 0;
  app.add_option("--concurrent-plans", concurrent_plans,
                 "instead of passes: this many clients ask for fleet-wide Plans while one host "
                 "Reports; prints the Reports' latency")
      ->check(CLI::Range(0, 64));
  std::string plans_on = "pool";
  app.add_option("--plans-on", plans_on, "where the Plans run: callers or pool")
      ->check(CLI::IsMember({"callers", "pool"}));
  double seconds = 20;
  app.add_option("--seconds", seconds, "how long --concurrent-plans runs")
      ->check(CLI::Range(1.0, 600.0));
  bool on_etcd = false;
  app.add_flag("--etcd", on_etcd,
               "keep the fleet in a local etcd member (fsync off) instead of SQLite");
  double settle_s = 0;
  app.add_option("--settle-s", settle_s,
                 "wait this long after writing the fleet before the first pass (etcd works on "
                 "for seconds after a large load, on the same cores)")
      ->check(CLI::Range(0.0, 600.0));
  CLI11_PARSE(app, argc, argv);

  server::EngineOptions options;
  options.planner_threads = threads;
  options.predict_s = predict_s;
  options.screen_s = screen_s;
  if (absl::Status s = server::ValidateEngineOptions(options); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  server::EngineOptions fresh_options = options;
  fresh_options.reuse_vm_load_move = 0;
  fresh_options.reuse_host_load_share = 0;

  // csd's stats clock: the end of the newest window. Windows follow one
  // another without gaps, as an agent's do, a minute of stats time each
  // noisy pass however long the passes took.
  const int64_t first_end = absl::ToUnixNanos(absl::Now());
  std::atomic<int64_t> stats_now{first_end};
  auto start = std::chrono::steady_clock::now();
  auto fleet = MakeFleet(shape, options, stats_now, on_etcd);
  if (!fleet.ok()) {
    std::fprintf(stderr, "writing and reporting the fleet: %s\n",
                 fleet.status().ToString().c_str());
    return 1;
  }
  std::printf("fleet: %d hosts x %d VMs of %d vCPUs on %d cores, on %s, written and reported "
              "in %.1f s\n",
              shape.hosts, shape.vms_per_host, shape.vcpus, shape.cores,
              on_etcd ? "etcd" : "SQLite",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (on_etcd) {
    const auto& cache = static_cast<store::EtcdStore&>(*(*fleet)->store).cache();
    std::printf("etcd store's cache: %zu keys, %zu versions\n", cache.keys(), cache.versions());
  }
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  std::printf("bench's peak RSS after the fleet: %.0f MiB\n", usage.ru_maxrss / 1024.0);
  if (concurrent_plans > 0) {
    return RunPlanContention(**fleet, shape, concurrent_plans, plans_on == "pool", seconds);
  }
  std::unique_ptr<BenchFleet> fresh;
  if (compare_fresh) {
    auto made = MakeFleet(shape, fresh_options, stats_now, on_etcd);
    if (!made.ok()) {
      std::fprintf(stderr, "writing and reporting the fresh fleet: %s\n",
                   made.status().ToString().c_str());
      return 1;
    }
    fresh = std::move(*made);
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(settle_s));
  std::printf("engine: planner_threads %d, predictions of %.1f simulated s, screen %.2f s\n",
              threads, options.predict_s, options.screen_s);
  // Each pass of the fleet, and of the fresh one after it. Returns the
  // fleet's predictions, or -1 when the comparison failed.
  auto pass = [&](const std::string& name) -> int64_t {
    const int64_t predicted = TimePass(*(*fleet)->engine, *(*fleet)->store, name, shape.hosts);
    if (fresh == nullptr) return predicted;
    TimePass(*fresh->engine, *fresh->store, "fresh", shape.hosts);
    absl::Status compared = CompareLayouts(*(*fleet)->store, *fresh->store);
    if (compared.ok()) compared = ComparePlans(*(*fleet)->engine, *fresh->engine);
    if (!compared.ok()) {
      std::fprintf(stderr, "comparing the fleets: %s\n", compared.ToString().c_str());
      return -1;
    }
    return predicted;
  };
  // The first pass tries each host's first move (its groups); each later
  // one the host's next move (a pinning), predicted once, until a round of
  // moves is over and a pass predicts nothing: then it is steady.
  if (pass("cold") < 0) return 1;
  for (int n = 2; n <= kMaxPasses; ++n) {
    const int64_t predicted = pass(absl::StrCat("pass ", n));
    if (predicted < 0) return 1;
    if (predicted == 0) break;
  }
  if (pass("steady") < 0) return 1;
  // Loads that wander as measured ones do: each pass after a minute's new
  // window of every host (not timed), the engine's 5-minute mean moves.
  for (int n = 1; noise > 0 && n <= noisy_passes; ++n) {
    stats_now = first_end + n * kWindowNs;
    for (BenchFleet* f : {fleet->get(), fresh.get()}) {
      if (f == nullptr) continue;
      if (absl::Status s = ReportStats(*f->state, shape, 64, stats_now, noise, n); !s.ok()) {
        std::fprintf(stderr, "reporting stats: %s\n", s.ToString().c_str());
        return 1;
      }
    }
    if (pass(absl::StrCat("noisy ", n)) < 0) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace cosched

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_minloglevel = 1;  // the audit log of every write is not the figure
  return cosched::Run(argc, argv);
}
