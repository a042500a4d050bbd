#include "server/api/csd_metrics.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

#include "common/names.h"
#include "cosched/v1/control_plane.pb.h"
#include "metrics/build_info.h"
#include "metrics/grpc_metrics.h"
#include "server/state/agent_input.h"
#include "server/state/rollout_view.h"

namespace cosched::server {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

constexpr double kNsPerSecond = 1e9;
constexpr char kReportPath[] = "/cosched.v1.AgentService/Report";

constexpr std::array<const char*, 4> kSharing = {"same", "idle", "foreign",
                                                 "unknown"};

double Seconds(int64_t ns) {
  return static_cast<double>(std::max<int64_t>(ns, 0)) / kNsPerSecond;
}

// A store write waits for its batch's fsync: from well under a millisecond
// on idle SSDs to seconds on a saturated disk.
prometheus::Histogram::BucketBoundaries StoreBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
          0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
}

// Switch windows of a tagged VM are microseconds; a real leak is long.
prometheus::Histogram::BucketBoundaries ForeignIntervalBuckets() {
  return {1e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 5e-4, 1e-3, 1e-2, 0.1, 1};
}

// Reads the Report as it arrives and counts it once csd answered OK, so a
// refused Report (unknown host, bad input) counts nothing.
class ReportInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit ReportInterceptor(CsdMetrics* metrics) : metrics_(metrics) {}

  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE)) {
      if (const void* message = methods->GetRecvMessage()) {
        summary_ = SummarizeReport(
            *static_cast<const v1::ReportRequest*>(message));
      }
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS) &&
        summary_.has_value() && methods->GetSendStatus().ok()) {
      metrics_->RecordAcceptedReport(*summary_);
    }
    methods->Proceed();
  }

 private:
  CsdMetrics* const metrics_;
  std::optional<ReportSummary> summary_;
};

class ReportInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ReportInterceptorFactory(CsdMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (std::strcmp(info->method(), kReportPath) != 0) return nullptr;
    return new ReportInterceptor(metrics_);
  }

 private:
  CsdMetrics* const metrics_;
};

// A counter or histogram without labels: its one series.
prometheus::Counter& OneCounter(prometheus::Registry& registry, const char* name,
                                const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}
prometheus::Histogram& OneHistogram(prometheus::Registry& registry, const char* name,
                                    const char* help,
                                    const prometheus::Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add({}, buckets);
}

}  // namespace

ReportSummary SummarizeReport(const v1::ReportRequest& report) {
  ReportSummary s;
  s.host_id = report.host_id();
  for (const v1::VMObservation& vm : report.vms()) {
    const int state = vm.enforcement().state();
    if (state >= 0 && state < static_cast<int>(s.vms_by_state.size())) {
      ++s.vms_by_state[state];
    }
  }
  s.windows = report.stats_size();
  s.dropped_windows = std::max<int64_t>(report.dropped_windows(), 0);
  const absl::flat_hash_set<absl::string_view> listed = internal::ListedVms(report);
  for (const v1::StatsWindow& window : report.stats()) {
    for (const v1::VMStats& vm : window.vms()) {
      if (!listed.contains(vm.vm_id())) {
        ++s.unlisted_vm_stats;
        continue;
      }
      const v1::SiblingShare& share = vm.share();
      s.run_ns += std::max<int64_t>(share.run_ns(), 0);
      s.sibling_ns[0] += std::max<int64_t>(share.same_ns(), 0);
      s.sibling_ns[1] += std::max<int64_t>(share.idle_ns(), 0);
      s.sibling_ns[2] += std::max<int64_t>(share.foreign_ns(), 0);
      s.sibling_ns[3] += std::max<int64_t>(share.unknown_ns(), 0);
      s.foreign_intervals += std::max<int64_t>(share.foreign_intervals(), 0);
      if (share.forced_idle_known()) {
        s.forced_idle_ns += std::max<int64_t>(share.forced_idle_ns(), 0);
      }
      if (share.foreign_intervals() > 0) {
        s.longest_foreign_ns.push_back(share.longest_foreign_ns());
      }
    }
  }
  return s;
}

