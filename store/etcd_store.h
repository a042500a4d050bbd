// The replicated store: csd's desired state in etcd, under one key prefix,
// so that several csd replicas can share it (issue #16).
#ifndef COSCHED_STORE_ETCD_STORE_H_
#define COSCHED_STORE_ETCD_STORE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "etcd/client.h"
#include "store/etcd_cache.h"
#include "store/etcd_maintenance.h"
#include "store/etcd_replicas.h"
#include "store/etcd_transaction.h"
#include "store/etcd_watch.h"
#include "store/group_commit_writer.h"
#include "store/store.h"

namespace cosched::store {

// The key under an etcd prefix ("<prefix>/restore-in-progress") that is
// present while a restore or a migration (store/store_tools.h) writes under
// it: EtcdStore::Open refuses a store with it, so that csd never starts on
// a half-written copy.
inline constexpr absl::string_view kRestoreMarkerKey = "restore-in-progress";

struct EtcdStoreOptions {
  // Members, TLS, deadline and the limits the members run with.
  etcd::ClientOptions client;
  // Every key of the store begins with "<prefix>/". Absolute ("/cosched"),
  // without a trailing '/'. The prefix belongs to csd: nothing else may
  // write under it.
  std::string prefix = "/cosched";
  // Write functions committed together at most (fewer when etcd's limits
  // are reached first).
  int max_batch = 64;
  // Runs of a write function that lost a race before it fails ABORTED.
  int max_attempts = 20;
  // Backoff of the prefix's watch when it breaks.
  EtcdWatchOptions watch;
  // This replica among those on the prefix, and its leadership.
  EtcdReplicasOptions replicas;
  // The leader's jobs: compaction, the change-log sweep, audit pruning.
  EtcdMaintenanceOptions maintenance;
  // Open the store although <prefix>/restore-in-progress is present: only
  // for the tool that wrote it (store/store_tools.h), which removes it last.
  bool ignore_restore_marker = false;
};

// Store on etcd. Layout under the prefix (values are serialized protos):
//   meta                      EtcdMeta, written by every commit
//   vms/<vm_id>               v1::VM
//   policies/<tenant_id>      v1::TenantPolicy
//   rollout                   v1::Rollout: the current staged rollout
//   hosts/<host_id>           v1::Host
//   reports/<host_id>         EtcdReport: the host's observations, one
//                             key a host: a write function's puts and
//                             deletes of its VMs' observations are folded
//                             into one put of it (EtcdTransaction::
//                             FinishWrites), made only when one changed
//   obs/<vm key>/<host_id>    empty: the index of reports by VM id and UUID
//   vm_by/host/<host_id>/<vm_id>, vm_by/reported/<host_id>/<vm_id>,
//   vm_by/tenant/<tenant_id>/<vm_id>
//                             empty: the index of VMs by owner host, by each
//                             host that reports them and by tenant, written
//                             with the VM (layout 2); ListVms with one of
//                             these filters reads its VMs only, not all
//   changes/<host_id>/<vm_id> empty: its mod_revision is when the VM's
//                             assignment last changed for that host
//   audit/<~sequence, hex>    v1::AuditRecord, newest first in key order
//   replicas/<name>           EtcdReplica, under the replica's lease
//   seen/<name>/<part>        EtcdSeen: the hosts whose agents it hears,
//                             under its lease (store/etcd_replicas.h)
//   leader                    EtcdReplica: the replica that leads, under
//                             its lease (store/etcd_replicas.h)
//   compact                   EtcdCompaction: the leader's last compaction
//                             (store/etcd_maintenance.h)
//
// Reads come from the replica's cache (store/etcd_cache.h): a copy of the
// keys write functions read, loaded at open and kept by the prefix's watch
// and by this store's own commits, multi-versioned so that a function reads
// every key as of one revision R. A write function costs no etcd round trip
// before its batch's Txn; a Read waits, after one linearizable read of
// <prefix>/meta, until the cache has reached meta's revision, so it sees
// every commit acknowledged before it began.
//
// Concurrency, optimistic as etcd's STM: a write function reads the cache's
// snapshot at revision R (over the function's own buffered writes) and its
// writes commit as one Txn only if <prefix>/meta still has the mod_revision
// it had at R; otherwise the function runs again once the cache has reached
// meta's new revision (the Txn's failure branch reads it), up to
// max_attempts times. Every commit rewrites meta, so one compare orders all
// writers on the prefix, in this process or another csd, and a cache that
// lags behind another replica's commit can never let a stale read commit:
// a commit is serializable, range reads included (a per-key compare could
// not see a key created or deleted inside a range it read), and the audit
// sequence and report numbers in meta are unique and increasing across
// writers. The price is that two replicas' writes to different VMs also
// conflict and one retries; a retry costs the function and a wait for the
// watch, and a batch carries up to max_batch writes.
//
// Revisions are etcd's. The revision a commit produces is only known when
// it is applied, so WriteRevision() is R + 1: greater than every csd commit
// before it (they are at or below R), at most the commit's revision, and
// equal to it unless a key outside csd's writes changed in between (a lease
// expiring, another user of the etcd cluster). CurrentRevision() and the
// change log use the commit's real revision (the change log is keys whose
// mod_revision etcd sets), so an agent's resume revision is an etcd
// revision that means the same on every replica, and a revision recorded in
// a record is never above the commit that wrote it.
//
// Writes run on the group-commit writer (store/group_commit_writer.h), a
// batch at a time; done callbacks and the commit observer run on its
// completion thread in commit order. A batch that does not fit etcd's limits is committed in several
// Txns at write-function boundaries (each stays atomic; the later ones run
// again on the first one's result); a single function that does not fit is
// refused with RESOURCE_EXHAUSTED naming the limit.
//
// Other replicas' commits: the watch of the prefix (store/etcd_watch.h),
// started at open, follows every commit after the revision Open read at;
// once SetExternalObserver is called, it delivers them. Each revision's <prefix>/meta carries the id of the commit
// that wrote it, which the writer registers before it sends the Txn: the
// watch skips the store's own commits by that id (not by revision: the
// watch may see a commit before the writer has etcd's answer with its
// revision), after waiting until the writer has queued the commit's
// completion, and queues what other replicas changed on the completion
// thread behind it. So the external observer runs in revision order with
// done callbacks, and what a replica wrote after this store's commit is
// never overwritten by that commit's done callbacks. A commit whose outcome
// the writer could not learn (it answered UNAVAILABLE) is delivered as
// another replica's when the watch sees it.
//
// Thread-safe. Not to be called from a write function, a done callback or
// the commit observer with WriteSync (each would wait for its own thread).
class EtcdStore final : public Store {
 public:
  // Connects and reads <prefix>/meta. INVALID_ARGUMENT for a bad prefix or
  // options; FAILED_PRECONDITION for plaintext off loopback, unreadable TLS
  // files or a layout newer than this code; UNAVAILABLE naming etcd when it
  // cannot be reached; DATA_LOSS when meta does not parse;
  // FAILED_PRECONDITION when a restore or migration into the prefix did not
  // finish (its marker key is present), or when another live replica holds
  // this one's name (waited for up to the lease ttl first: a predecessor
  // that died gives it up when its lease expires).
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Open(const EtcdStoreOptions& options);

