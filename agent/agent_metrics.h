// cs-agent's Prometheus metrics: enforcement (VMs by state, threads by
// status, prctl writes), reconcile passes, calls to csd, the connection to
// csd, and the sibling-sharing statistics of the collector per VM and per
// core. Labels are bounded by the host: per VM and per core, never per
// thread; the series of a VM that left the host are removed.
#ifndef COSCHED_AGENT_AGENT_METRICS_H_
#define COSCHED_AGENT_AGENT_METRICS_H_

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/reconcile_loop.h"
#include "cosched/v1/agent.pb.h"
#include "metrics/certificate_expiry.h"
#include "metrics/grpc_metrics.h"
#include "metrics/scrape_gauges.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace cosched::agent {

// Thread-safe.
class AgentMetrics {
 public:
  // `csd_connected` and `csd_refused` are read at scrape time (null:
  // always 0).
  // `tls`: the certificate and CA files the agent uses (restart-only), for
  // their expiry.
  explicit AgentMetrics(std::function<bool()> csd_connected = nullptr,
                        std::function<bool()> csd_refused = nullptr,
                        metrics::TlsFiles tls = {});

  AgentMetrics(const AgentMetrics&) = delete;
  AgentMetrics& operator=(const AgentMetrics&) = delete;

  // What /metrics serves.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

  // Calls to csd (client interceptors for the session's channel).
  metrics::GrpcMetrics& rpc() { return rpc_; }

  // One reconcile pass: duration, trigger, and when discovery worked the
  // enforcement gauges, prctl counters, and removal of the series of VMs
  // that are no longer on the host.
  void RecordReconcilePass(const PassRecord& pass);

  // One window of the sibling-sharing collector. VMs are labelled with
  // `vm` (their vm_id, as discovery names them) and `trust_group` (from
  // `trust_group_of`, "" when unknown); when a VM's trust group changes, its
  // old series are removed. Windows may arrive on any thread.
  void RecordStatsWindow(
      const v1::StatsWindow& window,
      const std::function<std::string(const std::string& vm_id)>&
          trust_group_of);

  // The agent started without the assignments kept in its state dir:
  // `reason` is "corrupt" or "unreadable" (the state file, then moved aside
  // when it could be) or "state_dir" (the dir itself cannot be used).
  void RecordStateUnusable(const std::string& reason);

  // A reload of cs-agent.yaml (SIGHUP) was applied, or refused (a bad file
  // or a setting that needs a restart): nothing of it applied.
  void RecordConfigReload(bool applied);

 private:
  // The per-VM series of the sharing statistics.
  struct VmSeries {
    std::string trust_group;
    prometheus::Counter* run = nullptr;
    // same, idle, foreign, unknown.
    std::array<prometheus::Counter*, 4> sibling{};
    prometheus::Counter* foreign_intervals = nullptr;
    prometheus::Gauge* longest_foreign = nullptr;
    // Made on the first window that knows forced idle.
    prometheus::Counter* forced_idle = nullptr;
  };
  // both_busy, one_idle, both_idle, unknown.
  using CoreSeries = std::array<prometheus::Counter*, 4>;

  VmSeries MakeVmSeriesLocked(const std::string& vm_id,
                              const std::string& trust_group);
  void RemoveVmSeriesLocked(const VmSeries& series);

  const std::shared_ptr<prometheus::Registry> registry_;
  const std::shared_ptr<metrics::ScrapeGauges> scrape_gauges_;
  metrics::GrpcMetrics rpc_;

  prometheus::Family<prometheus::Gauge>& vms_;
  prometheus::Family<prometheus::Gauge>& threads_;
  prometheus::Gauge& readback_blind_;
  prometheus::Gauge& impostors_;
  prometheus::Counter& prctl_writes_;
  prometheus::Counter& prctl_reads_;
  prometheus::Counter& threads_moved_;
  prometheus::Family<prometheus::Counter>& passes_;
  prometheus::Counter& discovery_failures_;
  prometheus::Histogram& reconcile_seconds_;

  prometheus::Family<prometheus::Counter>& vm_run_;
  prometheus::Family<prometheus::Counter>& vm_sibling_;
  prometheus::Family<prometheus::Counter>& vm_foreign_intervals_;
  prometheus::Family<prometheus::Gauge>& vm_longest_foreign_;
  prometheus::Family<prometheus::Counter>& vm_forced_idle_;
  prometheus::Family<prometheus::Counter>& core_seconds_;
  prometheus::Counter& windows_;
  prometheus::Counter& events_;
  prometheus::Counter& lost_events_;
  prometheus::Family<prometheus::Counter>& state_unusable_;
  prometheus::Family<prometheus::Counter>& config_reloads_;
  prometheus::Gauge& config_reload_failed_;

  std::mutex mu_;
  std::map<std::string, VmSeries> vm_series_;
  std::map<int, CoreSeries> core_series_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_AGENT_METRICS_H_
