// What csd knows of the staged rollout (v1::Rollout) between writes: the
// current record, kept in memory so that every Register and Report answer
// says whether the host is enabled without reading the store, and the
// pure rules the rollout follows: which hosts a stage enables, and whether
// a host is enabled.
#ifndef COSCHED_SERVER_STATE_ROLLOUT_VIEW_H_
#define COSCHED_SERVER_STATE_ROLLOUT_VIEW_H_

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
#include "common/labels.h"
#include "cosched/v1/types.pb.h"
#include "store/store.h"

namespace cosched::server {

// What a rollout says of one host.
struct RolloutVerdict {
  bool enabled = true;
  // Why not, in a sentence; empty when enabled.
  std::string reason;
  // An operator switched enforcement off on the host or the fleet (the off
  // switch; Host.enforcement_off, Rollout.enforcement_off), and why.
  bool off = false;
  std::string off_reason;
};

// A rollout only enables. A host enforces unless it waits for a rollout
// (Host.waits_for_rollout: it registered first while new_hosts was
// wait-for-rollout); a waiting host enforces once a rollout enabled it
// (Host.enabled_by_rollout, or an older csd's list in `rollout`), or
// `rollout` is done and its selector matches the host's labels. An
// aborted rollout enables no more; nothing ever disables a host. Apart
// from all that, `off` says whether an operator's off switch holds for the
// host (its own, or the fleet's in `rollout`).
RolloutVerdict VerdictOf(const v1::Rollout* rollout, const v1::Host& host);

// What `rollout`'s own record says enabled `host_id` (an older csd's lists,
// Rollout.enabled_hosts, sorted): its id, "before <id>" for a host it
// carried over from the rollout before; empty when it does not list it.
std::string ListedBy(const v1::Rollout& rollout, absl::string_view host_id);

// The rollout that enabled a waiting host: Host.enabled_by_rollout, or what
// an older csd's record lists (ListedBy); empty when none has (a done
// rollout's selector enables without naming the host).
std::string EnabledBy(const v1::Rollout* rollout, const v1::Host& host);

// Rollout.matching_hosts, enabled_count and carried_count of `rollout`
// over every registered host, fed one by one. Not stored: answers count
// them from the hosts as the answering csd knows them.
class RolloutCounter {
 public:
  explicit RolloutCounter(const v1::Rollout& rollout);
  void Add(const v1::Host& host);
  // Sets the three fields of `rollout`.
  void Fill(v1::Rollout& rollout) const;

 private:
  const v1::Rollout& rollout_;
  std::optional<LabelSelector> selector_;
  int matching_ = 0;
  int enabled_ = 0;
  int carried_ = 0;
};

// Whether `rollout` is a started one (not only the new_hosts setting).
inline bool Started(const v1::Rollout& rollout) { return !rollout.rollout_id().empty(); }

// The order stages enable hosts in: FNV-1a of the host id, so that it does
// not depend on when hosts registered, and the same host leads in every
// rollout (a canary host stays one).
uint64_t RolloutHash(absl::string_view host_id);

// The hosts a stage at `percent` enables among `matching` (host ids, any
// order, no duplicates): the first ceil(N * percent / 100) in RolloutHash
// order (ties by id), at least one when N > 0, in that order. A stage's
// hosts contain every lower percent's over the same hosts; when it takes
// them all (100), it gives them as `matching` had them.
std::vector<std::string> StageHosts(std::vector<std::string> matching, int percent);

// Thread-safe cache of the current rollout.
class RolloutView {
 public:
  // Reads the rollout from the store.
  absl::Status Load(store::Store& store);
  void Set(std::optional<v1::Rollout> rollout);
  std::optional<v1::Rollout> Get() const;
  RolloutVerdict VerdictFor(const v1::Host& host) const;
  // The fleet's new_hosts setting (NEW_HOSTS_ENFORCE when never set).
  v1::NewHosts NewHosts() const;
  // Whether the fleet's off switch is on (Rollout.enforcement_off).
  bool FleetOff() const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const v1::Rollout> rollout_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_ROLLOUT_VIEW_H_
