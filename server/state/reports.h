// Agents' Reports: the VMs a host runs now (presence, ownership, tags from
// domain metadata), its preflight and enablement, and its stats windows.
#ifndef COSCHED_SERVER_STATE_REPORTS_H_
#define COSCHED_SERVER_STATE_REPORTS_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "cosched/v1/agent.pb.h"
#include "server/state/commit_effects.h"
#include "server/state/host_status.h"
#include "server/state/report_rate_limit.h"
#include "server/state/rollout_view.h"
#include "server/state/state_settings.h"
#include "server/state/write_support.h"
#include "server/stats/stats_aggregator.h"
#include "store/store.h"

namespace cosched::server {

// Thread-safe.
class Reports {
 public:
  Reports(store::Store& store, const CommitEffects& effects, HostStatus& status,
          const StateSettings& settings, const RolloutView& rollout, StatsAggregator& stats)
      : store_(store), effects_(effects), status_(status), settings_(settings),
        rollout_(rollout), stats_(stats) {}

  // Records the reported VMs as present on the host (their assignments are
  // then streamed there; vm_presence.h says who owns each) and their
  // enforcement; once that is committed, adds the stats windows to the
  // in-memory aggregate (under the id a VM is tagged with, when it is
  // tagged by UUID) and then runs `done`, on the aggregate's thread. A
  // Report that says what the host's last one said (times and stats aside)
  // writes nothing; one that changes only enforcement is held in memory
  // (ReportState). FAILED_PRECONDITION for an unregistered host.
  // Takes `request` over: the write, the stats kept in memory and the
  // windows forwarded to the leader share it (its stats windows can be
  // large), and csd changes it (the agent's report_time goes: csd stamps
  // its own; stats of VMs it does not list go).
  void ApplyReport(std::shared_ptr<v1::ReportRequest> request, Done<v1::ReportResponse> done);
  // The same with a copy of `request` (tests, benchmarks).
  void ApplyReport(const v1::ReportRequest& request, Done<v1::ReportResponse> done) {
    ApplyReport(std::make_shared<v1::ReportRequest>(request), std::move(done));
  }

  // How often each host may Report (server/state/report_rate_limit.h).
  ReportRateLimit& report_rate() { return report_rate_; }
  // Called with each Report's stats once this csd took them (csd replicas
  // on etcd: the forwarder to the leader). Set before serving.
  using StatsObserver =
      std::function<void(std::shared_ptr<const v1::ReportRequest> report,
                         std::shared_ptr<const absl::flat_hash_map<std::string, std::string>>
                             tagged_id)>;
  void set_stats_observer(StatsObserver observer) { stats_observer_ = std::move(observer); }

 private:
  // What a Report says of the VMs its host runs (ids, run states,
  // metadata, vCPUs and their affinity), its preflight and impostors:
  // when it changes, the Report is written.
  static ReportDigest ReportContent(const v1::ReportRequest& request);
  // The rest but stats and times: the applied revision and each VM's
  // enforcement. When only it changes, it is held in memory (ReportMemory)
  // and written with the host's first Report enforcement_write_interval
  // after it changed, or with a change of content.
  static ReportDigest ReportState(const v1::ReportRequest& request);
  void AddReportStats(std::shared_ptr<const v1::ReportRequest> report,
                      absl::flat_hash_map<std::string, std::string> tagged_id,
                      Done<v1::ReportResponse> done);

  store::Store& store_;
  const CommitEffects& effects_;
  HostStatus& status_;
  const StateSettings& settings_;
  const RolloutView& rollout_;
  StatsAggregator& stats_;
  StatsObserver stats_observer_;
  ReportRateLimit report_rate_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_REPORTS_H_