CsdMetrics::CsdMetrics(CsdMetricsOptions options)
    : options_(std::move(options)),
      registry_(std::make_shared<prometheus::Registry>()),
      scrape_gauges_(std::make_shared<metrics::ScrapeGauges>()),
      thread_cpu_(std::make_shared<metrics::ThreadCpuCollector>(
          "cosched_csd_thread_cpu_seconds_total",
          "CPU time (user and system) of csd's threads, by thread name: gRPC's "
          "(nexting_thread: RPCs, Reports among them), the store's writer and completion "
          "threads, the fan-out, stats, the etcd watch, the engine (docs/metrics.md)")),
      rpc_(*registry_, metrics::GrpcMetrics::Side::kServer,
           {v1::ReportRequest::descriptor()->file(),
            v1::TagVMRequest::descriptor()->file()}),
      store_write_seconds_(OneHistogram(
          *registry_, "cosched_store_write_duration_seconds",
          "Time from a store write's submission to its commit being durable (or failing), "
          "group commit included.",
          StoreBuckets())),
      store_writes_(prometheus::BuildCounter()
                        .Name("cosched_store_writes_total")
                        .Help("Store writes by outcome (OK, or the error code).")
                        .Register(*registry_)),
      windows_(OneCounter(*registry_, "cosched_csd_stats_windows_total",
                          "Sibling-sharing windows in accepted Reports.")),
      dropped_windows_(OneCounter(*registry_, "cosched_csd_stats_windows_dropped_total",
                                  "Windows agents dropped because they could not report for "
                                  "too long.")),
      unlisted_vm_stats_(OneCounter(
          *registry_, "cosched_csd_report_unlisted_vm_stats_total",
          "Stats entries in accepted Reports of VMs the same Report does not list: dropped, "
          "since a host is trusted for its own VMs' stats only.")),
      run_seconds_(OneCounter(*registry_, "cosched_fleet_vm_run_seconds_total",
                              "Run time of all VMs in reported windows.")),
      foreign_intervals_(OneCounter(*registry_, "cosched_fleet_vm_foreign_intervals_total",
                                    "Foreign intervals of all VMs in reported windows.")),
      forced_idle_seconds_(OneCounter(
          *registry_, "cosched_fleet_vm_forced_idle_seconds_total",
          "Idle the VMs forced on their SMT siblings while they ran, in reported windows (the "
          "kernel charges it to the task that ran; hosts with schedstats on).")),
      longest_foreign_(OneHistogram(
          *registry_, "cosched_fleet_vm_longest_foreign_interval_seconds",
          "Longest foreign interval of each VM window that had one: switch windows are "
          "microseconds, a leak is long.",
          ForeignIntervalBuckets())),
      engine_changes_(prometheus::BuildCounter()
                          .Name("cosched_csd_engine_layout_changes_total")
                          .Help("Host layouts the policy engine changed, by why: a "
                                "predicted gain, or a forced-idle budget measured over "
                                "its limit.")
                          .Register(*registry_)),
      config_reloads_(prometheus::BuildCounter()
                          .Name("cosched_csd_config_reloads_total")
                          .Help("Reloads of csd.yaml (systemctl reload, SIGHUP), by result: "
                                "applied, or refused (a bad file or a setting that needs a "
                                "restart; nothing of it applied, the log says why).")
                          .Register(*registry_)),
      engine_gain_changes_(engine_changes_.Add({{"kind", "gain"}})),
      engine_budget_changes_(engine_changes_.Add({{"kind", "budget"}})),
      prediction_error_(OneHistogram(
          *registry_, "cosched_csd_engine_forced_idle_error_pct",
          "|measured - predicted| forced idle of each host's newest applied plan, over the "
          "windows since it (at most the last hour), observed each re-plan interval, in "
          "percentage points of its CPU time: how honest the simulator is on this fleet.",
          prometheus::Histogram::BucketBoundaries{0.5, 1, 2, 5, 10, 20, 50})),
      audit_exported_(OneCounter(*registry_, "cosched_csd_audit_exported_records_total",
                                 "Audit records this csd appended to its audit file (the "
                                 "leading replica writes every replica's).")),
      audit_missing_(OneCounter(
          *registry_, "cosched_csd_audit_missing_records_total",
          "Audit records that left the store's window (audit window_records) before they "
          "reached the audit file: lost to it. Alert on any.")) {
  metrics::AddBuildInfo(*registry_);
  for (const char* result : {"applied", "refused"}) config_reloads_.Add({{"result", result}});
  auto& sibling = prometheus::BuildCounter()
                      .Name("cosched_fleet_vm_sibling_seconds_total")
                      .Help("Run time of all VMs in reported windows, split "
                            "by what their SMT siblings ran.")
                      .Register(*registry_);
  for (size_t i = 0; i < kSharing.size(); ++i) {
    sibling_seconds_[i] = &sibling.Add({{"sharing", kSharing[i]}});
  }
  AddEngineGauges();
  AddAuditGauges();
  AddRolloutGauges();
  AddStatsGauges();
  AddFleetGauges();
  AddMemoryGauges();
}

