// The etcd store's singleton jobs, run by the replica that leads
// (store/etcd_replicas.h), each write fenced on its leadership:
//  - compaction, as Kubernetes' API server does it: every interval, etcd's
//    history is compacted to the revision the previous interval ended at,
//    after a Txn that compares the version of <prefix>/compact (so that two
//    replicas that both believe they lead cannot compact twice in one
//    interval). An agent away for longer than an interval resumes with a
//    snapshot (Transaction::ChangesSince sees the compaction);
//  - the change-log sweep: keys changes/<host>/<vm> last written at or
//    below the compacted revision can no longer be asked for (every
//    resume from below it gets a snapshot), so they are deleted, each
//    compared on its mod_revision so that a change recorded meanwhile
//    stays;
//  - audit pruning: records older than the retention are deleted, oldest
//    first, at most prune_rows per interval; and every few seconds the
//    records beyond the newest audit_window_records, so that a fleet's
//    trail cannot fill etcd's quota (the whole trail goes to csd's audit
//    file: server/state/audit_export.h).
// etcd has one history for the whole cluster: compaction is the cluster's,
// not the prefix's, so it runs only when csd is told the cluster is its
// alone (`compact`, store.etcd.compact_history). Otherwise etcd compacts
// itself (--auto-compaction-*) or another application does: audit pruning
// goes on, and so does the sweep, over the change log's own horizon
// instead of a compaction: every interval the leader raises meta's
// changes_horizon to the revision the previous interval ended at (an agent
// resuming from below it gets a snapshot, as below a compaction) and
// deletes the change records at or below it, so the change log stays
// bounded without csd touching etcd's history.
//
// Either way the leader finds the oldest revision etcd still serves (a
// binary search of reads at past revisions) every run, and warns when
// etcd serves more than `uncompacted_revisions` revisions and the oldest
// has not moved for `uncompacted_warning`: nothing compacts the cluster
// (or csd's own compaction fails), and its database grows until etcd's
// quota refuses every write.
#ifndef COSCHED_STORE_ETCD_MAINTENANCE_H_
#define COSCHED_STORE_ETCD_MAINTENANCE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "etcd/client.h"
#include "store/etcd_replicas.h"

namespace cosched::store {

struct EtcdMaintenanceOptions {
  // How often the leader runs the jobs; zero: never.
  absl::Duration interval = absl::Minutes(5);
  // Whether the leader compacts etcd's history: only for a cluster that is
  // csd's alone.
  bool compact = false;
  // When etcd serves more revisions than this, and its oldest has stayed
  // where it is for `uncompacted_warning`, each run warns that nothing
  // compacts the cluster. A million revisions of csd's records are about
  // 1 to 2 GiB of etcd's database, against its default quota of 2 GiB.
  int64_t uncompacted_revisions = 1000000;
  absl::Duration uncompacted_warning = absl::Hours(2);
  // Audit records older than this are deleted; infinite: kept.
  absl::Duration audit_retention = absl::Hours(24 * 365);
  // Audit records deleted per interval at most.
  int64_t prune_rows = 10000;
  // Audit records kept at most, beside the retention: every
  // audit_window_interval the leader deletes those beyond the newest this
  // many (prune_rows per Txn, until none is left), so the trail's window
  // in etcd never grows past it by more than what is written in one
  // interval. 0: no bound.
  int64_t audit_window_records = 0;
  absl::Duration audit_window_interval = absl::Seconds(5);
};

// What one run of the jobs did.
struct MaintenanceRun {
  bool led = false;             // false: not the leader, nothing ran
  int64_t compacted_to = 0;     // 0: no compaction this time
  // `compact` false: the change log's horizon raised to (0: not this time).
  int64_t horizon_raised_to = 0;
  int64_t changes_swept = 0;
  int64_t audit_pruned = 0;
  int64_t audit_trimmed = 0;  // beyond the window
  // The oldest revision etcd serves (1: never compacted), and whether it
  // has stayed there too long with too many revisions after it (the run
  // warned).
  int64_t oldest_revision = 0;
  bool uncompacted = false;
};

// Thread-safe. Runs the jobs every interval on a thread of its own while
// `replicas` leads.
class EtcdMaintenance {
 public:
  EtcdMaintenance(etcd::Client& client, std::string prefix, EtcdReplicas& replicas,
                  EtcdMaintenanceOptions options, int max_txn_ops);
  ~EtcdMaintenance();
  EtcdMaintenance(const EtcdMaintenance&) = delete;
  EtcdMaintenance& operator=(const EtcdMaintenance&) = delete;

  // One run now, on the calling thread (the loop's runs are the same).
  // Errors: etcd's, or FAILED_PRECONDITION when leadership was lost on the
  // way (nothing more is written).
  absl::StatusOr<MaintenanceRun> RunOnce();
  // Only the audit window's trim, now (the loop's runs between full ones).
  // How many records it deleted; 0 when this replica does not lead.
  absl::StatusOr<int64_t> TrimAuditWindowOnce();
  // The oldest revision etcd served at this replica's last run as leader;
  // 0 before one.
  int64_t oldest_revision() const { return oldest_revision_.load(std::memory_order_relaxed); }

 private:
  void Loop();
  // The fenced compaction; returns the revision compacted to (0: none).
  absl::StatusOr<int64_t> Compact(int64_t fence);
  // `compact` false: raises meta's changes_horizon, fenced and compared on
  // meta as read; returns the new horizon (0: none this time).
  absl::StatusOr<int64_t> RaiseHorizon(int64_t fence);
  // What the previous run under `fence` saw (0 for the first run of a
  // leadership: it keeps at least an interval of history, as the previous
  // leader did); notes `now` for the next.
  int64_t NextTarget(int64_t fence, int64_t now);
  // Deletes change records last written at or below `below`, read in pages
  // of one Txn each at one revision.
  absl::StatusOr<int64_t> SweepChanges(int64_t fence, int64_t below);
  absl::StatusOr<int64_t> PruneAudit(int64_t fence);
  // Deletes the audit records beyond the newest audit_window_records.
  absl::StatusOr<int64_t> TrimAuditWindow(int64_t fence);
  // After a fenced Txn that failed: whether the fence still holds (if not,
  // the replicas are told).
  absl::StatusOr<bool> FenceHolds(int64_t fence);
  // The oldest revision etcd serves, searched from the last one found
  // (compaction only moves it up), and whether it has stayed put too long.
  absl::Status CheckHistory(MaintenanceRun& run);

  etcd::Client& client_;
  const std::string prefix_;
  EtcdReplicas& replicas_;
  const EtcdMaintenanceOptions options_;
  const int max_txn_ops_;

  std::mutex run_mu_;  // one run at a time
  // The revision the previous run under the same fence saw: the next
  // run's compaction target.
  int64_t previous_revision_ = 0;  // guarded by run_mu_
  int64_t previous_fence_ = 0;     // guarded by run_mu_
  int64_t swept_to_ = 0;           // guarded by run_mu_
  // When CheckHistory first saw etcd's oldest revision where it is now.
  absl::Time oldest_since_;  // guarded by run_mu_
  std::atomic<int64_t> oldest_revision_{0};

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace cosched::store

#endif  // COSCHED_STORE_ETCD_MAINTENANCE_H_
