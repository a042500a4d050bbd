// What an agent's assignment stream sends: each message read from the store
// for one host (docs/architecture.md, "What an agent's revision means").
#ifndef COSCHED_SERVER_FANOUT_WATCH_READS_H_
#define COSCHED_SERVER_FANOUT_WATCH_READS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/agent.pb.h"
#include "store/store.h"

namespace cosched::server {

// Thread-safe: reads only.
class WatchReads {
 public:
  explicit WatchReads(store::Store& store) : store_(store) {}

  // INVALID_ARGUMENT for a bad host id or negative revision;
  // FAILED_PRECONDITION for an unregistered host.
  absl::Status ValidateWatch(const v1::WatchAssignmentsRequest& request);
  // Every message's revision is the one of the read that produced it, so
  // that an agent at revision R holds every change of its host up to R: a
  // commit that lands while the message is read is either in it or above
  // its revision.
  //
  // The first message of a watch: a delta since `resume_revision` (empty
  // when nothing changed) when the change log still covers it, else a
  // snapshot of the host's assignments.
  absl::StatusOr<v1::WatchAssignmentsResponse> FirstWatchMessage(absl::string_view host_id,
                                                                 int64_t resume_revision);
  // The changes of `host_id` after `revision`, as a delta (or a snapshot
  // when the log no longer covers it); nullopt when nothing changed.
  absl::StatusOr<std::optional<v1::WatchAssignmentsResponse>> WatchUpdate(
      absl::string_view host_id, int64_t revision);

 private:
  // What the watch of `host_id` sends after `revision` (0: a snapshot), in
  // one read: a delta, empty when nothing changed, or a snapshot when the
  // change log no longer covers `revision`.
  absl::StatusOr<v1::WatchAssignmentsResponse> ReadWatchMessage(absl::string_view host_id,
                                                                int64_t revision);

  store::Store& store_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_FANOUT_WATCH_READS_H_