void CsdMetrics::AddMemoryGauges() {
  // RSS is the kernel's view (/proc/PID/status); this is the
  // allocator's: what csd's objects hold, without freed pages the
  // allocator keeps. mallinfo2 sums every arena's bins: cheap at a scrape.
  scrape_gauges_->Add("cosched_csd_heap_bytes",
                      "Bytes csd holds allocated on its heap (glibc's mallinfo2: in use in "
                      "its arenas and in mmapped blocks): its state's memory, apart from "
                      "what the allocator keeps free.",
                      [] {
                        const struct mallinfo2 info = mallinfo2();
                        return static_cast<double>(info.uordblks + info.hblkhd);
                      });
}

void CsdMetrics::AddEngineGauges() {
  scrape_gauges_->Add("cosched_csd_config_reload_failed",
                      "1 when the last reload of csd.yaml was refused: csd runs on the "
                      "settings before it, not on what the file says. Alert on 1.",
                      [this] { return static_cast<double>(last_reload_failed_.load()); });
  scrape_gauges_->Add("cosched_csd_engine_budget_unmet_hosts",
                      "Hosts whose measured forced idle was over their tenants' least "
                      "budget in the engine's last pass with no allowed layout predicted "
                      "within it (move VMs: csd never migrates them).",
                      [this] { return static_cast<double>(budget_unmet_hosts_.load()); });
  // One series per host (see the header): what the histogram above hides.
  scrape_gauges_->AddFamily(
      "cosched_csd_engine_host_forced_idle_error_pct",
      "Per host, measured - predicted forced idle of its newest applied plan over the "
      "windows since it (at most the last hour), in percentage points of its CPU time, "
      "as of the policy engine's last re-plan interval; hosts not measured are absent.",
      [this] {
        std::vector<metrics::ScrapeGauges::Sample> samples;
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& [host, error] : prediction_errors_) {
          samples.push_back({{{"host", host}}, error});
        }
        return samples;
      });
}

void CsdMetrics::AddAuditGauges() {
  scrape_gauges_->Add("cosched_csd_audit_export_failing",
                      "1 while the audit file cannot be written (or the store read for it): "
                      "records stay in the store's window until it is full. Alert on 1.",
                      [this] { return static_cast<double>(audit_export_failing_.load()); });
  scrape_gauges_->Add("cosched_csd_audit_exported_sequence",
                      "The sequence of the last audit record in this csd's audit file; 0 "
                      "before the first.",
                      [this] { return static_cast<double>(audit_exported_sequence_.load()); });
}

void CsdMetrics::AddRolloutGauges() {
  // The rollout: its stage and how many hosts it enabled, and its state as
  // one series per state (1 for the current one), so that an alert can
  // say "halted" without knowing the enum's numbers.
  // A record that only holds new_hosts is no rollout.
  auto rollout = [this] {
    std::optional<v1::Rollout> r = options_.rollout ? options_.rollout() : std::nullopt;
    if (r && !Started(*r)) r.reset();
    return r;
  };
  scrape_gauges_->Add("cosched_csd_rollout_stage",
                      "The staged rollout's current stage, from 1; 0 without a rollout.",
                      [rollout] {
                        std::optional<v1::Rollout> r = rollout();
                        return r ? static_cast<double>(r->stage() + 1) : 0.0;
                      });
  scrape_gauges_->Add("cosched_csd_rollout_enabled_hosts",
                      "Hosts the staged rollout has enabled enforcement on among those that "
                      "waited for one; 0 without a rollout.",
                      [this] {
                        std::optional<v1::Rollout> r =
                            options_.rollout_counts ? options_.rollout_counts() : std::nullopt;
                        return r && Started(*r) ? static_cast<double>(r->enabled_count()) : 0.0;
                      });
  scrape_gauges_->AddFamily(
      "cosched_csd_rollout_state",
      "1 for the staged rollout's state (running, paused, halted, aborted, done), 0 for the "
      "others; no series without a rollout.",
      [rollout] {
        std::vector<metrics::ScrapeGauges::Sample> samples;
        std::optional<v1::Rollout> r = rollout();
        if (!r) return samples;
        const std::pair<v1::Rollout::State, const char*> states[] = {
            {v1::Rollout::STATE_RUNNING, "running"}, {v1::Rollout::STATE_PAUSED, "paused"},
            {v1::Rollout::STATE_HALTED, "halted"},   {v1::Rollout::STATE_ABORTED, "aborted"},
            {v1::Rollout::STATE_DONE, "done"}};
        for (const auto& state : states) {
          samples.emplace_back(prometheus::Labels{{"state", state.second}},
                               r->state() == state.first ? 1.0 : 0.0);
        }
        return samples;
      });
}

