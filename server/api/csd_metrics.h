// csd's Prometheus metrics: RPC counts and latencies (interceptors), store
// write latency, connected agents, reporting hosts and their VMs by
// enforcement state, and the fleet's sibling-sharing time summed over the
// stats windows agents report. No label is per VM, and one family alone is
// per host: the policy engine's prediction error, one series per host with
// an applied plan measured in the engine's last pass (a fleet of 10 000
// such hosts adds 10 000 series, about 1 MB per scrape); every other
// family stays a few series.
#ifndef COSCHED_SERVER_API_CSD_METRICS_H_
#define COSCHED_SERVER_API_CSD_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cosched/v1/agent.pb.h"
#include "grpcpp/support/server_interceptor.h"
#include "metrics/certificate_expiry.h"
#include "metrics/grpc_metrics.h"
#include "metrics/scrape_gauges.h"
#include "metrics/thread_cpu.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace cosched::server {

struct CsdMetricsOptions {
  // Read at scrape time; null reads 0.
  std::function<double()> connected_agents;
  std::function<double()> store_revision;
  // Replicas on etcd: the keys of the prefix held in memory (the store's
  // cache); null reads 0 (SQLite).
  std::function<double()> store_cache_keys;
  // Replicas on etcd: the oldest revision etcd serves, as this replica
  // last found it leading (EtcdMaintenance); 0 (no series) when it has not.
  std::function<int64_t()> etcd_oldest_revision;
  // Hosts whose applied state is held in memory, not yet written
  // (ReportMemory::HeldHosts).
  std::function<double()> held_report_hosts;
  // 1 while this csd leads the store's writers (Store::Leads), else 0.
  std::function<double()> leader;
  // The staged rollout as this csd knows it (RolloutView); nullopt: none.
  std::function<std::optional<v1::Rollout>()> rollout;
  // The same with its counts (RolloutCounter), which go over every host.
  std::function<std::optional<v1::Rollout>()> rollout_counts;
  // Replicas on etcd: Reports of stats forwarded to the leader and
  // dropped, since the start (StatsForwarder); nullopt: none (SQLite).
  std::function<std::optional<std::pair<int64_t, int64_t>>()> forwarded_stats;
  // The stats csd keeps in memory (StatsAggregator): VM series held now
  // and evicted by a host's series limit since the start, of this csd's
  // agents and (the leader on etcd) of those other replicas forwarded.
  struct StatsSeries {
    size_t held = 0;
    uint64_t evicted = 0;
    uint64_t folded = 0;
    size_t bucket_bytes = 0;  // allocated for the held series' buckets
  };
  std::function<std::pair<StatsSeries, StatsSeries>()> stats_series;
  // The certificate and CA files csd uses (restart-only), for their expiry.
  metrics::TlsFiles tls_files;
  // A host whose last accepted Report is older than this leaves the
  // reporting-hosts and VMs-by-state gauges (its agent is gone, or reports
  // to another replica).
  std::chrono::seconds report_staleness{300};
  // The clock of report_staleness; null: steady_clock.
  std::function<std::chrono::steady_clock::time_point()> now;
};

// What csd keeps of one Report, taken when it arrives and counted once csd
// accepted it.
struct ReportSummary {
  std::string host_id;
  // VMs by EnforcementState (index: the enum value).
  std::array<int, v1::EnforcementState_ARRAYSIZE> vms_by_state{};
  int64_t windows = 0;
  int64_t dropped_windows = 0;
  // Entries of VMs the Report does not list: csd keeps and sums none of
  // them (internal::DropUnlistedStats).
  int64_t unlisted_vm_stats = 0;
  // Sums over the windows' VMs, in ns: run, same, idle, foreign, unknown,
  // forced idle (where known).
  int64_t run_ns = 0;
  std::array<int64_t, 4> sibling_ns{};
  int64_t foreign_intervals = 0;
  int64_t forced_idle_ns = 0;
  // The longest foreign interval of each VM window that had one.
  std::vector<int64_t> longest_foreign_ns;
};

ReportSummary SummarizeReport(const v1::ReportRequest& report);

// Thread-safe.
class CsdMetrics {
 public:
  explicit CsdMetrics(CsdMetricsOptions options);

  CsdMetrics(const CsdMetrics&) = delete;
  CsdMetrics& operator=(const CsdMetrics&) = delete;

