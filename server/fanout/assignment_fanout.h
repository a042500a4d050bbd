// Streams each watching agent the assignments of its host: the first message
// (snapshot or resumed delta), then a delta after every commit that touched
// the host. Uses gRPC's callback API: no thread per stream. A stream holds
// no queue of messages, only the revision it has sent, so memory per agent
// stays bounded however far it falls behind: a slow agent gets one delta
// covering everything since its last message.
#ifndef COSCHED_SERVER_FANOUT_ASSIGNMENT_FANOUT_H_
#define COSCHED_SERVER_FANOUT_ASSIGNMENT_FANOUT_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "grpcpp/support/server_callback.h"
#include "server/fanout/watch_reads.h"

namespace cosched::server {

// Thread-safe. Store reads for the streams run on one worker thread, never
// on the store's writer.
class AssignmentFanout {
 public:
  explicit AssignmentFanout(WatchReads* reads);
  // Call after the gRPC server has shut down.
  ~AssignmentFanout();

  // The reactor of one WatchAssignments call; the request must be valid.
  grpc::ServerWriteReactor<v1::WatchAssignmentsResponse>* StartWatch(
      const v1::WatchAssignmentsRequest& request);

  // The Store's commit observer.
  void OnCommit(const std::vector<std::string>& hosts);
  // Anything may have changed (the store's watch resynced): every stream
  // reads what changed since it last sent.
  void OnResync();

  // The store (etcd) cannot be reached. Once that has lasted `end_after`,
  // every stream is ended with UNAVAILABLE naming `why`, and so is every
  // stream that starts while it lasts: an agent then moves to another
  // replica, which can send it what is written there, instead of waiting
  // on one that receives nothing. Reachable again: streams stay. A zero
  // `end_after` never ends them.
  void SetStoreReachable(bool reachable, absl::Duration end_after, const std::string& why);

  // True while some agent of `host_id` holds a stream.
  bool IsConnected(absl::string_view host_id) const;
  // The hosts that hold a stream now.
  std::vector<std::string> ConnectedHosts() const;
  size_t WatcherCount() const;

 private:
  class Watcher;
  friend class Watcher;

  void Enqueue(std::shared_ptr<Watcher> watcher);
  // Ends every stream (UNAVAILABLE `message`); called without mu_.
  void EndAll(const std::string& message);
  void Remove(const Watcher* watcher);
  void WorkerLoop();

  WatchReads* const reads_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<std::weak_ptr<Watcher>>> watchers_;
  std::deque<std::shared_ptr<Watcher>> queue_;
  std::condition_variable wake_;
  bool stopping_ = false;
  // While the store is lost: when streams end, and why. InfiniteFuture
  // while it is reachable (or they never end).
  absl::Time end_streams_at_ = absl::InfiniteFuture();
  std::string lost_why_;
  std::thread worker_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_FANOUT_ASSIGNMENT_FANOUT_H_
