// What csd's policy engine did before this csd started, read back from the
// audit trail: each host's layout changes within a span (one per revision
// of its EngineDecision records), so that a restarted csd keeps counting
// engine.max_changes_per_hour where its predecessor left off (the dwell
// comes from the VMs' decided_at). Thread-safe: it only reads the store.
#ifndef COSCHED_SERVER_ENGINE_ENGINE_HISTORY_H_
#define COSCHED_SERVER_ENGINE_ENGINE_HISTORY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/store.h"

namespace cosched::server {

// Host -> when the engine changed its layout at or after `since`, oldest
// first. A record whose VM does not parse or names no host is skipped: it
// cannot be counted against a host. The store's error.
absl::StatusOr<std::map<std::string, std::vector<absl::Time>>> LayoutChangesSince(
    store::Store& store, absl::Time since);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_ENGINE_ENGINE_HISTORY_H_
