// Fan-out load on csd (one, or several replicas on etcd: --replicas).
// Simulated agents, each its own host, Register,
// Report their VMs and watch their host's assignments; then a control-plane
// client tags VMs of random hosts at a steady open-loop rate. Prints csd's
// memory per connected agent and its CPU, and the fan-out latency: TagVM
// sent -> the agent of the VM's host has the delta.
//
// With --report-interval S the agents go on reporting as cs-agent does
// (agent/server_session.cc): every S seconds, after every watch message,
// never closer than --min-report-gap, each Report carrying every VM and the
// stats windows closed since the last accepted one. The phases after setup
// are then csd's steady state, and it also prints Reports/s and, from
// csd's /metrics, store writes/s and revisions/s.
//
// With --churn-per-minute N a last phase replaces N VMs a minute across the
// fleet (the agent reports the new VM, the control plane tags it and
// untags the one deleted) and prints csd's RSS and heap each minute: its
// memory must level off as series of deleted VMs are folded and freed.
//
//   csd_fanout_loadgen [--agents 10000] [--vms-per-host 2] [--tag-rate 500]
//                      [--seconds 30] [--report-interval 0] [--cores-per-host 1]
//                      [--connections 0] [--replicas 1]
//                      [--churn-per-minute 0 [--churn-seconds 60]
//                       [--churn-lifetime-minutes 5]]
//                      [--server HOST:PORT[,HOST:PORT...] [--csd-pid PID]
//                      [--metrics HOST:PORT]]
//
// Without --server it runs the csd binary as a separate process on a
// temporary data dir, so that /proc shows csd's own memory and CPU. With
// --replicas N (2 or more) it runs N csd processes on one etcd member
// (fsync on) instead: agents are spread over the replicas round-robin,
// TagVM goes to the first, so most deltas reach their agent through
// another replica's watch of etcd; memory and CPU are the replicas' sums.
//
// In this file, in order: the tagging phase's load (RunTagger), the csd
// processes it runs (StartLocalCsds), and Run: options, setup, then the
// phases. Elsewhere: the simulated agents (fanout_fleet.{h,cc}), what a
// phase is measured by (fanout_measure.{h,cc}: Mark, TakeMark, PrintPhase),
// the churn phase (fanout_churn.{h,cc}: RunChurn).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/bench/fanout_churn.h"
#include "tests/bench/fanout_fleet.h"
#include "tests/bench/fanout_measure.h"
#include "tests/bench/loadgen_support.h"
#include "tests/testing/etcd_member.h"

