// The SQLite store's schema and its migrations, the preparation of its data
// dir, the integrity check and the writer connection's settings.
#include "store/sqlite_schema.h"

#include <glog/logging.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace cosched::store {
namespace {

// Entry i brings the schema from version i to i + 1. Never edit an entry
// that has shipped: append a new one. All pending entries run in one
// transaction at open, so a crash mid-upgrade leaves the old schema intact.
//
// Records are whole serialized protos; the other columns only exist to
// filter and order without parsing them.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE vms (
  vm_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  host_id TEXT NOT NULL,
  trust_group TEXT NOT NULL,
  record BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX vms_by_tenant ON vms (tenant_id, vm_id);
CREATE INDEX vms_by_host ON vms (host_id, vm_id);
CREATE INDEX vms_by_trust_group ON vms (trust_group, vm_id);

CREATE TABLE tenant_policies (
  tenant_id TEXT PRIMARY KEY,
  record BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE hosts (
  host_id TEXT PRIMARY KEY,
  record BLOB NOT NULL
) WITHOUT ROWID;

-- seq orders reports across hosts, so that after a migration the host that
-- reported a VM last wins.
CREATE TABLE observations (
  key TEXT NOT NULL,
  host_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  enforcement BLOB NOT NULL,
  PRIMARY KEY (key, host_id)
) WITHOUT ROWID;
CREATE INDEX observations_by_host ON observations (host_id);

CREATE TABLE changes (
  revision INTEGER NOT NULL,
  host_id TEXT NOT NULL,
  vm_id TEXT NOT NULL,
  PRIMARY KEY (revision, host_id, vm_id)
) WITHOUT ROWID;
CREATE INDEX changes_by_host ON changes (host_id, revision);

-- compacted_revision: the highest revision whose changes were deleted.
INSERT OR IGNORE INTO meta (key, value) VALUES
  ('revision', 0), ('compacted_revision', 0), ('observation_seq', 0);
)sql",
    // Version 2: the audit trail. sequence is the rowid: increasing, never
    // reused, since pruning (SqliteStore) deletes the oldest rows and never
    // the newest.
    R"sql(
CREATE TABLE audit (
  sequence INTEGER PRIMARY KEY,
  time_unix_ns INTEGER NOT NULL,
  who TEXT NOT NULL,
  subject TEXT NOT NULL,
  record BLOB NOT NULL
);
CREATE INDEX audit_by_subject ON audit (subject, sequence);
CREATE INDEX audit_by_who ON audit (who, sequence);
)sql",
    // Version 3: no index by trust group. A trust group begins with its
    // tenant's id (Transaction::PutVm), so ListVms finds a group's VMs
    // through vms_by_tenant. With VMs of many tenants tagged at once, the
    // two indexes each dirtied a page per write of a batch: about a third
    // of a TagVM batch's pages, with the WAL writes the writer's costliest
    // work (tests/bench/csd_loadgen: TagVM +15%).
    R"sql(
DROP INDEX IF EXISTS vms_by_trust_group;
)sql",
    // Version 4: the hosts that report each VM (VM.presence), so that every
    // host a VM is on during a live migration finds it (ListVms
    // reported_on). Rows exist only for VMs some host reports.
    R"sql(
CREATE TABLE IF NOT EXISTS vm_presence (
  vm_id TEXT NOT NULL,
  host_id TEXT NOT NULL,
  PRIMARY KEY (vm_id, host_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS vm_presence_by_host ON vm_presence (host_id, vm_id);
-- Observations keep the whole VMObservation (run state and UUID with the
-- enforcement). They are what agents report every few seconds, so the old
-- rows are dropped rather than converted: the next Report refills them.
DROP TABLE observations;
CREATE TABLE observations (
  key TEXT NOT NULL,
  host_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  observation BLOB NOT NULL,
  PRIMARY KEY (key, host_id)
) WITHOUT ROWID;
CREATE INDEX observations_by_host ON observations (host_id);
)sql",
    // Version 5: the staged rollout of enforcement. One row (slot 0): csd
    // keeps only the current rollout; its history is in the audit trail.
    R"sql(
CREATE TABLE IF NOT EXISTS rollout (
  slot INTEGER PRIMARY KEY CHECK (slot = 0),
  record BLOB NOT NULL
);
)sql",
};

