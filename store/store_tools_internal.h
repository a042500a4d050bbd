// Internal to cosched_store: what `csd store restore` (store_tools.cc)
// and `csd store migrate` (store_migration.cc) share: the SQLite file of a
// data dir and the steps of filling an empty etcd prefix.
#ifndef COSCHED_STORE_STORE_TOOLS_INTERNAL_H_
#define COSCHED_STORE_STORE_TOOLS_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/store/etcd_records.pb.h"
#include "etcd/client.h"
#include "store/sqlite_db.h"
#include "store/store_tools.h"

namespace cosched::store::internal {

// The database file of a SQLite data dir.
std::string DbPath(const std::string& dir);
// The database at `path`; NOT_FOUND naming it when there is none.
absl::StatusOr<std::unique_ptr<SqliteDb>> OpenExisting(const std::string& path, bool read_only);

// "<prefix>/<key>".
std::string Under(const std::string& prefix, absl::string_view key);

// An etcd prefix being filled.
struct EtcdTarget {
  std::unique_ptr<etcd::Client> client;
  std::string prefix;
};
absl::StatusOr<EtcdTarget> ConnectEtcd(const StoreLocation& at);
// Makes sure nothing is under the prefix (deleting it with `replace`), then
// writes the marker that csd refuses to start on until the last Txn.
absl::Status ClaimEmptyPrefix(EtcdTarget& target, bool replace);
// `status` of a failure after the marker was written, saying the target is
// half-written and the way out.
absl::Status HalfWritten(const EtcdTarget& target, const absl::Status& status);
// The last Txn of a restore or migration: `meta` with a fresh commit id and
// changes_horizon at least `floor` and above this Txn's own revision, and
// the marker's deletion. Returns the revision of the Txn and the horizon.
absl::StatusOr<std::pair<int64_t, int64_t>> FinishEtcd(EtcdTarget& target, EtcdMeta meta,
                                                       int64_t floor);

}  // namespace cosched::store::internal

#endif  // COSCHED_STORE_STORE_TOOLS_INTERNAL_H_
