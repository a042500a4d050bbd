// Tests talk to their csd over plaintext loopback, as admin, and their
// agents act for their hosts without certificates. csd's defaults give such
// callers the viewer role and no host (issue #17: any local process could be
// one), so a test says it trusts them, explicitly.
#ifndef COSCHED_TESTS_TESTING_TRUSTED_PLAINTEXT_H_
#define COSCHED_TESTS_TESTING_TRUSTED_PLAINTEXT_H_

#include "server/api/authz.h"

namespace cosched::testing {

inline void TrustPlaintextCallers(server::AuthzOptions& authz) {
  authz.plaintext_role = "admin";
  authz.plaintext_agents = true;
}

// The same for a csd started from a config file.
inline constexpr char kTrustedPlaintextYaml[] =
    "plaintext_role: admin\nplaintext_agents: true\n";

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_TRUSTED_PLAINTEXT_H_