// Not cosched::ErrnoStatus (common/file_io.h): that one maps ENOENT/ENOTDIR
// to NOT_FOUND and EROFS to UNAVAILABLE, which would change what Open
// promises (UNAVAILABLE / PERMISSION_DENIED), and it words messages as
// "<step> <path>: <error>".
absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM || err == EROFS) {
    return absl::PermissionDeniedError(message);
  }
  return absl::UnavailableError(message);
}

}  // namespace

const int kLatestSchemaVersion =
    static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));

absl::Status PrepareDataDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::path parent = fs::path(dir).parent_path();
    if (!parent.empty()) {
      fs::create_directories(parent, ec);
      if (ec) {
        return ErrnoStatus(ec.value(),
                           absl::StrCat("cannot create store data dir ", dir));
      }
    }
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno,
                         absl::StrCat("cannot create store data dir ", dir));
    }
  }
  if (!fs::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("store data dir ", dir, " is not a directory"));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return ErrnoStatus(
        errno, absl::StrCat("store data dir ", dir, " is not writable"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ReadMeta(SqliteDb& db, absl::string_view key) {
  ASSIGN_OR_RETURN(
      SqliteQuery q,
      db.Query("SELECT value FROM meta WHERE key = ?1", "read store metadata"));
  q.BindText(1, key);
  ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? q.ColumnInt(0) : 0;
}

absl::Status CheckIntegrity(SqliteDb& db) {
  ASSIGN_OR_RETURN(SqliteQuery q,
                   db.Query("PRAGMA quick_check", "integrity check"));
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return absl::OkStatus();
  std::string verdict(q.ColumnText(0));
  if (verdict == "ok") return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "store at ", db.path(), " is corrupt (integrity check): ", verdict));
}

absl::Status ConfigureWriter(SqliteDb& db) {
  {
    ASSIGN_OR_RETURN(SqliteQuery q, db.Query("PRAGMA journal_mode = WAL",
                                             "enable WAL journal"));
    ASSIGN_OR_RETURN(bool row, q.Step());
    std::string mode = row ? std::string(q.ColumnText(0)) : "";
    if (mode != "wal") {
      return absl::UnavailableError(
          absl::StrCat("cannot put store at ", db.path(),
                       " in WAL mode (journal mode: ", mode, ")"));
    }
  }
  // FULL: with WAL, NORMAL may lose the last commits on power loss, and a
  // done(OK) promises durability.
  return db.Exec("PRAGMA synchronous = FULL", "set synchronous mode");
}

absl::Status Migrate(SqliteDb& db) {
  RETURN_IF_ERROR(db.Exec("BEGIN IMMEDIATE", "begin schema migration"));
  absl::Status status = [&]() -> absl::Status {
    RETURN_IF_ERROR(
        db.Exec("CREATE TABLE IF NOT EXISTS meta ("
                "key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
                "create store metadata"));
    ASSIGN_OR_RETURN(int64_t version, ReadMeta(db, "schema_version"));
    if (version > kLatestSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "store at ", db.path(), " has schema version ", version,
          " but this program knows versions up to ", kLatestSchemaVersion,
          ": it was written by a newer release; upgrade before using it"));
    }
    for (int64_t v = version; v < kLatestSchemaVersion; ++v) {
      RETURN_IF_ERROR(
          db.Exec(kMigrations[v],
                  absl::StrCat("migrate store schema to version ", v + 1)));
    }
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db.Query("INSERT OR REPLACE INTO meta (key, value) "
                              "VALUES ('schema_version', ?1)",
                              "write store schema version"));
    q.BindInt(1, kLatestSchemaVersion);
    return q.Run();
  }();
  if (status.ok()) status = db.Exec("COMMIT", "commit schema migration");
  if (!status.ok() && db.InTransaction()) {
    absl::Status undone = db.Exec("ROLLBACK", "roll back schema migration");
    LOG_IF(WARNING, !undone.ok()) << undone;
  }
  return status;
}

}  // namespace cosched::store
