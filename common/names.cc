#include "common/names.h"

#include "absl/strings/str_cat.h"

namespace cosched {

std::string IsolationName(v1::IsolationLevel level) {
  switch (level) {
    case v1::ISOLATION_LEVEL_VM: return "vm";
    case v1::ISOLATION_LEVEL_TENANT: return "tenant";
    case v1::ISOLATION_LEVEL_NONE: return "none";
    case v1::ISOLATION_LEVEL_DEDICATED: return "dedicated";
    default: return "default";
  }
}

absl::StatusOr<v1::IsolationLevel> ParseIsolation(absl::string_view field,
                                                  absl::string_view name) {
  if (name == "vm") return v1::ISOLATION_LEVEL_VM;
  if (name == "tenant") return v1::ISOLATION_LEVEL_TENANT;
  if (name == "none") return v1::ISOLATION_LEVEL_NONE;
  if (name == "dedicated") return v1::ISOLATION_LEVEL_DEDICATED;
  return absl::InvalidArgumentError(
      absl::StrCat(field, " '", name.substr(0, 64),
                   "' must be one of vm, tenant, none, dedicated"));
}

std::string ThreadScopeName(v1::ThreadScope scope) {
  switch (scope) {
    case v1::THREAD_SCOPE_VCPUS: return "vcpus";
    case v1::THREAD_SCOPE_EMULATOR: return "emulator";
    case v1::THREAD_SCOPE_FULL: return "full";
    default: return "default";
  }
}

absl::StatusOr<v1::ThreadScope> ParseThreadScope(absl::string_view field,
                                                 absl::string_view name) {
  if (name == "vcpus") return v1::THREAD_SCOPE_VCPUS;
  if (name == "emulator") return v1::THREAD_SCOPE_EMULATOR;
  if (name == "full") return v1::THREAD_SCOPE_FULL;
  return absl::InvalidArgumentError(absl::StrCat(
      field, " '", name.substr(0, 64), "' must be one of vcpus, emulator, full"));
}

std::string CoreSchedSupportName(v1::CoreSchedSupport support) {
  switch (support) {
    case v1::CORE_SCHED_SUPPORT_SUPPORTED: return "supported";
    case v1::CORE_SCHED_SUPPORT_NO_SMT: return "no-smt";
    case v1::CORE_SCHED_SUPPORT_NO_KERNEL_SUPPORT: return "no-kernel-support";
    case v1::CORE_SCHED_SUPPORT_NO_PERMISSION: return "no-permission";
    default: return "unknown";
  }
}

std::string EnforcementStateName(v1::EnforcementState state) {
  switch (state) {
    case v1::ENFORCEMENT_STATE_ENFORCED: return "enforced";
    case v1::ENFORCEMENT_STATE_PARTIAL: return "partial";
    case v1::ENFORCEMENT_STATE_FAILED: return "failed";
    case v1::ENFORCEMENT_STATE_FAIL_CLOSED: return "fail-closed";
    case v1::ENFORCEMENT_STATE_PENDING: return "pending";
    case v1::ENFORCEMENT_STATE_HELD: return "held";
    case v1::ENFORCEMENT_STATE_WAIVED: return "waived";
    case v1::ENFORCEMENT_STATE_NOT_ENABLED: return "not-enabled";
    case v1::ENFORCEMENT_STATE_OFF: return "off";
    case v1::ENFORCEMENT_STATE_OBSERVED: return "observed";
    default: return "unknown";
  }
}

std::string RolloutStateName(v1::Rollout::State state) {
  switch (state) {
    case v1::Rollout::STATE_RUNNING: return "running";
    case v1::Rollout::STATE_PAUSED: return "paused";
    case v1::Rollout::STATE_HALTED: return "halted";
    case v1::Rollout::STATE_ABORTED: return "aborted";
    case v1::Rollout::STATE_DONE: return "done";
    default: return "unknown";
  }
}

std::string NewHostsName(v1::NewHosts new_hosts) {
  return new_hosts == v1::NEW_HOSTS_WAIT_FOR_ROLLOUT ? "wait-for-rollout" : "enforce";
}

absl::StatusOr<v1::NewHosts> ParseNewHosts(absl::string_view field, absl::string_view name) {
  if (name == "enforce") return v1::NEW_HOSTS_ENFORCE;
  if (name == "wait-for-rollout") return v1::NEW_HOSTS_WAIT_FOR_ROLLOUT;
  return absl::InvalidArgumentError(absl::StrCat(
      field, " '", name, "' must be enforce (the default) or wait-for-rollout"));
}

}  // namespace cosched
