// SqliteStore: opening the store, the writer thread that commits queued
// writes in batches, change-log compaction and pooled snapshot reads. The
// schema is in sqlite_schema.cc, the table reads and writes in
// sqlite_transaction.cc.
#include "store/sqlite_store.h"

#include <glog/logging.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "store/sqlite_db.h"
#include "store/sqlite_schema.h"
#include "store/sqlite_transaction.h"

namespace cosched::store {
namespace {

constexpr char kDbFileName[] = "cosched.db";
constexpr size_t kMaxIdleReaders = 8;
// How often a write batch looks for audit records past their retention.
constexpr std::chrono::minutes kAuditPruneInterval{10};

// What every write of a batch that could not be committed gets. Only a full
// disk is told apart: the caller can do nothing else but retry later.
absl::Status CommitFailure(const absl::Status& cause) {
  if (absl::IsResourceExhausted(cause)) return cause;
  return absl::UnavailableError(cause.message());
}

// Runs `fn` in a savepoint of the open batch transaction, undoing what it
// did when it fails; logs a failure as "<what> failed". The batch's own
// writes stay either way, unless SQLite dropped the whole transaction.
absl::Status InSavepoint(SqliteDb& db, absl::string_view what,
                         const std::function<absl::Status()>& fn) {
  RETURN_IF_ERROR(db.Exec("SAVEPOINT housekeeping", absl::StrCat("begin ", what)));
  absl::Status status = fn();
  if (status.ok()) {
    status = db.Exec("RELEASE housekeeping", absl::StrCat("end ", what));
  } else if (db.InTransaction()) {
    absl::Status undone = db.Exec("ROLLBACK TO housekeeping; RELEASE housekeeping",
                                  absl::StrCat("undo ", what));
    LOG_IF(ERROR, !undone.ok()) << undone;
  }
  LOG_IF(WARNING, !status.ok()) << what << " failed: " << status;
  return status;
}

}  // namespace

int SqliteStore::LatestSchemaVersion() { return kLatestSchemaVersion; }

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const SqliteStoreOptions& options) {
  if (options.data_dir.empty()) {
    return absl::InvalidArgumentError("store data_dir is empty");
  }
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store max_batch must be at least 1, got ", options.max_batch));
  }
  if (options.changelog_retention < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("store changelog_retention must be at least 1, got ",
                     options.changelog_retention));
  }
  if (options.audit_retention <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("store audit_retention must be positive, got ",
                     absl::FormatDuration(options.audit_retention)));
  }
  if (options.audit_window_records < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("store audit_window_records must not be negative, got ",
                     options.audit_window_records));
  }
  if (options.audit_prune_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("store audit_prune_rows must be at least 1, got ",
                     options.audit_prune_rows));
  }
  RETURN_IF_ERROR(PrepareDataDir(options.data_dir));
  std::string path =
      (std::filesystem::path(options.data_dir) / kDbFileName).string();

  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db,
                   SqliteDb::Open(path, /*read_only=*/false, /*create=*/true));
  if (db->ReadOnly()) {
    return absl::PermissionDeniedError(
        absl::StrCat("store at ", path, " is read-only: cannot write to it"));
  }
  RETURN_IF_ERROR(CheckIntegrity(*db));
  RETURN_IF_ERROR(ConfigureWriter(*db));
  RETURN_IF_ERROR(Migrate(*db));
  ASSIGN_OR_RETURN(int64_t revision, ReadMeta(*db, "revision"));
  int64_t change_rows = 0;
  {
    ASSIGN_OR_RETURN(SqliteQuery q, db->Query("SELECT COUNT(*) FROM changes",
                                              "count changes"));
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (row) change_rows = q.ColumnInt(0);
  }

  std::unique_ptr<SqliteStore> store(
      new SqliteStore(options, path, std::move(db)));
  store->committed_revision_.store(revision);
  store->allocated_revision_ = revision;
  store->change_rows_ = change_rows;
  store->writer_ = std::make_unique<GroupCommitWriter>(
      options.max_batch, absl::StrCat("store at ", path, " is closing"),
      [s = store.get()](std::vector<PendingWrite>& batch) { return s->RunBatch(batch); });
  return store;
}

SqliteStore::SqliteStore(SqliteStoreOptions options, std::string db_path,
                         std::unique_ptr<SqliteDb> writer)
    : options_(std::move(options)),
      db_path_(std::move(db_path)),
      writer_db_(std::move(writer)) {}

SqliteStore::~SqliteStore() {
  if (writer_ != nullptr) writer_->Stop();
}

void SqliteStore::Write(TxnFn fn, DoneFn done) { writer_->Submit(std::move(fn), std::move(done)); }

void SqliteStore::SetCommitObserver(CommitObserver observer) {
  writer_->SetCommitObserver(std::move(observer));
}

