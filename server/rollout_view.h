// What csd knows of the staged rollout (v1::Rollout) between writes: the
// current record, kept in memory so that every Register and Report answer
// says whether the host is enabled without reading the store, and the
// pure rules the rollout follows: which hosts a stage enables, and whether
// a host is enabled.
#ifndef COSCHED_SERVER_ROLLOUT_VIEW_H_
#define COSCHED_SERVER_ROLLOUT_VIEW_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cosched/v1/agent.pb.h"
#include "cosched/v1/types.pb.h"
#include "store/store.h"

namespace cosched::server {

// What a rollout says of one host.
struct RolloutVerdict {
  bool enabled = true;
  // Why not, in a sentence; empty when enabled.
  std::string reason;
};

// Enabled without a rollout, once one is done over every host (no
// selector), and for the hosts in its enabled_hosts; every other host
// waits, whatever the rollout's state: an aborted rollout enables no more.
RolloutVerdict VerdictOf(const v1::Rollout* rollout, absl::string_view host_id);

// The order stages enable hosts in: FNV-1a of the host id, so that it does
// not depend on when hosts registered, and the same host leads in every
// rollout (a canary host stays one).
uint64_t RolloutHash(absl::string_view host_id);

// The hosts a stage at `percent` enables among `matching` (host ids, any
// order, no duplicates): the first ceil(N * percent / 100) in RolloutHash
// order (ties by id), at least one when N > 0. A stage's hosts contain
// every lower percent's over the same hosts; 100 gives all of them.
std::vector<std::string> StageHosts(std::vector<std::string> matching, int percent);

// Thread-safe cache of the current rollout.
class RolloutView {
 public:
  // Reads the rollout from the store.
  absl::Status Load(store::Store& store);
  void Set(std::optional<v1::Rollout> rollout);
  std::optional<v1::Rollout> Get() const;
  RolloutVerdict VerdictFor(absl::string_view host_id) const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const v1::Rollout> rollout_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_ROLLOUT_VIEW_H_