  // Commits what was submitted, then stops the writer.
  ~EtcdStore() override;

  void Write(TxnFn fn, DoneFn done) override;
  absl::Status Read(const TxnFn& fn) override;
  // From the cache as it is: it has every commit this store made or
  // delivered, and what every earlier Read waited for.
  absl::Status ReadRecent(const TxnFn& fn) override;
  // The revision of the last csd commit on the prefix that this store knows
  // of: its own, or another replica's once a read or write snapshot or the
  // watch saw it.
  int64_t CurrentRevision() const override;
  void SetCommitObserver(CommitObserver observer) override;
  void SetExternalObserver(ExternalObserver observer) override;
  // Unreachable when the watch breaks, reachable once it is back.
  void SetReachabilityObserver(ReachabilityObserver observer) override;

  // The leader's jobs run in this store (store/etcd_maintenance.h); the
  // other jobs that must run once ask Leads() and fence their writes.
  bool Leads() const override { return replicas_->leading(); }
  void SetLeadershipObserver(LeadershipObserver observer) override;

  etcd::Client& client() { return *client_; }
  EtcdReplicas& replicas() { return *replicas_; }
  EtcdMaintenance& maintenance() { return *maintenance_; }
  const EtcdCache& cache() const { return *cache_; }
  const std::string& prefix() const { return options_.prefix; }

