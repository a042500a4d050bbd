#include "server/host_enablement.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cosched::server {

absl::StatusOr<EnforceMode> ParseEnforceMode(absl::string_view field, absl::string_view value) {
  if (value.empty() || value == "always") return EnforceMode::kAlways;
  if (value == "when-vulnerable") return EnforceMode::kWhenVulnerable;
  return absl::InvalidArgumentError(
      absl::StrCat(field, " '", value, "' must be always (the default) or when-vulnerable"));
}

v1::HostEnablement EnablementOf(const v1::HostPreflight& preflight, EnforceMode mode,
                                const RolloutVerdict& rollout) {
  v1::HostEnablement out;
  // The operator's off switch overrides everything: the agent must clear.
  if (rollout.off) {
    out.set_state(v1::HostEnablement::STATE_OFF);
    out.set_reason(rollout.off_reason);
    return out;
  }
  out.set_state(v1::HostEnablement::STATE_ENFORCE);
  if (!rollout.enabled) {
    out.set_state(v1::HostEnablement::STATE_NOT_ENABLED);
    out.set_reason(rollout.reason);
  }
  if (mode != EnforceMode::kWhenVulnerable) return out;
  std::set<std::string> seen;
  std::vector<std::string> clear;
  for (const v1::CpuVulnerability& v : preflight.vulnerabilities()) {
    if (!v.smt_relevant()) continue;
    if (v.affected()) return out;
    seen.insert(v.name());
    clear.push_back(v.name());
  }
  if (seen.count("l1tf") == 0 || seen.count("mds") == 0) return out;
  out.set_state(v1::HostEnablement::STATE_NOT_NEEDED);
  out.set_reason(absl::StrCat("enforce: when-vulnerable, and the CPUs are not affected by ",
                              absl::StrJoin(clear, ", "),
                              ": siblings leak nothing that cookies would stop"));
  return out;
}

}  // namespace cosched::server
