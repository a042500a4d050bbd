// Internal to cosched_store: the SQLite store's on-disk layout. The schema
// and its migrations, the preparation of the data dir, the integrity check
// and the writer connection's settings, run by SqliteStore::Open, and the
// metadata read that the transactions share.
#ifndef COSCHED_STORE_SQLITE_SCHEMA_H_
#define COSCHED_STORE_SQLITE_SCHEMA_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "store/sqlite_db.h"

namespace cosched::store {

// The schema version this code writes: the number of migrations.
extern const int kLatestSchemaVersion;

// Creates the data dir with mode 0700 (its parents with the default mode)
// and checks that the store can create its files there.
absl::Status PrepareDataDir(const std::string& dir);

// The value of `key` in the meta table, 0 when it has none.
absl::StatusOr<int64_t> ReadMeta(SqliteDb& db, absl::string_view key);

// Refuses a file that SQLite cannot read as a sound database, rather than
// risk starting over on an empty store.
absl::Status CheckIntegrity(SqliteDb& db);

// Puts the writer connection in WAL mode with full fsyncs.
absl::Status ConfigureWriter(SqliteDb& db);

// Brings the schema up to kLatestSchemaVersion in one transaction; refuses a
// schema newer than this code.
absl::Status Migrate(SqliteDb& db);

}  // namespace cosched::store

#endif  // COSCHED_STORE_SQLITE_SCHEMA_H_