int64_t SqliteStore::CurrentRevision() const {
  return committed_revision_.load(std::memory_order_acquire);
}

BatchOutcome SqliteStore::RunBatch(std::vector<PendingWrite>& batch) {
  SqliteDb& db = *writer_db_;
  BatchOutcome outcome;
  std::vector<absl::Status>& results = outcome.results;
  std::set<std::string>& changed_hosts = outcome.changed_hosts;
  results.assign(batch.size(), absl::OkStatus());
  const int64_t change_rows_before = change_rows_;
  int64_t audit_rows = 0;
  absl::Status batch_error =
      db.Run("BEGIN IMMEDIATE", "begin write transaction");
  for (size_t i = 0; i < batch.size() && batch_error.ok(); ++i) {
    batch_error = db.Run("SAVEPOINT write_fn", "begin write");
    if (!batch_error.ok()) break;
    const int64_t allocated_before = allocated_revision_;
    WriteState state(&allocated_revision_);
    SqliteTransaction txn(db, &state);
    absl::Status status = batch[i].fn(txn);
    if (!db.InTransaction()) {
      // SQLite rolls the whole transaction back by itself on some errors
      // (full disk, I/O): the writes before this one are lost too.
      batch_error = status.ok() ? absl::UnavailableError(absl::StrCat(
                                      "write transaction on store ", db_path_,
                                      " was rolled back by SQLite"))
                                : status;
      break;
    }
    if (status.ok()) {
      batch_error = db.Run("RELEASE write_fn", "end write");
      changed_hosts.insert(state.changed_hosts.begin(),
                           state.changed_hosts.end());
      change_rows_ += state.change_rows;
      audit_rows += state.audit_rows;
    } else {
      allocated_revision_ = allocated_before;
      batch_error = db.Exec("ROLLBACK TO write_fn; RELEASE write_fn",
                            "undo failed write");
    }
    results[i] = std::move(status);
  }
  if (batch_error.ok()) {
    absl::Status compacted = MaybeCompact();
    if (!db.InTransaction()) batch_error = compacted;
  }
  if (batch_error.ok()) {
    absl::Status pruned = MaybePruneAudit();
    if (!db.InTransaction()) batch_error = pruned;
  }
  if (batch_error.ok()) {
    absl::Status trimmed = MaybeTrimAudit(audit_rows);
    if (!db.InTransaction()) batch_error = trimmed;
  }
  if (batch_error.ok())
    batch_error = db.Run("COMMIT", "commit write transaction");

  if (!batch_error.ok()) {
    if (db.InTransaction()) {
      absl::Status undone = db.Exec("ROLLBACK", "roll back write transaction");
      LOG_IF(ERROR, !undone.ok()) << undone;
    }
    allocated_revision_ = committed_revision_.load();
    change_rows_ = change_rows_before;
    next_audit_prune_ = {};  // a prune in it went too
    changed_hosts.clear();
    LOG_EVERY_N(ERROR, 100) << "store commit failed: " << batch_error;
    absl::Status failure = CommitFailure(batch_error);
    for (absl::Status& result : results) {
      // A write that failed on its own keeps its error: it is no less true.
      if (result.ok()) result = failure;
    }
    outcome.revision = CurrentRevision();
    return outcome;
  }

  committed_revision_.store(allocated_revision_, std::memory_order_release);
  outcome.revision = CurrentRevision();
  return outcome;
}

absl::Status SqliteStore::MaybeCompact() {
  // The slack keeps compaction to one query every retention/16 changes,
  // instead of a delete on every commit once the log is full.
  const int64_t retention = options_.changelog_retention;
  if (change_rows_ <= retention + retention / 16) return absl::OkStatus();
  SqliteDb& db = *writer_db_;
  int64_t deleted = 0;
  absl::Status status = InSavepoint(db, "change log compaction", [&]() -> absl::Status {
    // Keeping at most `retention` rows and only whole revisions: delete up to
    // the revision of the first row beyond the retention, newest first.
    int64_t cutoff = 0;
    {
      ASSIGN_OR_RETURN(SqliteQuery q,
                       db.Query("SELECT revision FROM changes "
                                "ORDER BY revision DESC LIMIT 1 OFFSET ?1",
                                "find change log cutoff"));
      q.BindInt(1, retention);
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) return absl::OkStatus();
      cutoff = q.ColumnInt(0);
    }
    {
      ASSIGN_OR_RETURN(SqliteQuery q,
                       db.Query("DELETE FROM changes WHERE revision <= ?1",
                                "compact change log"));
      q.BindInt(1, cutoff);
      RETURN_IF_ERROR(q.Run());
      deleted = db.Changes();
    }
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db.Query("UPDATE meta SET value = MAX(value, ?1) "
                              "WHERE key = 'compacted_revision'",
                              "record change log horizon"));
    q.BindInt(1, cutoff);
    return q.Run();
  });
  if (status.ok()) change_rows_ -= deleted;
  return status;
}