  // What /metrics serves.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

  // csd's calls (the interceptor's series).
  metrics::GrpcMetrics& rpc() { return rpc_; }

  // For ServerBuilder::experimental().SetInterceptorCreators: RPC counts and
  // latencies of every call, and the reader of accepted Reports. The
  // metrics must outlive the server.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  MakeInterceptorFactories();

  // A Report csd accepted (its summary taken on arrival).
  void RecordAcceptedReport(const ReportSummary& report);
  // One store write, from submission to durable or failed.
  void RecordStoreWrite(absl::StatusCode code, double seconds);

  // The policy engine (server/engine/engine_loop.h): a host's layout changed, for
  // a predicted gain (`budget` false) or to restore a measured budget.
  void RecordEngineChange(bool budget);
  // After an interval pass of the engine: per host, measured - predicted
  // forced idle (percentage points of host CPU time) of its newest applied
  // plan. Replaces the per-host gauge's series; each |error| is observed in
  // the fleet-wide histogram.
  void SetPredictionErrors(const std::map<std::string, double>& error_pct_by_host);
  // Hosts over budget in the last interval pass with no allowed layout
  // predicted within it.
  void SetBudgetUnmetHosts(int hosts);
  // A reload of csd.yaml (SIGHUP) was applied, or refused (nothing of it
  // applied).
  void RecordConfigReload(bool applied);
  // The audit file (server/state/audit_export.h): records appended, up to
  // `last_sequence`; whether exports fail; records that left the store's
  // window before they reached the file.
  void RecordAuditExported(int64_t records, int64_t last_sequence);
  void SetAuditExportFailing(bool failing);
  void RecordAuditMissing(int64_t records);

 private:
  struct HostReport {
    std::array<int, v1::EnforcementState_ARRAYSIZE> vms_by_state{};
    std::chrono::steady_clock::time_point at;
  };

  std::chrono::steady_clock::time_point Now() const;
  // Hosts with a fresh report, and their VMs by state; drops stale hosts.
  void FreshHosts(int* hosts, std::array<int, v1::EnforcementState_ARRAYSIZE>* vms_by_state);
  // The constructor's scrape-time gauges, by what they show.
  void AddEngineGauges();
  void AddAuditGauges();
  void AddRolloutGauges();
  void AddStatsGauges();
  void AddFleetGauges();
  void AddMemoryGauges();

  const CsdMetricsOptions options_;
  const std::shared_ptr<prometheus::Registry> registry_;
  const std::shared_ptr<metrics::ScrapeGauges> scrape_gauges_;
  // CPU by thread name: where csd's CPU goes (docs/metrics.md).
  const std::shared_ptr<metrics::ThreadCpuCollector> thread_cpu_;
  metrics::GrpcMetrics rpc_;

  prometheus::Histogram& store_write_seconds_;
  prometheus::Family<prometheus::Counter>& store_writes_;
  prometheus::Counter& windows_;
  prometheus::Counter& dropped_windows_;
  prometheus::Counter& unlisted_vm_stats_;
  prometheus::Counter& run_seconds_;
  std::array<prometheus::Counter*, 4> sibling_seconds_{};
  prometheus::Counter& foreign_intervals_;
  prometheus::Counter& forced_idle_seconds_;
  prometheus::Histogram& longest_foreign_;
  prometheus::Family<prometheus::Counter>& engine_changes_;
  prometheus::Family<prometheus::Counter>& config_reloads_;
  prometheus::Counter& engine_gain_changes_;
  prometheus::Counter& engine_budget_changes_;
  prometheus::Histogram& prediction_error_;
  std::atomic<int> budget_unmet_hosts_{0};
  std::atomic<int> last_reload_failed_{0};
  prometheus::Counter& audit_exported_;
  prometheus::Counter& audit_missing_;
  std::atomic<int64_t> audit_exported_sequence_{0};
  std::atomic<int> audit_export_failing_{0};

  std::mutex mu_;
  // The engine's last pass: host -> forced-idle error (bounded by the hosts
  // it plans).
  std::map<std::string, double> prediction_errors_;
  // Bounded by the registered hosts: only accepted Reports land here.
  std::map<std::string, HostReport> hosts_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_API_CSD_METRICS_H_