namespace cosched::bench {
namespace {

// Sends TagVM at `rate` per second for `duration`, open loop: on schedule
// whether or not earlier calls have returned. Returns the seconds it took.
double RunTagger(v1::ControlPlane::Stub* stub, TagLedger* ledger,
                 const std::string& run, int vms_per_host, double rate,
                 double duration, int64_t* no_vm_free) {
  std::mt19937_64 random(42);
  const auto begin = Clock::now();
  const int64_t total = static_cast<int64_t>(rate * duration);
  for (int64_t i = 0; i < total; ++i) {
    std::this_thread::sleep_until(
        begin + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(i / rate)));
    int64_t vm = ledger->ClaimVm(random);
    if (vm < 0) {
      ++*no_vm_free;
      continue;
    }
    auto* call = new TagCall();
    call->request.set_vm_id(VmId(run, vm, vms_per_host));
    call->context.set_deadline(DeadlineIn(seconds(30)));
    int64_t seq = ledger->Send(vm);
    if (seq < 0) {
      delete call;
      break;
    }
    call->request.add_interference_classes(ledger->ClassOf(seq));
    stub->async()->TagVM(&call->context, &call->request, &call->response,
                         [call, ledger, seq](grpc::Status status) {
                           ledger->Acknowledged(seq, status.ok());
                           delete call;
                         });
  }
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

// The csd processes the load runs against when no --server is given: one
// on SQLite, or `replicas` (2 or more) on one etcd member of their own.
struct LocalCsds {
  // etcd first: the replicas stop before it does.
  std::unique_ptr<cosched::testing::EtcdMember> etcd;
  std::vector<std::unique_ptr<CsdProcess>> csds;
  std::string servers;  // their addresses, comma-separated
  std::vector<pid_t> pids;
  std::vector<std::string> metrics;  // their /metrics addresses
  std::string store = "SQLite synchronous=FULL";
};

absl::StatusOr<LocalCsds> StartLocalCsds(const std::string& binary, int replicas,
                                         int enforcement_write_interval_s) {
  LocalCsds local;
  // csd's own default when unset (-1).
  std::string extra_config =
      enforcement_write_interval_s < 0
          ? ""
          : absl::StrCat("enforcement_write_interval_s: ", enforcement_write_interval_s, "\n");
  if (replicas > 1) {
    cosched::testing::EtcdMemberOptions etcd_options;
    etcd_options.fsync = true;
    // A host's first Report writes each VM's id and UUID keys.
    etcd_options.max_txn_ops = 10000;
    local.etcd = std::make_unique<cosched::testing::EtcdMember>(etcd_options);
    if (absl::Status started = local.etcd->Start(); !started.ok()) {
      return absl::Status(started.code(), absl::StrCat("etcd: ", started.message()));
    }
    absl::StrAppend(&extra_config, "store:\n  etcd:\n    endpoints: [\"", local.etcd->endpoint(),
                                "\"]\n    prefix: /cosched-load\n    max_txn_ops: 10000\n");
    local.store = absl::StrCat(replicas, " replicas on one etcd member (fsync on)");
  }
  std::vector<std::string> addresses;
  for (int i = 0; i < replicas; ++i) {
    // With its /metrics on: the store's writes and revision are read there.
    // On etcd each needs a name of its own (their default, the host
    // name, is one for all on one machine).
    const std::string config =
        replicas > 1 ? absl::StrCat(extra_config, "    replica_name: csd-", i, "\n") : extra_config;
    absl::StatusOr<std::unique_ptr<CsdProcess>> started =
        CsdProcess::Start(binary, /*serve_metrics=*/true, config);
    if (!started.ok()) return started.status();
    addresses.push_back((*started)->address());
    local.pids.push_back((*started)->pid());
    local.metrics.push_back((*started)->metrics_address());
    local.csds.push_back(std::move(*started));
  }
  local.servers = absl::StrJoin(addresses, ",");
  return local;
}

int Run(int argc, char** argv) {
  CLI::App app{"csd fan-out load generator"};
  Fleet::Options fleet_options;
  fleet_options.agents = 10000;
  std::string server, metrics_address, csd_binary = CSD_BINARY;
  int csd_pid = 0;
  int replica_count = 1;
  double rate = 500, duration = 30, idle_seconds = 5, timeout = 10;
  double report_interval = 0, min_report_gap = 1, window_seconds = 0, warmup_seconds = -1;
  bool no_stats = false;
  app.add_option("--agents", fleet_options.agents, "simulated agents (hosts)")
      ->check(CLI::Range(1, 60000));
  app.add_option("--vms-per-host", fleet_options.vms_per_host, "VMs each agent reports")
      ->check(CLI::Range(1, 100));
  app.add_option("--cores-per-host", fleet_options.reporting.cores,
                 "cores (of two CPUs) each agent registers, and reports shares of")
      ->check(CLI::Range(1, 1024));
  app.add_option("--report-interval", report_interval,
                 "seconds between an agent's Reports, as cs-agent's report_interval; "
                 "agents also Report after every watch message. 0: one Report at setup only")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--min-report-gap", min_report_gap,
                 "least seconds between two Reports of an agent (cs-agent's min_report_gap)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--window-seconds", window_seconds,
                 "stats window length; 0: the report interval, as cs-agent")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_flag("--no-stats", no_stats, "Reports carry no stats windows");
  app.add_option("--warmup-seconds", warmup_seconds,
                 "after setup, before measuring, with reporting on; default: one "
                 "interval and 3 s, so that every agent reports on its own schedule")
      ->check(CLI::Range(-1.0, 3600.0));
  app.add_option("--connections", fleet_options.connections,
                 "HTTP/2 connections carrying the agents; 0: one per agent, as real agents")
      ->check(CLI::Range(0, 60000));
  app.add_option("--setup-concurrency", fleet_options.concurrency,
                 "agents connecting at a time")
      ->check(CLI::Range(1, 60000));
  app.add_option("--tag-rate", rate, "TagVM calls per second")->check(CLI::Range(0.1, 100000.0));
  app.add_option("--seconds", duration, "length of the tagging phase; 0: none")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--idle-seconds", idle_seconds,
                 "CPU of csd with every agent connected and nothing tagged, measured over this")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--timeout", timeout, "after tagging, how long a delta may take before it counts as lost")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--server", server, "csd to load; default: run --csd on a temporary data dir");
  app.add_option("--csd-pid", csd_pid, "pid of the --server csd, to read its memory and CPU");
  app.add_option("--replicas", replica_count,
                 "csd replicas to run on one etcd member, the agents spread over them")
      ->check(CLI::Range(1, 5));
  app.add_option("--metrics", metrics_address,
                 "HOST:PORT of the --server csd's /metrics, for its store writes and revision");
  app.add_option("--csd", csd_binary, "csd binary to run");
  double churn_per_minute = 0, churn_seconds = 60;
  app.add_option("--churn-per-minute", churn_per_minute,
                 "after tagging: VMs deleted and created a minute across the fleet, each new "
                 "one tagged and each deleted one untagged; 0: no churn phase")
      ->check(CLI::Range(0.0, 600000.0));
  app.add_option("--churn-seconds", churn_seconds, "length of the churn phase")
      ->check(CLI::Range(1.0, 86400.0));
  double churn_lifetime = 5;
  app.add_option("--churn-lifetime-minutes", churn_lifetime,
                 "minutes a churned VM lives: after this many minutes each churn deletes the "
                 "oldest churned VM, so that the tagged VMs level off")
      ->check(CLI::Range(0.0, 1440.0));
  int enforcement_write_interval_s = -1;
  app.add_option("--enforcement-write-interval-s", enforcement_write_interval_s,
                 "csd.yaml enforcement_write_interval_s of the csd run (default: csd's); 0 "
                 "writes every Report that changes enforcement")
      ->check(CLI::Range(0, 3600));
  CLI11_PARSE(app, argc, argv);
  // Runs take minutes: show each phase as it ends, also into a file.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (fleet_options.connections == 0 ||
      fleet_options.connections > fleet_options.agents) {
    fleet_options.connections = fleet_options.agents;
  }
  ReportingOptions& reporting = fleet_options.reporting;
  reporting.interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(report_interval));
  reporting.min_gap = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(min_report_gap));
  reporting.window_ns = static_cast<int64_t>(
      (window_seconds > 0 ? window_seconds : report_interval) * 1e9);
  reporting.stats = !no_stats && reporting.on();
  if (warmup_seconds < 0) warmup_seconds = reporting.on() ? report_interval + 3 : 0;
  // One socket per connection in each process (csd inherits the limit).
  absl::Status raised = RaiseOpenFileLimit(fleet_options.connections + 1024);
  if (!raised.ok()) {
    std::fprintf(stderr, "csd_fanout_loadgen: %s\n", std::string(raised.message()).c_str());
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);

  LocalCsds local;
  if (server.empty()) {
    absl::StatusOr<LocalCsds> started = StartLocalCsds(csd_binary, replica_count,
                                                           enforcement_write_interval_s);
    if (!started.ok()) {
      std::fprintf(stderr, "csd_fanout_loadgen: %s\n", started.status().ToString().c_str());
      return 1;
    }
    local = std::move(*started);
    server = local.servers;
    csd_pid = local.pids[0];
  } else {
    local.store = "external";
    if (csd_pid > 0) local.pids.push_back(csd_pid);
    if (!metrics_address.empty()) local.metrics.push_back(metrics_address);
  }
  const std::vector<pid_t>& csd_pids = local.pids;
  const std::vector<std::string>& metrics = local.metrics;
  const std::string& store = local.store;
  // Fresh hosts and VMs per run, so runs against one --server do not mix.
  fleet_options.run = absl::StrCat(std::random_device()() % 1000000);
  fleet_options.server = server;
  std::printf(
      "csd at %s (%s, pid %d); %d agents over %d connections, %d VMs and %d "
      "cores each; TagVM at %.0f/s for %.0f s\n",
      server.c_str(), store.c_str(), csd_pid, fleet_options.agents, fleet_options.connections,
      fleet_options.vms_per_host, reporting.cores, rate, duration);
  if (reporting.on()) {
    std::printf(
        "agents Report every %.1f s, after every watch message, at least %.1f s "
        "apart; %s\n",
        report_interval, min_report_gap,
        reporting.stats
            ? absl::StrCat("a stats window of every VM and core each ",
                           reporting.window_ns / 1e9, " s")
                  .c_str()
            : "no stats windows");
  } else {
    std::printf("agents Report once, at setup\n");
  }

  auto control = v1::ControlPlane::NewStub(grpc::CreateChannel(
      std::string(server.substr(0, server.find(','))), grpc::InsecureChannelCredentials()));
  const size_t vms =
      static_cast<size_t>(fleet_options.agents) * fleet_options.vms_per_host;
  TagLedger ledger(fleet_options.run,
                   static_cast<size_t>(rate * duration) + 1, vms);

  std::this_thread::sleep_for(seconds(1));
  auto before = Usage(csd_pids);
  auto self_before = Usage(getpid());
  Fleet fleet(fleet_options, &ledger);
  auto setup_begin = Clock::now();
  fleet.Start();
  bool all_watching = fleet.WaitAllWatching(
      setup_begin + seconds(60 + fleet_options.agents / 20));
  double setup_s = std::chrono::duration<double>(Clock::now() - setup_begin).count();
  std::printf("setup: %d of %d agents registered, reported and watching in %.1f s (%.0f/s)\n",
              fleet.watching(), fleet_options.agents, setup_s,
              fleet.watching() / setup_s);
  if (!all_watching) {
    std::printf("setup failed: %d agents failed, first error: %s\n",
                fleet.setup_failures(), fleet.first_error().c_str());
    return 1;
  }
  // Let setup's transient buffers go before measuring what agents hold.
  std::this_thread::sleep_for(seconds(2));
  auto after = Usage(csd_pids);
  auto self_after = Usage(getpid());
  auto per_agent = [&](int64_t kib) {
    return static_cast<double>(kib - before->rss_kib) / fleet_options.agents;
  };
  if (before && after) {
    std::printf(
        "csd RSS: %lld KiB before agents, %lld KiB with %d watching: %.1f KiB "
        "per agent (peak %lld KiB, %d threads)\n",
        static_cast<long long>(before->rss_kib),
        static_cast<long long>(after->rss_kib), fleet_options.agents,
        per_agent(after->rss_kib), static_cast<long long>(after->peak_rss_kib),
        after->threads);
  }
  if (self_before && self_after) {
    std::printf("load generator RSS: %.1f KiB per agent (the client side)\n",
                static_cast<double>(self_after->rss_kib - self_before->rss_kib) /
                    fleet_options.agents);
  }
  if (warmup_seconds > 0) {
    std::printf("warm-up: %.0f s\n", warmup_seconds);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(warmup_seconds));
  }
  if (idle_seconds > 0) {
    Mark idle_begin = TakeMark(csd_pids, fleet, metrics);
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
    Mark idle_end = TakeMark(csd_pids, fleet, metrics);
    PrintPhase(reporting.on() ? "steady state, agents reporting, nothing tagged"
                              : "idle, every agent watching, nothing tagged",
               idle_begin, idle_end);
  }

  fleet.RecordReportLatencies();
  Mark tag_begin = TakeMark(csd_pids, fleet, metrics);
  int64_t no_vm_free = 0;
  double tag_s = RunTagger(control.get(), &ledger, fleet_options.run,
                           fleet_options.vms_per_host, rate, duration, &no_vm_free);
  Mark tag_end = TakeMark(csd_pids, fleet, metrics);
  std::vector<int64_t> report_us = fleet.TakeReportLatencies();
  auto drain_deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeout));
  while (!ledger.Settled() && Clock::now() < drain_deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  TagLedger::Totals totals = ledger.Count();
  std::printf("tagging: %zu TagVM sent in %.1f s (%.1f/s), %zu acknowledged, "
              "%zu failed, %zu unanswered; %lld skipped (every VM had a tag in flight)\n",
              totals.sent, tag_s, totals.sent / tag_s, totals.acknowledged,
              totals.failed, totals.unanswered, static_cast<long long>(no_vm_free));
  PrintPhase(reporting.on() ? "steady state, agents reporting, tagging"
                            : "tagging, every agent watching",
             tag_begin, tag_end);
  if (tag_end.csd) {
    std::printf("  csd RSS %lld KiB: %.1f KiB per agent over csd before agents (%d threads)\n",
                static_cast<long long>(tag_end.csd->rss_kib),
                before ? per_agent(tag_end.csd->rss_kib) : 0.0, tag_end.csd->threads);
  }
  if (tag_end.heap_bytes) {
    std::printf("  csd heap %.0f MiB: %.1f KiB per agent (the allocator's in-use bytes)\n",
                *tag_end.heap_bytes / (1 << 20), *tag_end.heap_bytes / 1024 / fleet_options.agents);
  }
  PrintLatency("TagVM acknowledged", Summarize(totals.ack_us));
  PrintLatency("fan-out (tag->delta)", Summarize(totals.fanout_us));
  std::printf("fan-out p99 / max by 10 s of tagging, ms:");
  for (const auto& slice : totals.fanout_us_by_slice) {
    LatencySummary s = Summarize(slice);
    std::printf(" %.0f/%.0f", s.p99_ms, s.max_ms);
  }
  std::printf("\n");
  if (reporting.on()) PrintLatency("Report answered", Summarize(std::move(report_us)));
  std::printf("deltas lost (none within %.0f s of the end): %zu; watch streams broken: %d\n",
              timeout, totals.lost, fleet.broken_streams());
  const int64_t reports_failed = fleet.counters().reports_failed;
  if (fleet.broken_streams() > 0 || reports_failed > 0) {
    std::printf("Reports failed: %lld; first error: %s\n",
                static_cast<long long>(reports_failed), fleet.first_error().c_str());
  }
  bool churned = true;
  if (churn_per_minute > 0) {
    churned = RunChurn(control.get(), fleet, churn_per_minute, churn_lifetime, churn_seconds,
                       csd_pids, metrics, before);
  }
  fleet.Stop();
  // TagVM calls still in flight (a csd that fell behind) complete into the
  // ledger: wait for them (their deadline is 30 s) before it goes.
  const auto calls_deadline = Clock::now() + seconds(35);
  while (ledger.Count().unanswered > 0 && Clock::now() < calls_deadline) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  bool clean = totals.lost == 0 && totals.failed == 0 && totals.unanswered == 0 &&
               fleet.broken_streams() == 0 && reports_failed == 0 && churned;
  return clean ? 0 : 1;
}

}  // namespace
}  // namespace cosched::bench

int main(int argc, char** argv) { return cosched::bench::Run(argc, argv); }