void CsdMetrics::AddStatsGauges() {
  scrape_gauges_->AddFamily(
      "cosched_csd_forwarded_stats_reports",
      "Reports whose stats windows this replica sent to the leader for its policy engine "
      "(outcome forwarded) or could not (dropped), since it started; replicas on etcd only.",
      [forwarded = options_.forwarded_stats] {
        std::vector<metrics::ScrapeGauges::Sample> samples;
        if (!forwarded) return samples;
        std::optional<std::pair<int64_t, int64_t>> counts = forwarded();
        if (!counts) return samples;
        samples.emplace_back(prometheus::Labels{{"outcome", "forwarded"}},
                             static_cast<double>(counts->first));
        samples.emplace_back(prometheus::Labels{{"outcome", "dropped"}},
                             static_cast<double>(counts->second));
        return samples;
      });
  using Series = CsdMetricsOptions::StatsSeries;
  using Figure = double (*)(const Series&);
  for (const auto& [name, help, figure] :
       {std::tuple<const char*, const char*, Figure>{
            "cosched_csd_stats_series",
            "(host, VM) stats series csd keeps in memory now, of its own agents "
            "(of=\"agents\") and, on the leading replica, forwarded by the others "
            "(of=\"forwarded\").",
            [](const Series& s) { return static_cast<double>(s.held); }},
        {"cosched_csd_stats_series_evicted",
         "Stats series evicted since csd started because their host kept more than its limit "
         "(twice the VMs it reports, plus 64): the least recently reported go first.",
         [](const Series& s) { return static_cast<double>(s.evicted); }},
        {"cosched_csd_stats_series_folded",
         "Stats series of VMs gone from every host, folded into their tenant's figures and "
         "freed since csd started.",
         [](const Series& s) { return static_cast<double>(s.folded); }},
        {"cosched_csd_stats_bucket_bytes",
         "Bytes allocated for the minute and hour buckets of the held stats series (those "
         "filled and the room their rings reserved): a series grows a bucket a minute for its "
         "first hour and one an hour for its first day, so on a steady fleet this rises for a "
         "day, then stays.",
         [](const Series& s) { return static_cast<double>(s.bucket_bytes); }}}) {
    scrape_gauges_->AddFamily(name, help, [series = options_.stats_series, figure = figure] {
      std::vector<metrics::ScrapeGauges::Sample> samples;
      if (!series) return samples;
      const auto [agents, forwarded] = series();
      for (const auto& [of, s] : {std::pair{"agents", agents}, {"forwarded", forwarded}}) {
        samples.emplace_back(prometheus::Labels{{"of", of}}, figure(s));
      }
      return samples;
    });
  }
}

void CsdMetrics::AddFleetGauges() {
  auto read = [](const std::function<double()>& f) {
    return [f] { return f ? f() : 0.0; };
  };
  metrics::AddCertificateExpiry(*scrape_gauges_,
                                [files = options_.tls_files] { return files; });
  scrape_gauges_->Add("cosched_csd_connected_agents",
                      "Agents holding an assignment stream to this csd.",
                      read(options_.connected_agents));
  scrape_gauges_->Add("cosched_store_revision",
                      "The store's highest committed revision.",
                      read(options_.store_revision));
  scrape_gauges_->Add("cosched_store_cache_keys",
                      "Keys of the etcd store this replica holds in memory (its copy of the "
                      "prefix, about 100 a host); 0 on SQLite.",
                      read(options_.store_cache_keys));
  scrape_gauges_->AddFamily(
      "cosched_store_etcd_oldest_revision",
      "On etcd: the oldest revision etcd still serves, as this replica last found it while "
      "leading; no series on SQLite or before. It stays put while nothing compacts etcd.",
      [read = options_.etcd_oldest_revision] {
        std::vector<metrics::ScrapeGauges::Sample> samples;
        const int64_t oldest = read ? read() : 0;
        if (oldest > 0) samples.push_back({{}, static_cast<double>(oldest)});
        return samples;
      });
  scrape_gauges_->Add("cosched_csd_held_report_hosts",
                      "Hosts whose Reports changed only what their agent applied since their "
                      "last written one: held in this csd's memory, not yet in the store.",
                      read(options_.held_report_hosts));
  scrape_gauges_->Add("cosched_csd_leader",
                      "1 while this csd leads the replicas on its store (runs compaction, "
                      "audit pruning and the policy engine), else 0; always 1 on SQLite.",
                      read(options_.leader));
  scrape_gauges_->Add("cosched_csd_reporting_hosts",
                      "Hosts whose last Report this csd accepted is recent.",
                      [this] {
                        int hosts = 0;
                        FreshHosts(&hosts, nullptr);
                        return static_cast<double>(hosts);
                      });
  scrape_gauges_->AddFamily(
      "cosched_csd_vms",
      "VMs on reporting hosts by enforcement state, as their agents last "
      "reported.",
      [this] {
        std::array<int, v1::EnforcementState_ARRAYSIZE> by_state{};
        FreshHosts(nullptr, &by_state);
        std::vector<metrics::ScrapeGauges::Sample> samples;
        for (int state = 0; state < static_cast<int>(by_state.size()); ++state) {
          samples.push_back(
              {{{"state", EnforcementStateName(
                              static_cast<v1::EnforcementState>(state))}},
               static_cast<double>(by_state[state])});
        }
        return samples;
      });
}

