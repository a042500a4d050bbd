// Operators' tools over csd's store (`csd store backup|restore|migrate`):
// a consistent backup of either backend, its restore into an empty store,
// and the copy of a SQLite store into etcd. The CLI is server/csd_main_store.cc.
#ifndef COSCHED_STORE_STORE_TOOLS_H_
#define COSCHED_STORE_STORE_TOOLS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "store/etcd_store.h"

namespace cosched::store {

// Which store a tool reads or writes.
struct StoreLocation {
  enum class Kind { kSqlite, kEtcd };
  Kind kind = Kind::kSqlite;
  // kSqlite: the data dir (cosched.db in it).
  std::string sqlite_dir;
  // kEtcd: the members, TLS and prefix, as csd.yaml's store.etcd gives them.
  EtcdStoreOptions etcd;

  // "sqlite:/var/lib/cosched", "etcd:127.0.0.1:2379/cosched".
  std::string Describe() const;
};

// Parses a location given on the command line:
//   sqlite:DIR                               an absolute or relative dir
//   etcd:HOST:PORT[,HOST:PORT...]/PREFIX     plaintext, loopback only
// INVALID_ARGUMENT naming `arg` (the flag) and the rule broken. TLS to etcd
// is only configured by a config file (its store.etcd).
absl::StatusOr<StoreLocation> ParseStoreLocation(absl::string_view arg,
                                                 absl::string_view spec);

// What a tool did, for the operator.
struct ToolReport {
  // The store's revision the copy was taken at (backup), or the revision
  // of the target's last write (restore, migrate).
  int64_t revision = 0;
  // Records or keys copied.
  int64_t items = 0;
  // Agents' resume revisions below this get a snapshot from the target.
  int64_t resume_horizon = 0;
};

// Writes a consistent copy of `from` to `file` (replaced atomically: written
// to "<file>.tmp", synced, renamed). SQLite: an SQLite database file made by
// SQLite's online backup API while csd may be writing. etcd: the keys under
// the prefix read at one revision, in the format of
// proto/cosched/store/store_backup.proto. Errors: the store's (UNAVAILABLE
// naming etcd, DATA_LOSS for a corrupt SQLite file), or the file's
// (PERMISSION_DENIED / UNAVAILABLE naming it).
absl::StatusOr<ToolReport> BackupStore(const StoreLocation& from, const std::string& file);

struct RestoreOptions {
  // Delete whatever the target holds first (else a non-empty target is
  // FAILED_PRECONDITION).
  bool replace = false;
  // The highest revision the store backed up is known to have reached
  // after the backup (0: unknown). etcd only: an agent may hold such a
  // revision, and it must get a snapshot, not a delta of the new history.
  int64_t resume_floor = 0;
};

// Restores the backup `file` into `to`, which must be of the backup's kind.
// All or nothing: SQLite: the file is checked, copied next to the target and
// renamed into place. etcd: the marker key is written first, then the keys
// in Txns within etcd's limits, then meta and the marker's deletion in one
// last Txn; a restore that fails half-way leaves the marker, which csd
// refuses to start on and a re-run with `replace` clears.
//
// Agents' resume revisions from before the restore get a snapshot: SQLite's
// revision jumps by kRestoreRevisionGap (past any revision the lost store
// could have reached) and the change log starts after it; etcd's
// changes_horizon is set above the last write of the restore, the backup's
// revision and options.resume_floor.
//
// Errors: DATA_LOSS naming the file when it is truncated, corrupt or not a
// backup; FAILED_PRECONDITION for a non-empty target, a backup of the other
// kind or a newer layout; the store's errors.
absl::StatusOr<ToolReport> RestoreStore(const std::string& file, const StoreLocation& to,
                                        const RestoreOptions& options);

// A restored SQLite store's revision is the backup's plus this.
inline constexpr int64_t kRestoreRevisionGap = int64_t{1} << 32;

struct MigrateOptions {
  // Delete whatever the etcd prefix holds first (else FAILED_PRECONDITION).
  bool replace = false;
};

// Copies the SQLite store `from` into the etcd store `to` through the
// Store interface, in one read snapshot of the source: VMs, tenant
// policies, hosts, every host's report (oldest report first, so the newest
// observation of a VM still wins), the change log (in revision order, so
// later changes keep later revisions) and the audit trail (oldest first:
// order and content kept; sequences are etcd's, renumbered from 1).
// Guarded by the marker key as a restore; the last Txn sets changes_horizon
// above both stores' revisions, so agents resuming with a SQLite revision
// get a snapshot. Errors as RestoreStore's; INVALID_ARGUMENT unless `from`
// is SQLite and `to` etcd.
absl::StatusOr<ToolReport> MigrateStore(const StoreLocation& from, const StoreLocation& to,
                                        const MigrateOptions& options);

}  // namespace cosched::store

#endif  // COSCHED_STORE_STORE_TOOLS_H_
