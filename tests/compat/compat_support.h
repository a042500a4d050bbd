// What make_compat_fixtures and compat_test share: a csd of their own on a
// store of the fixture's kind.
#ifndef COSCHED_TESTS_COMPAT_COMPAT_SUPPORT_H_
#define COSCHED_TESTS_COMPAT_COMPAT_SUPPORT_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/daemon/csd_server.h"
#include "store/etcd_store.h"

namespace cosched::compat {

// csd on loopback, trusting its plaintext callers, on SQLite in
// `sqlite_dir` or on `etcd` under its prefix.
absl::StatusOr<std::unique_ptr<server::CsdServer>> StartCsd(
    const std::string& sqlite_dir, const std::optional<store::EtcdStoreOptions>& etcd);

}  // namespace cosched::compat

#endif  // COSCHED_TESTS_COMPAT_COMPAT_SUPPORT_H_
