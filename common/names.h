// The short names people type and read for the API's enums
// ("vm", "tenant", "emulator", ...).
#ifndef COSCHED_COMMON_NAMES_H_
#define COSCHED_COMMON_NAMES_H_

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "cosched/v1/types.pb.h"

namespace cosched {

// "vm", "tenant", "none", "dedicated"; "default" for UNSPECIFIED.
std::string IsolationName(v1::IsolationLevel level);
// INVALID_ARGUMENT naming `field` for anything but the four names.
absl::StatusOr<v1::IsolationLevel> ParseIsolation(absl::string_view field,
                                                  absl::string_view name);

// "vcpus", "emulator", "full"; "default" for UNSPECIFIED.
std::string ThreadScopeName(v1::ThreadScope scope);
absl::StatusOr<v1::ThreadScope> ParseThreadScope(absl::string_view field,
                                                 absl::string_view name);

// "supported", "no-smt", "no-kernel-support", "no-permission", "unknown".
std::string CoreSchedSupportName(v1::CoreSchedSupport support);

// "enforced", "partial", "failed", "fail-closed", "pending", "held",
// "waived", "not-enabled", "unknown".
std::string EnforcementStateName(v1::EnforcementState state);

// "running", "paused", "halted", "aborted", "done", "unknown".
std::string RolloutStateName(v1::Rollout::State state);

// "enforce" (also for UNSPECIFIED, its default) and "wait-for-rollout";
// ParseNewHosts takes those names, INVALID_ARGUMENT naming `field`
// otherwise.
std::string NewHostsName(v1::NewHosts new_hosts);
absl::StatusOr<v1::NewHosts> ParseNewHosts(absl::string_view field, absl::string_view name);

}  // namespace cosched

#endif  // COSCHED_COMMON_NAMES_H_