absl::Status SqliteStore::MaybePruneAudit() {
  if (options_.audit_retention == absl::InfiniteDuration()) {
    return absl::OkStatus();
  }
  const auto now = std::chrono::steady_clock::now();
  if (now < next_audit_prune_) return absl::OkStatus();
  next_audit_prune_ = now + kAuditPruneInterval;
  const int64_t cutoff_ns =
      absl::ToUnixNanos(absl::Now() - options_.audit_retention);
  const int64_t limit = options_.audit_prune_rows;
  SqliteDb& db = *writer_db_;
  int64_t deleted = 0;
  absl::Status status = InSavepoint(db, "audit pruning", [&]() -> absl::Status {
    // In sequence order (the rowid: no index needed), up to the first
    // record young enough to keep, at most `limit`, never the newest. A
    // record older than one before it (the wall clock stepped back) waits
    // for that one.
    int64_t keep_from = 0;
    {
      ASSIGN_OR_RETURN(SqliteQuery q,
                       db.Query("SELECT sequence, time_unix_ns FROM audit "
                                "ORDER BY sequence LIMIT ?1",
                                "find audit records past retention"));
      q.BindInt(1, limit + 1);
      int64_t old = 0;
      while (true) {
        ASSIGN_OR_RETURN(bool row, q.Step());
        if (!row) break;
        keep_from = q.ColumnInt(0);
        if (q.ColumnInt(1) >= cutoff_ns || ++old > limit) break;
      }
    }
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db.Query("DELETE FROM audit WHERE sequence < ?1",
                              "prune audit records"));
    q.BindInt(1, keep_from);
    RETURN_IF_ERROR(q.Run());
    deleted = db.Changes();
    return absl::OkStatus();
  });
  if (status.ok() && deleted > 0) {
    const int64_t hours = absl::ToInt64Hours(options_.audit_retention);
    LOG(INFO) << "audit: deleted " << deleted << " records older than "
              << (hours > 0 && hours % 24 == 0 &&
                          absl::Hours(hours) == options_.audit_retention
                      ? absl::StrCat(hours / 24, " days")
                      : absl::FormatDuration(options_.audit_retention));
    // A full prune may have left more: the next batch goes on.
    if (deleted >= limit) next_audit_prune_ = now;
  }
  return status;
}

absl::Status SqliteStore::MaybeTrimAudit(int64_t appended) {
  if (appended == 0 || options_.audit_window_records == 0) return absl::OkStatus();
  SqliteDb& db = *writer_db_;
  return InSavepoint(db, "audit window", [&]() -> absl::Status {
    // The sequence is the rowid: both ends are found in the index. At most
    // audit_prune_rows a batch, so that the first trim of a long trail (a
    // store from before the window) does not hold up one commit for long.
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db.Query("DELETE FROM audit WHERE sequence <= MIN("
                              "(SELECT MAX(sequence) FROM audit) - ?1, "
                              "(SELECT MIN(sequence) FROM audit) + ?2 - 1)",
                              "trim the audit window"));
    q.BindInt(1, options_.audit_window_records);
    q.BindInt(2, options_.audit_prune_rows);
    return q.Run();
  });
}

absl::Status SqliteStore::Read(const TxnFn& fn) {
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, AcquireReader());
  // In WAL mode a read transaction sees one snapshot from its first read
  // until it ends, whatever the writer commits meanwhile.
  absl::Status status = db->Run("BEGIN", "begin read transaction");
  if (status.ok()) {
    SqliteTransaction txn(*db, nullptr);
    status = fn(txn);
    absl::Status ended = db->Run("COMMIT", "end read transaction");
    if (status.ok()) status = ended;
  }
  if (db->InTransaction()) {
    absl::Status undone = db->Exec("ROLLBACK", "roll back read transaction");
    if (!undone.ok()) return status;  // drop the connection, not the answer
  }
  ReleaseReader(std::move(db));
  return status;
}

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteStore::AcquireReader() {
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    if (!idle_readers_.empty()) {
      std::unique_ptr<SqliteDb> db = std::move(idle_readers_.back());
      idle_readers_.pop_back();
      return db;
    }
  }
  return SqliteDb::Open(db_path_, /*read_only=*/true, /*create=*/false);
}

void SqliteStore::ReleaseReader(std::unique_ptr<SqliteDb> db) {
  std::lock_guard<std::mutex> lock(readers_mu_);
  if (idle_readers_.size() < kMaxIdleReaders)
    idle_readers_.push_back(std::move(db));
  // Otherwise it closes: connections beyond that served a passing burst.
}

}  // namespace cosched::store
