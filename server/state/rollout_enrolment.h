// Enabling a staged rollout's hosts (issue #35 item 6): each host a
// rollout enables is marked on its own host record (Host.enabled_by_rollout)
// in commits of at most kEnableChunk hosts, so that a stage of any size
// fits etcd's limits. A mark is never taken back: an enrolment cut short
// leaves the fleet as a smaller stage would, and the leader's next check
// (RolloutControl::RunPass) enables the rest.
#ifndef COSCHED_SERVER_STATE_ROLLOUT_ENROLMENT_H_
#define COSCHED_SERVER_STATE_ROLLOUT_ENROLMENT_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cosched/v1/types.pb.h"
#include "server/state/placement_view.h"
#include "server/state/write_support.h"
#include "store/store.h"

namespace cosched::server {

// Hosts one commit of an enrolment marks at most: each is one operation of
// an etcd Txn (128 by default); a commit still over the store's limits is
// halved until it fits.
inline constexpr size_t kEnableChunk = 64;

// Whether a rollout may still enable hosts its record does not list: only
// a running or done one enables more.
bool Enrolling(const v1::Rollout& record);

// How an enrolment ends: its first failure, and how many hosts it marked.
using EnableDone = std::function<void(absl::Status status, int enabled)>;

// Marks `hosts` enabled by rollout `rollout_id` in `store` (each that
// still waits, while the rollout is running or done; a host its record
// lists, whatever its state), kEnableChunk hosts a commit, each audited as
// `actor` (EnableRolloutHosts) with `why`, and applies the marked records
// to `placement`. All commits are submitted at once (the store's group
// commit packs them); `done` once every one answered, on the store's
// completion thread (or this one, with no host). `store` and `placement`
// outlive it.
void EnableRolloutHosts(store::Store& store, PlacementView& placement,
                        const std::string& rollout_id, const std::string& why,
                        std::vector<std::string> hosts, const Actor& actor, EnableDone done);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_ROLLOUT_ENROLMENT_H_
