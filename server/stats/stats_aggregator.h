// csd's memory of the sibling-sharing windows agents report (ReportRequest
// .stats): summed into time buckets per (host, VM) and per host, and
// answered per VM, per set of VMs (a tenant's, a trust group's) or per host
// for GetStats. Measurements are re-reported continuously, so nothing here
// is durable: a restarted csd answers from the windows reported since.
#ifndef COSCHED_SERVER_STATS_STATS_AGGREGATOR_H_
#define COSCHED_SERVER_STATS_STATS_AGGREGATOR_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/agent.pb.h"
#include "cosched/v1/control_plane.pb.h"
#include "server/stats/stats_source.h"

namespace cosched::server {

inline constexpr int kMaxStatsWindows = 120;
inline constexpr int kMaxStatsVmsPerWindow = 10000;
inline constexpr int kMaxStatsCores = 4096;
inline constexpr int64_t kMaxStatsSpanSeconds = 86400;

// INVALID_ARGUMENT naming the field path and the rule (e.g.
// "stats[3].vms[0].share.same_ns must not be negative") when the windows
// break the contract of agent.proto: at most 120, oldest first and not
// overlapping, end after start, at most 10000 VMs each with an id and once,
// no negative figure, same+idle+foreign+unknown not above run, core indexes
// below 4096 and once per window. StatsAggregator::Add relies on it.
absl::Status ValidateStatsWindows(
    const google::protobuf::RepeatedPtrField<v1::StatsWindow>& stats,
    int64_t dropped_windows);

// Thread-safe. Reports from many hosts can be added concurrently: a host's
// windows take only that host's lock (plus a shared lock of the host table
// and, for VMs new on the host, a short lock of the VM index).
//
// Two rings of buckets per (host, VM) and per host, indexed by the end time
// of a window: 62 one-minute buckets (spans up to an hour, answered to the
// minute) and 26 one-hour buckets (spans up to 24 h, answered to the hour).
// A window lands in one bucket of each ring; a query sums the buckets of
// one ring holding a window that ended in the span, and says in
// start_unix_ns/end_unix_ns which windows that covered exactly.
//
// Memory bound: a ring holds a bucket only for the slots a window landed
// in. A (host, VM) series' rings are packed (stats_buckets.h: each bucket
// a few varints, about 38 bytes where it was 96, at most
// kMaxVmBucketBytes), so at most 88 buckets: about 3.2 KiB for a VM
// reported for a whole day, ~170 bytes for one seen in a single window.
// Per host at most 88 buckets of 72 bytes plus 32 bytes per core reported
// (about 186 KiB for a 64-core host). A host keeps
// at most SeriesLimit(VMs its last Report listed) VM series: past it, the
// least recently reported are evicted (EvictedSeriesCount), so no host can
// make csd keep series beyond what it runs (issue #32). A sweep, at most
// every 10 minutes, drops series with no window in the last 24 h and frees
// the buckets that fell out of their rings: a VM that stopped reporting
// keeps its minute buckets for an hour (plus a sweep), then only its hour
// buckets (at most 26, ~1 KiB) until its series goes.
//
// VMs gone from every host do not wait for that: at most every minute,
// csd's store is asked (SetVmFacts) which of the VMs no window has come
// from for kGoneAfterNs no host reports any more, and the series of those
// are folded into one series per tenant (QueryTenant) and freed, so csd's
// memory follows the VMs that run, not those that ran today (a fleet
// deleting 1 000 VMs a minute would otherwise hold 1.4 M dead series). The
// tenant is the one the VM is tagged for then or, when it was untagged
// first (a control plane untags what it deletes), the one learned while
// it ran: the same question, asked of series whose tenant is not known
// yet, at most kMaxAskedPerRound VMs a round. A VM still reported (idle,
// or its host silent) is asked about again after kPresentRecheckNs.
class StatsAggregator final : public StatsSource {
 public:
  // Nanoseconds since the Unix epoch.
  using Clock = std::function<int64_t()>;

  // `now` defaults to the system clock.
  explicit StatsAggregator(Clock now = nullptr);
  ~StatsAggregator();
  StatsAggregator(const StatsAggregator&) = delete;
  StatsAggregator& operator=(const StatsAggregator&) = delete;

  // Adds the windows `host_id` reported (already validated). `tagged_id`
  // maps a reported vm_id to the id the VM is tagged under, when they
  // differ (a VM tagged by UUID). Windows that start before the end of the
  // last window taken from this host (a Report sent again after a lost
  // answer), end over 24 h ago or over a minute ahead of csd's clock are
  // ignored; returns how many were. `reported_vms`: how many VMs the host
  // reports now (its Report's, or its stored record's for forwarded
  // stats), which sets the host's SeriesLimit.
  int64_t Add(absl::string_view host_id,
              const google::protobuf::RepeatedPtrField<v1::StatsWindow>& stats,
              int64_t dropped_windows,
              const absl::flat_hash_map<std::string, std::string>& tagged_id,
              int reported_vms);

  // What csd's store says of a VM: whether a host reports it now, and the
  // tenant it is tagged for (nullopt: untagged).
  struct VmFacts {
    bool reported = false;
    std::optional<std::string> tenant;
  };
  // The facts of each of `vm_ids` (an id missing from the answer: asked
  // again next round). An error: asked again in half a minute.
  using VmFactsFn = std::function<absl::StatusOr<absl::flat_hash_map<std::string, VmFacts>>(
      const std::vector<std::string>& vm_ids)>;
  // Before the first Add (not thread-safe). Without it (tests of other
  // parts), series of gone VMs stay until the sweep drops them.
  void SetVmFacts(VmFactsFn facts) { vm_facts_ = std::move(facts); }
  static constexpr int64_t kGoneAfterNs = 2 * 60 * int64_t{1000000000};
  static constexpr int64_t kPresentRecheckNs = 10 * 60 * int64_t{1000000000};
  static constexpr size_t kMaxAskedPerRound = 10000;

