// What the compatibility fixtures of a release hold (tests/compat/README.md):
// make_compat_fixtures writes them, compat_test reads them back with the
// current code and expects exactly this.
#ifndef COSCHED_TESTS_COMPAT_FIXTURE_CONTENTS_H_
#define COSCHED_TESTS_COMPAT_FIXTURE_CONTENTS_H_

#include <array>
#include <string>

#include "cosched/v1/types.pb.h"

namespace cosched::compat {

struct FixtureVm {
  const char* vm_id;
  const char* tenant_id;
  v1::IsolationLevel isolation;
};

// Tagged through csd, in this order.
inline constexpr std::array<FixtureVm, 3> kFixtureVms = {{
    {"vm-1", "acme", v1::ISOLATION_LEVEL_VM},
    {"vm-2", "acme", v1::ISOLATION_LEVEL_TENANT},
    {"vm-3", "globex", v1::ISOLATION_LEVEL_VM},
}};
// The trust group the agent's state holds for a VM of the fixture.
inline std::string FixtureTrustGroup(const FixtureVm& vm) {
  return vm.isolation == v1::ISOLATION_LEVEL_TENANT ? std::string(vm.tenant_id) + "/tenant"
                                                    : std::string(vm.tenant_id) + "/vm/" + vm.vm_id;
}

// Registered, with this label.
inline constexpr char kFixtureHost[] = "hv-1";
inline constexpr char kFixtureHostZone[] = "a";
// Given an explicit policy: default level tenant, tenant and vm allowed.
inline constexpr char kFixtureTenant[] = "acme";

// The files, under tests/compat/fixtures/<release>/.
inline constexpr char kSqliteDir[] = "csd-sqlite";        // csd's data_dir
inline constexpr char kEtcdBackup[] = "etcd-backup.pb";   // csd store backup of etcd
inline constexpr char kAgentStateDir[] = "agent-state";   // cs-agent's state_dir
inline constexpr char kProtoDescriptors[] = "cosched.protoset";
// The agent's state holds vm-1 and vm-2 at this revision, and csd's answer
// that the host's cookies are waived.
inline constexpr int64_t kAgentStateRevision = 7;

}  // namespace cosched::compat

#endif  // COSCHED_TESTS_COMPAT_FIXTURE_CONTENTS_H_
