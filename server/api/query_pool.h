// Where csd runs the queries that simulate (ControlPlane.Plan and
// ExplainVM): on a few threads of their own, never on gRPC's callback
// threads, with a bound on how many run or wait at once and on how long
// one may wait (issue #32). Any viewer may ask them; a burst of fleet-wide
// Plans must not take the threads, the cores or the engine's lock that
// Reports, watches and the engine's own passes need.
#ifndef COSCHED_SERVER_API_QUERY_POOL_H_
#define COSCHED_SERVER_API_QUERY_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace cosched::server {

struct QueryPoolOptions {
  // Queries running at once (each takes a core while it simulates).
  int threads = 1;
  // Queries waiting for a thread at most; past it a query is refused.
  size_t max_waiting = 4;
  // A query that waited this long for a thread is answered without running.
  absl::Duration max_wait = absl::Seconds(10);
};

// Thread-safe.
class QueryPool {
 public:
  // `expired`: the query waited past max_wait (or the pool is stopping) and
  // must only answer that; otherwise it runs.
  using Query = std::function<void(absl::Status expired)>;

  explicit QueryPool(QueryPoolOptions options);
  // Stop().
  ~QueryPool();
  // Answers every query still waiting (UNAVAILABLE), waits for the running
  // ones, and refuses any later Submit. Idempotent.
  void Stop();
  QueryPool(const QueryPool&) = delete;
  QueryPool& operator=(const QueryPool&) = delete;

  // Queues `query` (named in errors, e.g. "Plan"), or RESOURCE_EXHAUSTED
  // naming the limits when max_waiting are waiting already; `query` is then
  // not called.
  absl::Status Submit(const std::string& name, Query query);

  // Queries running and waiting now.
  size_t running() const;
  size_t waiting() const;

 private:
  struct Waiting {
    std::string name;
    Query query;
    absl::Time since;
  };
  void Work();

  const QueryPoolOptions options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Waiting> queue_;  // guarded by mu_
  size_t running_ = 0;         // guarded by mu_
  bool stopping_ = false;      // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_API_QUERY_POOL_H_
