// Internal to cosched_store: EtcdCache, a replica's copy of csd's records
// under an etcd prefix, kept by the prefix's watch and by the replica's own
// commits, so that write functions and reads find their records in memory
// instead of one etcd Range each (issue #35).
#ifndef COSCHED_STORE_ETCD_CACHE_H_
#define COSCHED_STORE_ETCD_CACHE_H_

#include <condition_variable>
#include <cstdint>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "etcd/client.h"

namespace cosched::store {

// One key as a snapshot of the cache sees it.
struct CachedKv {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;
};

// Holds the keys csd's write functions read (meta, vms/, vm_by/, policies/,
// rollout, hosts/, reports/, obs/, changes/), not the audit trail (read from
// etcd when asked for, and bounded by its window) nor the replicas' keys
// under leases (replicas/, seen/, leader: EtcdReplicas reads those).
//
// Multi-version: each key keeps the versions a live snapshot may still read,
// so a snapshot taken at revision R reads every key as of R however far the
// cache moves on meanwhile, and applying never waits for a reader longer
// than one lookup. Versions are known by etcd's mod_revision, so the same
// commit applied twice (by the writer from its Txn's answer, then by the
// watch) is one version.
//
// Its revision: every commit up to it that wrote a held key is in it. The
// watch delivers revisions in order; the replica's own commit at X is
// applied before the watch reaches it, which keeps that promise because the
// commit compared <prefix>/meta against the snapshot it ran on (no csd
// commit lies between) and every writer of a held key rewrites meta, but
// for the leader's sweep of changes/ (store/etcd_maintenance.h), whose
// deletes of records no agent can ask for may show a little late.
//
// Thread-safe.
class EtcdCache {
 public:
  explicit EtcdCache(std::string prefix);

  // Whether the cache holds `key`, and every key in [begin, end) (a range
  // within one of the held kinds).
  bool Holds(absl::string_view key) const;
  bool HoldsRange(absl::string_view begin, absl::string_view end) const;

  // Reads every held key at `revision` (0: etcd's newest, linearizably) and
  // merges it in as that revision (keys held and not read become deleted at
  // it, so that older snapshots still read what they read). At open, and
  // when the watch fell behind a compaction. Returns the revision read at.
  absl::StatusOr<int64_t> Load(etcd::Client& client, int64_t revision = 0);

  // The watch's events of one revision, all of them (a revision's events
  // come in one response): events[begin, end).
  void ApplyEvents(int64_t revision, const google::protobuf::RepeatedPtrField<mvccpb::Event>& events,
                   int begin, int end);
  // The watch has sent every event up to `revision` (a progress
  // notification, or events of keys it does not hold).
  void ApplyProgress(int64_t revision);
  // This replica's own commit at `revision`: its writes (nullopt: deleted).
  void ApplyCommit(int64_t revision,
                   const std::map<std::string, std::optional<std::string>>& writes);

  // The revision every commit up to which is in the cache.
  int64_t revision() const;
  // Waits until revision() >= `revision`; false when `timeout` passed first.
  bool WaitFor(int64_t revision, absl::Duration timeout) const;

  // A consistent view at the revision the cache had when it was taken; the
  // versions it reads are kept until it is destroyed. Cheap to take.
  class Snapshot {
   public:
    ~Snapshot();
    Snapshot(const Snapshot&) = delete;
    Snapshot& operator=(const Snapshot&) = delete;

    int64_t revision() const { return revision_; }
    // `key` as of revision(); nullopt when absent then.
    std::optional<CachedKv> Get(absl::string_view key) const;
    // Keys in [begin, end) present at revision(), in order, at most `limit`
    // (copied out, so that a caller may read more while it visits them).
    std::vector<CachedKv> Range(absl::string_view begin, absl::string_view end,
                                size_t limit) const;

   private:
    friend class EtcdCache;
    Snapshot(const EtcdCache& cache, int64_t revision) : cache_(cache), revision_(revision) {}
    const EtcdCache& cache_;
    const int64_t revision_;
  };
  std::unique_ptr<Snapshot> Take() const;

  // Keys and versions held: what a test or a metric may ask of its size.
  size_t keys() const;
  size_t versions() const;

 private:
  struct Version {
    int64_t revision = 0;
    std::optional<std::string> value;  // nullopt: deleted at `revision`
  };
  using Versions = std::vector<Version>;  // by revision, ascending

  // The version of `versions` a snapshot at `revision` reads, or null.
  static const Version* At(const Versions& versions, int64_t revision);
  // Adds a version (none when the key has one at that revision already).
  // Under mu_, exclusive.
  void AddVersion(const std::string& key, int64_t revision, std::optional<std::string> value);
  // Moves revision_ (and watched_, for the watch) forward, drops what no
  // snapshot can read any more and wakes waiters. Under mu_, exclusive.
  void Advance(int64_t revision, bool watched);
  void Prune();

  const std::string prefix_;

  mutable std::shared_mutex mu_;
  std::map<std::string, Versions> keys_;  // guarded by mu_
  // Written under mu_ (exclusive); read by WaitFor without it.
  std::atomic<int64_t> revision_{0};
  // The watch's revision: a deletion is kept as a version until the watch
  // is past it, so that the watch's copy of an older write cannot bring the
  // key back.
  int64_t watched_ = 0;  // guarded by mu_
  // Keys with more than one version or a deletion, by the revision that
  // made them so: pruned once every snapshot and the watch are past it.
  std::deque<std::pair<int64_t, std::string>> prunable_;  // guarded by mu_
  size_t versions_ = 0;                                   // guarded by mu_

  // The revisions of live snapshots: registered under mu_ (shared), so that
  // Prune (under mu_, exclusive) never misses one being taken.
  mutable std::mutex readers_mu_;
  mutable std::multiset<int64_t> readers_;  // guarded by readers_mu_

  mutable std::mutex wait_mu_;
  mutable std::condition_variable advanced_;
};

}  // namespace cosched::store

#endif  // COSCHED_STORE_ETCD_CACHE_H_
