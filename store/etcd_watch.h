// Internal to cosched_store: the watch of an EtcdStore's prefix, which keeps
// the replica's cache (store/etcd_cache.h) and tells the store what other
// csd replicas commit (issue #16, part 2). It follows the prefix from a
// revision on, with previous values and progress notifications; resumes
// from the last revision it handled when the stream breaks (with backoff,
// saying the store is unreachable meanwhile); and when etcd compacted away
// what it had yet to read, loads the cache again and asks its store to
// resync every view, and follows on from a fresh revision.
//
// Two threads: one reads the stream and applies each revision to the cache
// at once, the other sorts revisions into the store's own commits and other
// writers' changes and delivers those. The second may wait for the store's
// writer (Hooks::is_own); the first never does, so a writer that waits for
// the cache to reach a revision always sees it come.
#ifndef COSCHED_STORE_ETCD_WATCH_H_
#define COSCHED_STORE_ETCD_WATCH_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "etcd/client.h"
#include "store/etcd_cache.h"
#include "store/store.h"

namespace cosched::store {

// What one revision's events under the prefix say.
struct WatchedRevision {
  int64_t revision = 0;
  // The commit id in <prefix>/meta when the revision is a csd commit (every
  // csd commit rewrites meta); nullopt for a write of anything else.
  std::optional<uint64_t> commit_id;
};

// Adds what `event` (a key under `prefix`) changed to `change` and to
// `revision`. `change.vms` keeps the first previous value of each VM, so
// that a change covering several revisions says what the VM was before all
// of them. DATA_LOSS naming the key for a value that does not parse (what
// could be read of the event is still added).
absl::Status AddWatchEvent(absl::string_view prefix, const mvccpb::Event& event,
                           ExternalChange& change, WatchedRevision& revision);

struct EtcdWatchOptions {
  // Waits between attempts to re-establish a broken watch: doubled from
  // min to max, back to min once a watch is established.
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  // Tests only: called on the reading thread before each response is
  // applied, to hold the cache back (a watch that lags).
  std::function<void()> before_apply;
};

// Thread-safe; runs on a thread of its own from construction to
// destruction.
class EtcdPrefixWatch {
 public:
  // What the watch asks of its store.
  struct Hooks {
    // Whether the csd commit with this meta commit id, at this revision,
    // is the store's own. May wait until the store's writer has queued the
    // commit's completion: a change of another replica after it must be
    // delivered after its done functions (Store::SetExternalObserver).
    std::function<bool(uint64_t commit_id, int64_t revision)> is_own;
    // Queues a change of other writers, in revision order.
    std::function<void(ExternalChange change)> deliver;
    // Queues a resync at `revision` (the cache was loaded again at it) in
    // order with the store's own commits, and returns once it is
    // delivered, or the error that kept it from it.
    std::function<absl::Status(int64_t revision)> resync;
    // The watch was lost (why: the error) or is back.
    std::function<void(bool reachable, const std::string& why)> reachability;
  };

  // Watches <prefix>/ after `revision` (every commit up to it is known,
  // and in `cache`).
  EtcdPrefixWatch(etcd::Client& client, std::string prefix, int64_t revision, EtcdCache& cache,
                  Hooks hooks, EtcdWatchOptions options = {});
  // Cancels the stream and joins both threads.
  ~EtcdPrefixWatch();

  // The last revision read from the stream (and applied to the cache).
  int64_t revision() const { return revision_.load(std::memory_order_acquire); }

 private:
  // A response with events, or a resync at a revision, for the delivering
  // thread.
  struct Item {
    etcdserverpb::WatchResponse response;
    int64_t resync = 0;
  };

  void Run();
  void DeliveryLoop();
  void Enqueue(Item item);
  // Follows one stream from revision() + 1 until it breaks or the watch
  // stops: the error, or OK when stopping or when a resync is owed
  // (`resync` set). `established` says whether etcd created the watch.
  absl::Status Follow(bool& resync, bool& established);
  // Loads the cache at etcd's revision, has the store resync at it and
  // moves there.
  absl::Status Resync();
  // On the reading thread: the response's revisions into the cache.
  void Apply(const etcdserverpb::WatchResponse& response);
  // On the delivering thread: own commits and other writers' changes.
  void Deliver(const etcdserverpb::WatchResponse& response);
  void SetReachable(bool reachable, const std::string& why);
  bool Stopping();
  // Sleeps `d` unless the watch stops first; false when it stops.
  bool Sleep(absl::Duration d);

  etcd::Client& client_;
  const std::string prefix_;
  EtcdCache& cache_;
  const Hooks hooks_;
  const EtcdWatchOptions options_;
  std::atomic<int64_t> revision_;
  bool reachable_ = true;  // the watch thread's only

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;                      // guarded by mu_
  etcd::Client::WatchStream* stream_ = nullptr;  // guarded by mu_; owned by Follow
  std::deque<Item> items_;                       // guarded by mu_
  std::condition_variable items_cv_;
  std::thread thread_;
  std::thread delivery_;
};

}  // namespace cosched::store

#endif  // COSCHED_STORE_ETCD_WATCH_H_