  // Add() on the aggregator's own thread, then then(ignored) there: the
  // store's completion thread, which answers Reports, is not held by the sums
  // of a large one. In call order. The queue holds at most one Report per
  // agent waiting for its answer, as `then` answers it.
  void AddInBackground(std::shared_ptr<const v1::ReportRequest> report,
                       std::shared_ptr<const absl::flat_hash_map<std::string, std::string>>
                           tagged_id,
                       std::function<void(int64_t ignored)> then);

  // The VMs among `vm_ids` that reported a window ending in the last
  // `span_seconds` (1 to 86400), each summed over every host it ran on, and
  // their total. windows/lost_events/dropped_windows are those of the
  // hosts they ran on over the span. windows == 0: nothing was reported.
  v1::GetStatsResponse QueryVms(const std::vector<std::string>& vm_ids,
                                int64_t span_seconds) const override;
  // QueryVms of the tenant's VMs (`vm_ids`, those tagged for it now), with
  // the figures of its VMs gone from every host folded in: in total and
  // gone_vms (control_plane.proto).
  v1::GetStatsResponse QueryTenant(absl::string_view tenant,
                                   const std::vector<std::string>& vm_ids,
                                   int64_t span_seconds) const;
  // Every VM of the host, the host's per-core sums and its windows.
  v1::GetStatsResponse QueryHost(absl::string_view host_id,
                                 int64_t span_seconds) const override;
  // The host's VMs over the windows that began at or after `since_unix_ns`
  // and ended within the last hour: whole one-minute buckets, so a bucket
  // that also holds an earlier window is left out (a plan's effect is
  // measured from the first minute wholly after it).
  v1::GetStatsResponse QueryHostSince(absl::string_view host_id,
                                      int64_t since_unix_ns) const override;

  // (host, VM) series held now: what the memory bound multiplies.
  size_t VmSeriesCount() const;
  // Buckets those series hold now.
  size_t VmBucketCount() const;
  // Bytes allocated for those series' buckets: the buckets held and the
  // room their rings reserved beyond them.
  size_t VmBucketBytes() const;
  // Series evicted by a host's SeriesLimit since the start.
  uint64_t EvictedSeriesCount() const;
  // Series of VMs gone from every host, folded into their tenant's and
  // freed, since the start.
  uint64_t FoldedSeriesCount() const;
  // Tenants holding the folded figures of gone VMs now.
  size_t GoneTenantCount() const;

  // VM series a host reporting `reported_vms` VMs may keep: room for each
  // VM it runs and one it ran before (a migration, a restart under a new
  // id), plus a floor for hosts that report few.
  static size_t SeriesLimit(int reported_vms);
  static constexpr size_t kMinSeriesPerHost = 64;
  static constexpr size_t kSeriesPerReportedVm = 2;

  // The most bytes one per-VM bucket takes packed (stats_buckets.h; about
  // 40 is usual), for the bound above.
  static constexpr size_t kMaxVmBucketBytes = 111;

 private:
  struct HostSeries;

  std::shared_ptr<HostSeries> FindHost(absl::string_view host_id) const;
  // per_series(const VmSeries&) summed over every held series, each host's
  // taken under its lock.
  template <typename Fn>
  size_t SumOverSeries(Fn per_series) const;
  // With the host's lock held: evicts its least recently reported series
  // until at most `limit` remain; returns their ids.
  static std::vector<std::string> EvictOverLimit(HostSeries& host, size_t limit);
  // With index_mu_ held.
  void ForgetInIndexLocked(const std::string& vm_id, absl::string_view host_id);
  void MaybeSweep(int64_t now_ns);
  // At most every minute: the VMs no window came from for kGoneAfterNs,
  // and those whose tenant is not known, asked about (vm_facts_); those
  // gone folded and freed.
  void MaybeFoldGone(int64_t now_ns);
  void WorkerLoop();

  const Clock now_;
  // Guards hosts_ (the table, not the series: each has its own lock).
  // Exclusive only to add a host or to sweep.
  mutable std::shared_mutex hosts_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<HostSeries>> hosts_;
  int64_t last_sweep_ns_ = 0;
  // vm_id -> hosts that reported it; may name hosts that no longer hold it
  // (queries pass over those). Taken after a host's lock, never before. Almost
  // every VM is on one host (two while it migrates), so the hosts are a
  // short list held in place, not a hash set of their own (~100 bytes a VM
  // less).
  mutable std::mutex index_mu_;
  absl::flat_hash_map<std::string, absl::InlinedVector<std::string, 1>> hosts_of_vm_;
  uint64_t evicted_series_ = 0;  // guarded by index_mu_
  uint64_t folded_series_ = 0;   // guarded by index_mu_

  VmFactsFn vm_facts_;
  // One fold at a time (Adds come from several threads).
  std::mutex fold_mu_;
  int64_t last_fold_ns_ = 0;  // guarded by fold_mu_
  // Tenant names by the index a VmSeries keeps (a few bytes a series, not
  // a string). Guarded by fold_mu_.
  std::vector<std::string> tenant_names_;
  absl::flat_hash_map<std::string, int32_t> tenant_index_;
  // The folded figures of gone VMs, by tenant. Taken after a host's lock,
  // never before.
  struct TenantSeries;
  mutable std::mutex gone_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<TenantSeries>> gone_by_tenant_;

  // AddInBackground's queue; the destructor runs what is queued, then joins.
  std::mutex queue_mu_;
  std::condition_variable queue_wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread worker_;  // last: starts once the rest is built
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATS_STATS_AGGREGATOR_H_
