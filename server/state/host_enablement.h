// Whether a host's agent sets cookies at all (HostEnablement), as csd
// decides it from its `enforce` setting and the host's preflight. The
// agent learns it from every Register and Report answer; Place and `csctl
// hosts` read the same function, so they never disagree.
#ifndef COSCHED_SERVER_STATE_HOST_ENABLEMENT_H_
#define COSCHED_SERVER_STATE_HOST_ENABLEMENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/types.pb.h"
#include "server/state/rollout_view.h"

namespace cosched::server {

// csd.yaml `enforce` and `when_vulnerable`.
struct EnforcePolicy {
  // `enforce: when-vulnerable`; false: every host sets cookies (`always`,
  // the default).
  bool when_vulnerable = false;
  // The files of /sys/devices/system/cpu/vulnerabilities whose "Not
  // affected" together waive cookies on a host (the operator's list,
  // required with when-vulnerable; never a default: which channels matter
  // is the operator's judgement, not csd's).
  std::vector<std::string> files;
};

// `enforce` ("always" or empty, "when-vulnerable") and `when_vulnerable`
// (required with when-vulnerable, refused without it; each a file name of
// lowercase letters, digits and '_', at most kMaxWhenVulnerableFiles, no
// repeats). INVALID_ARGUMENT naming the field and the rule.
inline constexpr int kMaxWhenVulnerableFiles = 32;
absl::StatusOr<EnforcePolicy> ParseEnforcePolicy(absl::string_view enforce,
                                                 const std::vector<std::string>& when_vulnerable);

// OFF, before anything, when an operator's off switch holds for the host
// (`rollout.off`). WAIVED only under when-vulnerable, for a host whose
// preflight lists every file of the operator's list and none of them as
// affected; a host that lacks one (an older kernel, no vulnerabilities
// directory) is enforced: not knowing is not safe. Its reason names the
// files and the channels cookies would still close that no file reports
// (docs/agent.md, "Waiving cookies by vulnerability"). Otherwise
// NOT_ENABLED when a staged rollout has not enabled the host (`rollout`,
// RolloutView::VerdictFor): a waived host says so whatever the rollout,
// since that is what Place and operators need to know of it.
v1::HostEnablement EnablementOf(const v1::HostPreflight& preflight, const EnforcePolicy& policy,
                                const RolloutVerdict& rollout = {});

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_HOST_ENABLEMENT_H_
