// The embedded durable store: one SQLite database file in WAL mode.
#ifndef COSCHED_STORE_SQLITE_STORE_H_
#define COSCHED_STORE_SQLITE_STORE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/group_commit_writer.h"
#include "store/store.h"

namespace cosched::store {

class SqliteDb;

struct SqliteStoreOptions {
  // Directory of the database file (cosched.db); created with mode 0700.
  std::string data_dir;
  // Change-log rows kept for agents that resume; older ones are compacted
  // away and those agents get a snapshot instead.
  int64_t changelog_retention = 100000;
  // Audit records older than this are deleted, oldest first, inside a
  // write batch at most every 10 minutes and at most audit_prune_rows per
  // batch (more wait for the next batch), so that a first prune of a long
  // trail does not hold up one commit for long. The newest record is
  // always kept: SQLite then never hands out a deleted sequence again, and
  // a client paging by sequence never sees one reused. Infinite: keep all.
  absl::Duration audit_retention = absl::InfiniteDuration();
  int64_t audit_prune_rows = 10000;
  // Audit records kept at most, beside the retention: every batch that
  // appends records deletes those beyond the newest this many (at most
  // audit_prune_rows of them a batch), so the trail's window never grows
  // past it by more than a batch. 0: no bound.
  int64_t audit_window_records = 0;
  // Write functions committed together at most.
  int max_batch = 256;
};

// Store on SQLite. Writes go through the group-commit writer
// (store/group_commit_writer.h), whose thread has its own connection and
// commits each batch as one transaction (one fsync for the batch) with a
// savepoint per write function. Reads run on the caller's thread, on a
// pooled read-only connection, in a snapshot.
//
// Thread-safe. Do not call WriteSync from a write function (it runs on the
// writer thread), a done callback or the commit observer (they run on the
// completion thread): each would wait for its own thread.
class SqliteStore final : public Store {
 public:
  // Opens or creates the store in options.data_dir and brings its schema up
  // to date. Errors: FAILED_PRECONDITION when the schema is newer than this
  // code or the options are invalid; DATA_LOSS when the file is not a sound
  // SQLite database; UNAVAILABLE / PERMISSION_DENIED when the directory or
  // file cannot be created, opened or written.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(
      const SqliteStoreOptions& options);

  // Commits every write already submitted, then stops the writer. Writes
  // submitted meanwhile from other threads fail with UNAVAILABLE.
  ~SqliteStore() override;

  void Write(TxnFn fn, DoneFn done) override;
  absl::Status Read(const TxnFn& fn) override;
  int64_t CurrentRevision() const override;
  void SetCommitObserver(CommitObserver observer) override;

  // The schema version this code writes.
  static int LatestSchemaVersion();
  const std::string& db_path() const { return db_path_; }

 private:
  SqliteStore(SqliteStoreOptions options, std::string db_path,
              std::unique_ptr<SqliteDb> writer);

  // Runs and commits one batch, on the writer thread: the hosts of its
  // RecordChange calls when it committed, what each write's done function
  // is to get.
  BatchOutcome RunBatch(std::vector<PendingWrite>& batch);
  // Deletes the oldest change-log revisions inside the open batch
  // transaction once the log is well over its retention. A failure only
  // matters when SQLite dropped the whole transaction with it.
  absl::Status MaybeCompact();
  // Deletes audit records older than the retention inside the open batch
  // transaction, when a prune is due; failures as MaybeCompact's.
  absl::Status MaybePruneAudit();
  // Deletes the audit records beyond the newest audit_window_records inside
  // the open batch transaction, when the batch appended any; failures as
  // MaybeCompact's.
  absl::Status MaybeTrimAudit(int64_t appended);

  absl::StatusOr<std::unique_ptr<SqliteDb>> AcquireReader();
  void ReleaseReader(std::unique_ptr<SqliteDb> db);

  const SqliteStoreOptions options_;
  const std::string db_path_;

  std::atomic<int64_t> committed_revision_{0};

  // Owned by the writer thread once it runs.
  std::unique_ptr<SqliteDb> writer_db_;
  int64_t allocated_revision_ = 0;  // highest revision handed out
  int64_t change_rows_ = 0;         // rows in the change log
  // When the next batch may prune the audit trail (the first one does).
  std::chrono::steady_clock::time_point next_audit_prune_{};

  std::mutex readers_mu_;
  std::vector<std::unique_ptr<SqliteDb>> idle_readers_;  // guarded

  // Last: stopped first, while what its batches use is still there.
  std::unique_ptr<GroupCommitWriter> writer_;
};

}  // namespace cosched::store

#endif  // COSCHED_STORE_SQLITE_STORE_H_
