#include "server/state/host_enablement.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cosched::server {
namespace {

bool IsVulnerabilityFileName(absl::string_view name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
           return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_';
         });
}

}  // namespace

absl::StatusOr<EnforcePolicy> ParseEnforcePolicy(absl::string_view enforce,
                                                 const std::vector<std::string>& when_vulnerable) {
  EnforcePolicy policy;
  if (enforce == "when-vulnerable") {
    policy.when_vulnerable = true;
  } else if (!enforce.empty() && enforce != "always") {
    return absl::InvalidArgumentError(absl::StrCat(
        "enforce '", enforce, "' must be always (the default) or when-vulnerable"));
  }
  if (!policy.when_vulnerable) {
    if (!when_vulnerable.empty()) {
      return absl::InvalidArgumentError(
          "when_vulnerable is read only with enforce: when-vulnerable (every host sets "
          "cookies under always): remove it or set enforce");
    }
    return policy;
  }
  if (when_vulnerable.empty()) {
    return absl::InvalidArgumentError(
        "enforce: when-vulnerable needs when_vulnerable, the files of "
        "/sys/devices/system/cpu/vulnerabilities whose \"Not affected\" waives cookies on a "
        "host (for example [l1tf, mds, tsx_async_abort, mmio_stale_data]); no list is "
        "assumed, since no file covers the timing channels siblings share");
  }
  if (when_vulnerable.size() > static_cast<size_t>(kMaxWhenVulnerableFiles)) {
    return absl::InvalidArgumentError(absl::StrCat("when_vulnerable must have at most ",
                                                   kMaxWhenVulnerableFiles, " entries"));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < when_vulnerable.size(); ++i) {
    const std::string& name = when_vulnerable[i];
    if (!IsVulnerabilityFileName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "when_vulnerable[", i, "] '", name,
          "' must be a file name of /sys/devices/system/cpu/vulnerabilities (lowercase "
          "letters, digits and _, such as l1tf)"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("when_vulnerable[", i, "] '", name, "' is listed twice"));
    }
  }
  policy.files.assign(seen.begin(), seen.end());
  return policy;
}

v1::HostEnablement EnablementOf(const v1::HostPreflight& preflight, const EnforcePolicy& policy,
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
  if (!policy.when_vulnerable || policy.files.empty()) return out;
  for (const std::string& file : policy.files) {
    const auto reported = std::find_if(
        preflight.vulnerabilities().begin(), preflight.vulnerabilities().end(),
        [&file](const v1::CpuVulnerability& v) { return v.name() == file; });
    // Not said, or affected: cookies.
    if (reported == preflight.vulnerabilities().end() || reported->affected()) return out;
  }
  out.set_state(v1::HostEnablement::STATE_WAIVED);
  out.set_reason(absl::StrCat(
      "enforce: when-vulnerable waives cookies on this host: its CPUs report not affected by ",
      absl::StrJoin(policy.files, ", "),
      " (csd.yaml when_vulnerable). Siblings still share execution ports, caches and "
      "scheduler queues, whose timing channels no vulnerability file reports and cookies "
      "would close"));
  return out;
}

}  // namespace cosched::server