std::vector<std::shared_ptr<prometheus::Collectable>> CsdMetrics::collectables()
    const {
  return {registry_, scrape_gauges_, thread_cpu_};
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
CsdMetrics::MakeInterceptorFactories() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      factories;
  factories.push_back(rpc_.MakeServerInterceptorFactory());
  factories.push_back(std::make_unique<ReportInterceptorFactory>(this));
  return factories;
}

std::chrono::steady_clock::time_point CsdMetrics::Now() const {
  return options_.now ? options_.now() : std::chrono::steady_clock::now();
}

void CsdMetrics::RecordAcceptedReport(const ReportSummary& report) {
  windows_.Increment(static_cast<double>(report.windows));
  dropped_windows_.Increment(static_cast<double>(report.dropped_windows));
  unlisted_vm_stats_.Increment(static_cast<double>(report.unlisted_vm_stats));
  run_seconds_.Increment(Seconds(report.run_ns));
  for (size_t i = 0; i < kSharing.size(); ++i) {
    sibling_seconds_[i]->Increment(Seconds(report.sibling_ns[i]));
  }
  foreign_intervals_.Increment(static_cast<double>(report.foreign_intervals));
  forced_idle_seconds_.Increment(Seconds(report.forced_idle_ns));
  for (int64_t ns : report.longest_foreign_ns) longest_foreign_.Observe(Seconds(ns));
  std::lock_guard<std::mutex> lock(mu_);
  HostReport& host = hosts_[report.host_id];
  host.vms_by_state = report.vms_by_state;
  host.at = Now();
}

void CsdMetrics::RecordStoreWrite(absl::StatusCode code, double seconds) {
  store_write_seconds_.Observe(seconds);
  store_writes_.Add({{"code", metrics::RpcCodeLabel(static_cast<int>(code))}})
      .Increment();
}

void CsdMetrics::RecordEngineChange(bool budget) {
  (budget ? engine_budget_changes_ : engine_gain_changes_).Increment();
}

void CsdMetrics::SetPredictionErrors(const std::map<std::string, double>& error_pct_by_host) {
  for (const auto& [host, error] : error_pct_by_host) prediction_error_.Observe(std::abs(error));
  std::lock_guard<std::mutex> lock(mu_);
  prediction_errors_ = error_pct_by_host;
}

void CsdMetrics::SetBudgetUnmetHosts(int hosts) { budget_unmet_hosts_ = hosts; }

void CsdMetrics::RecordConfigReload(bool applied) {
  config_reloads_.Add({{"result", applied ? "applied" : "refused"}}).Increment();
  last_reload_failed_ = applied ? 0 : 1;
}

void CsdMetrics::RecordAuditExported(int64_t records, int64_t last_sequence) {
  audit_exported_.Increment(static_cast<double>(records));
  audit_exported_sequence_ = last_sequence;
}

void CsdMetrics::SetAuditExportFailing(bool failing) { audit_export_failing_ = failing ? 1 : 0; }

void CsdMetrics::RecordAuditMissing(int64_t records) {
  audit_missing_.Increment(static_cast<double>(records));
}

void CsdMetrics::FreshHosts(int* hosts,
                            std::array<int, v1::EnforcementState_ARRAYSIZE>* vms_by_state) {
  const auto oldest = Now() - options_.report_staleness;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    if (it->second.at < oldest) {
      it = hosts_.erase(it);
      continue;
    }
    if (hosts != nullptr) ++*hosts;
    if (vms_by_state != nullptr) {
      for (size_t i = 0; i < vms_by_state->size(); ++i) {
        (*vms_by_state)[i] += it->second.vms_by_state[i];
      }
    }
    ++it;
  }
}

}  // namespace cosched::server
