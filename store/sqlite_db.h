// RAII over the SQLite C API: one connection with its cached prepared
// statements, and the conversion of SQLite errors to absl::Status.
#ifndef COSCHED_STORE_SQLITE_DB_H_
#define COSCHED_STORE_SQLITE_DB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;
struct sqlite3_stmt;

namespace cosched::store {

// The status of SQLite result code `rc` from operation `op` on the database
// at `path`. Corruption is DATA_LOSS, a full disk RESOURCE_EXHAUSTED, a
// misuse of SQL (a bug) INTERNAL, and anything else (I/O, locking,
// permissions) UNAVAILABLE. `message` is SQLite's own explanation.
absl::Status SqliteStatus(int rc, absl::string_view message,
                          absl::string_view op, absl::string_view path);

class SqliteDb;

// One use of a cached prepared statement. Bind errors are kept and returned
// by the next Step, so call sites stay short. Resets the statement and drops
// its bindings when destroyed, which is why bound strings only need to
// outlive the Query. Not thread-safe.
class SqliteQuery {
 public:
  SqliteQuery(SqliteDb* db, sqlite3_stmt* stmt, absl::string_view op);
  SqliteQuery(SqliteQuery&& other) noexcept;
  SqliteQuery(const SqliteQuery&) = delete;
  SqliteQuery& operator=(const SqliteQuery&) = delete;
  SqliteQuery& operator=(SqliteQuery&&) = delete;
  ~SqliteQuery();

  // Parameters are 1-based, as in SQLite.
  void BindText(int index, absl::string_view text);
  void BindBlob(int index, absl::string_view blob);
  void BindInt(int index, int64_t value);

  // True when a row is available, false when the statement is done.
  absl::StatusOr<bool> Step();
  // Steps until done, for statements that return no rows.
  absl::Status Run();

  // Columns are 0-based, valid until the next Step. NULL reads as empty/0.
  int64_t ColumnInt(int index) const;
  absl::string_view ColumnText(int index) const;
  absl::string_view ColumnBlob(int index) const;

 private:
  SqliteDb* db_;
  sqlite3_stmt* stmt_;
  std::string op_;
  int bind_error_ = 0;  // SQLite code of the first failed bind
};

// One SQLite connection. Statements prepared through Query are cached for
// the life of the connection. Not thread-safe: use from one thread at a time.
class SqliteDb {
 public:
  // Opens (and with `create`, creates) the database file at `path`, with a
  // busy timeout. Errors: UNAVAILABLE when the file cannot be opened.
  static absl::StatusOr<std::unique_ptr<SqliteDb>> Open(const std::string& path,
                                                        bool read_only,
                                                        bool create);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // Runs one or more SQL statements that return nothing of interest.
  absl::Status Exec(absl::string_view sql, absl::string_view op);
  // Runs one statement that returns nothing of interest, prepared once: for
  // the BEGIN / SAVEPOINT / COMMIT of every transaction.
  absl::Status Run(absl::string_view sql, absl::string_view op);
  // The cached statement for `sql`, ready to bind. `op` names the operation
  // in errors.
  absl::StatusOr<SqliteQuery> Query(absl::string_view sql,
                                    absl::string_view op);

  // The status for result code `rc` of `op`, with the connection's message.
  absl::Status Error(int rc, absl::string_view op) const;

  // Rows changed by the last INSERT/UPDATE/DELETE.
  int64_t Changes() const;
  // False when SQLite is in autocommit mode: no transaction is open (also
  // after SQLite rolled one back by itself on I/O errors or a full disk).
  bool InTransaction() const;
  bool ReadOnly() const;
  const std::string& path() const { return path_; }
  // For SQLite calls this class does not wrap (the online backup API).
  sqlite3* handle() const { return db_; }

 private:
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
  struct StmtDeleter {
    void operator()(sqlite3_stmt* stmt) const;
  };
  std::unordered_map<std::string, std::unique_ptr<sqlite3_stmt, StmtDeleter>>
      statements_;
};

}  // namespace cosched::store

#endif  // COSCHED_STORE_SQLITE_DB_H_
