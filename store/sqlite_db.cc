#include "store/sqlite_db.h"

#include <sqlite3.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace cosched::store {
namespace {

// Long enough to ride out a checkpoint or a reader holding the lock briefly;
// only this process should be using the file.
constexpr int kBusyTimeoutMs = 5000;

// sqlite3_bind_* treat a null pointer as SQL NULL, and an empty
// absl::string_view may carry one.
const char* NonNull(absl::string_view s) { return s.data() ? s.data() : ""; }

}  // namespace

absl::Status SqliteStatus(int rc, absl::string_view message,
                          absl::string_view op, absl::string_view path) {
  switch (rc & 0xff) {
    case SQLITE_OK:
      return absl::OkStatus();
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(
          absl::StrCat("store at ", path, " is corrupt (", op, "): ", message));
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(
          absl::StrCat("store disk full: ", op, " on ", path, ": ", message));
    case SQLITE_ERROR:
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_TOOBIG:
      return absl::InternalError(
          absl::StrCat(op, " failed on store ", path, ": ", message));
    default:
      return absl::UnavailableError(
          absl::StrCat(op, " failed on store ", path, ": ", message));
  }
}

SqliteQuery::SqliteQuery(SqliteDb* db, sqlite3_stmt* stmt, absl::string_view op)
    : db_(db), stmt_(stmt), op_(op) {}

SqliteQuery::SqliteQuery(SqliteQuery&& other) noexcept
    : db_(other.db_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      op_(std::move(other.op_)),
      bind_error_(other.bind_error_) {}

SqliteQuery::~SqliteQuery() {
  if (stmt_ == nullptr) return;
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

void SqliteQuery::BindText(int index, absl::string_view text) {
  int rc = sqlite3_bind_text(stmt_, index, NonNull(text),
                             static_cast<int>(text.size()), SQLITE_STATIC);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
}

void SqliteQuery::BindBlob(int index, absl::string_view blob) {
  int rc = sqlite3_bind_blob(stmt_, index, NonNull(blob),
                             static_cast<int>(blob.size()), SQLITE_STATIC);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
}

void SqliteQuery::BindInt(int index, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
}

absl::StatusOr<bool> SqliteQuery::Step() {
  if (bind_error_ != 0) return db_->Error(bind_error_, op_);
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(rc, op_);
}

absl::Status SqliteQuery::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

int64_t SqliteQuery::ColumnInt(int index) const {
  return sqlite3_column_int64(stmt_, index);
}

absl::string_view SqliteQuery::ColumnText(int index) const {
  const unsigned char* text = sqlite3_column_text(stmt_, index);
  if (text == nullptr) return {};
  return absl::string_view(
      reinterpret_cast<const char*>(text),
      static_cast<size_t>(sqlite3_column_bytes(stmt_, index)));
}

absl::string_view SqliteQuery::ColumnBlob(int index) const {
  const void* blob = sqlite3_column_blob(stmt_, index);
  if (blob == nullptr) return {};
  return absl::string_view(
      static_cast<const char*>(blob),
      static_cast<size_t>(sqlite3_column_bytes(stmt_, index)));
}

void SqliteDb::StmtDeleter::operator()(sqlite3_stmt* stmt) const {
  sqlite3_finalize(stmt);
}

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(
    const std::string& path, bool read_only, bool create) {
  // NOMUTEX: each connection is confined to one thread at a time by its
  // owner, so SQLite's per-connection mutex would be pure overhead.
  int flags = SQLITE_OPEN_NOMUTEX |
              (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) |
              (create && !read_only ? SQLITE_OPEN_CREATE : 0);
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    sqlite3_close_v2(raw);
    return SqliteStatus(rc, message, "open", path);
  }
  std::unique_ptr<SqliteDb> db(new SqliteDb(raw, path));
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, kBusyTimeoutMs);
  return db;
}

SqliteDb::~SqliteDb() {
  statements_.clear();  // statements must be finalized before the close
  sqlite3_close_v2(db_);
}

absl::Status SqliteDb::Exec(absl::string_view sql, absl::string_view op) {
  std::string text(sql);  // sqlite3_exec wants a NUL-terminated string
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? absl::OkStatus() : Error(rc, op);
}

absl::Status SqliteDb::Run(absl::string_view sql, absl::string_view op) {
  absl::StatusOr<SqliteQuery> query = Query(sql, op);
  if (!query.ok()) return query.status();
  return query->Run();
}

absl::StatusOr<SqliteQuery> SqliteDb::Query(absl::string_view sql,
                                            absl::string_view op) {
  std::string key(sql);
  auto it = statements_.find(key);
  if (it == statements_.end()) {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v3(db_, key.data(), static_cast<int>(key.size()),
                                SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt);
      return Error(rc, absl::StrCat(op, " (prepare)"));
    }
    it = statements_.emplace(std::move(key), stmt).first;
  }
  return SqliteQuery(this, it->second.get(), op);
}

absl::Status SqliteDb::Error(int rc, absl::string_view op) const {
  // The connection's message belongs to its last failing call, which is the
  // one being reported only when the codes agree.
  absl::string_view message = (sqlite3_extended_errcode(db_) == rc)
                                  ? sqlite3_errmsg(db_)
                                  : sqlite3_errstr(rc);
  return SqliteStatus(rc, message, op, path_);
}

int64_t SqliteDb::Changes() const { return sqlite3_changes64(db_); }

bool SqliteDb::InTransaction() const {
  return sqlite3_get_autocommit(db_) == 0;
}

bool SqliteDb::ReadOnly() const {
  return sqlite3_db_readonly(db_, "main") == 1;
}

}  // namespace cosched::store
