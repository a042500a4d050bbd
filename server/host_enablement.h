// Whether a host's agent sets cookies at all (HostEnablement), as csd
// decides it from its `enforce` setting and the host's preflight. The
// agent learns it from every Register and Report answer; Place and
// `csctl hosts` read the same function, so they never disagree.
#ifndef COSCHED_SERVER_HOST_ENABLEMENT_H_
#define COSCHED_SERVER_HOST_ENABLEMENT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/types.pb.h"
#include "server/rollout_view.h"

namespace cosched::server {

// csd.yaml `enforce`.
enum class EnforceMode {
  // Every host sets cookies (the default).
  kAlways,
  // Only hosts whose CPUs an SMT-relevant issue affects.
  kWhenVulnerable,
};

// "always" (or empty) and "when-vulnerable"; INVALID_ARGUMENT naming
// `field` otherwise.
absl::StatusOr<EnforceMode> ParseEnforceMode(absl::string_view field, absl::string_view value);

// NOT_NEEDED only under kWhenVulnerable, for a host that says both l1tf and
// mds (the two files ChromeOS decides on) and reports no SMT-relevant issue
// as affected. A host that cannot say (no vulnerabilities directory, an
// older kernel without those files) is enforced: not knowing is not safe.
// OFF, before anything, when an operator's off switch holds for the host
// (`rollout.off`). Otherwise NOT_ENABLED when a staged rollout has not enabled the host
// (`rollout`, RolloutView::VerdictFor): a host that needs no cookies says
// so whatever the rollout, since that is what Place and operators need to
// know of it.
v1::HostEnablement EnablementOf(const v1::HostPreflight& preflight, EnforceMode mode,
                                const RolloutVerdict& rollout = {});

}  // namespace cosched::server

#endif  // COSCHED_SERVER_HOST_ENABLEMENT_H_