  // The layout version this code writes in <prefix>/meta.
  static constexpr int kLayoutVersion = kEtcdLayoutVersion;

 private:
  // A store of layout 1 gets the vm_by/ index of layout 2 (at open).
  absl::Status BuildVmIndex();

  // A commit of this store the watch has yet to see.
  struct OwnCommit {
    enum State { kInFlight, kQueued, kUnknown } state = kInFlight;
    int64_t revision = 0;  // once committed
  };

  EtcdStore(EtcdStoreOptions options, std::unique_ptr<etcd::Client> client);
  // The watch of the prefix from opened_revision_, feeding cache_.
  void StartWatch();
  // Waits until the cache has every commit up to `revision`: UNAVAILABLE
  // naming how far behind it is when the client's deadline passes first.
  absl::Status CatchUp(int64_t revision);

  // Runs and commits one batch, on the writer thread: each write's status,
  // the hosts whose assignments changed in what committed, and (once the
  // batch's completion is queued) its Txns marked queued for the watch.
  BatchOutcome RunBatch(std::vector<PendingWrite>& batch);
  // RunBatch's rounds: `committed` gets the commit ids and revisions of the
  // Txns it committed.
  void RunRounds(std::vector<PendingWrite>& batch, BatchOutcome& outcome,
                 std::vector<std::pair<uint64_t, int64_t>>& committed);
  // The watch may now skip these commits of this store: their completions
  // are queued.
  void MarkQueued(const std::vector<std::pair<uint64_t, int64_t>>& committed);
  // The writer's bookkeeping of its commits for the watch: before a Txn
  // is sent, and once it failed: not applied, or perhaps applied (its
  // answer was lost and etcd could not tell).
  void RegisterCommit(uint64_t commit_id);
  void SettleCommit(uint64_t commit_id, bool maybe_applied);
  // The watch's hooks (EtcdPrefixWatch::Hooks).
  bool IsOwnCommit(uint64_t commit_id, int64_t revision);
  void DeliverExternal(ExternalChange change);
  absl::Status DeliverResync(int64_t revision);
  void NoteReachability(bool reachable, const std::string& why);
  // UNAVAILABLE naming etcd while the watch is broken.
  absl::Status CheckWatch();
  // After a commit whose answer was lost: makes sure it can no longer apply
  // and says whether it did (its revision) or not (0). UNAVAILABLE when
  // etcd cannot tell, or when meta changed too often since to look back
  // that far (never "not applied" without having seen it).
  absl::StatusOr<int64_t> ResolveCommit(int64_t meta_revision, const std::string& meta_value,
                                        uint64_t commit_id);
  void NoteRevision(int64_t revision);

  const EtcdStoreOptions options_;
  std::unique_ptr<etcd::Client> client_;
  std::unique_ptr<EtcdCache> cache_;
  std::atomic<int64_t> committed_revision_{0};
  // etcd's revision when Open read the store: the watch starts after it.
  int64_t opened_revision_ = 0;

  // Held while an external change is queued on the writer's completion
  // thread, so that none is once SetExternalObserver(nullptr) returned.
  std::mutex watch_mu_;
  ExternalObserver external_observer_;          // guarded by watch_mu_
  ReachabilityObserver reachability_observer_;  // guarded by watch_mu_
  // Set while the watch is broken: writes then fail at once, unsent (the
  // answer of one sent to an unreachable etcd would be lost, and its
  // outcome unknown), and the cache may be behind.
  std::optional<std::string> watch_lost_;  // guarded by watch_mu_
  // While an external observer is set: commits the watch has yet to see,
  // by commit id.
  bool watching_ = false;                                // guarded by watch_mu_
  std::unordered_map<uint64_t, OwnCommit> own_commits_;  // guarded by watch_mu_
  std::condition_variable own_cv_;  // an own commit was settled, or the watch stops

  std::unique_ptr<GroupCommitWriter> writer_;
  // Resigns last, once the writer committed what was queued.
  std::unique_ptr<EtcdReplicas> replicas_;
  // Stopped first.
  std::unique_ptr<EtcdMaintenance> maintenance_;
  // Stopped by the destructor once the writer is: a write waiting for the
  // cache needs it until then.
  std::unique_ptr<EtcdPrefixWatch> watch_;
};

}  // namespace cosched::store

#endif  // COSCHED_STORE_ETCD_STORE_H_
