// The audit trail outside the store. The store keeps a bounded recent
// window of it (audit window_records: on etcd, a fleet's trail would fill
// etcd's quota within hours); the replica that leads appends every record,
// in sequence order, to a file of JSON lines and syncs it before it moves
// on, so that the whole trail is kept where operators ship logs
// (docs/operating.md, "The audit trail"). A file that cannot be written is
// an ERROR and a metric, never a store write refused.
#ifndef COSCHED_SERVER_STATE_AUDIT_EXPORT_H_
#define COSCHED_SERVER_STATE_AUDIT_EXPORT_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosched/v1/control_plane.pb.h"
#include "store/store.h"

namespace cosched::server {

struct AuditFileOptions {
  // The file; its folder must exist.
  std::string path;
  // Rotated (path.1, path.2, ...) before a record would take it past this.
  int64_t max_bytes = int64_t{100} << 20;
  // Rotated files kept; the oldest is deleted.
  int keep = 10;
};

// An append-only file of audit records, one JSON line each. Not
// thread-safe: the exporter's thread owns it.
class AuditFile {
 public:
  // Opens (creating it, mode 0640) `options.path` and reads the sequence of
  // its last record, or of the newest rotated file's when it is empty.
  // The error names the file.
  static absl::StatusOr<std::unique_ptr<AuditFile>> Open(const AuditFileOptions& options);
  ~AuditFile();
  AuditFile(const AuditFile&) = delete;
  AuditFile& operator=(const AuditFile&) = delete;

  // The sequence of the last record written; 0 for none.
  int64_t last_sequence() const { return last_sequence_; }
  // Appends `records` (in sequence order), rotating as needed, and syncs
  // the file. On an error the file may hold some of them: last_sequence()
  // says which were written.
  absl::Status Append(const std::vector<v1::AuditRecord>& records);

 private:
  AuditFile(AuditFileOptions options, int fd, int64_t size, int64_t last_sequence);
  absl::Status Rotate();
  absl::Status WriteAll(const std::string& bytes);

  const AuditFileOptions options_;
  int fd_;
  int64_t size_;
  int64_t last_sequence_;
};

// Thread-safe. Exports on a thread of its own once Start() is called, every
// `interval`, while `store` says this csd leads (every csd on SQLite).
class AuditExporter {
 public:
  // What it reports (csd's metrics); unset ones are not called.
  struct Observers {
    // Records appended to the file.
    std::function<void(int64_t records, int64_t last_sequence)> exported;
    // An export that failed (the file cannot be opened or written; the
    // store cannot be read): `failing` true until one succeeds again.
    std::function<void(bool failing)> failing;
    // Records the store no longer held when the file came to them (the
    // file was behind by more than the store's window).
    std::function<void(int64_t records)> missing;
  };

  AuditExporter(store::Store& store, AuditFileOptions options,
                absl::Duration interval = absl::Seconds(1), Observers observers = {});
  // Stop()s.
  ~AuditExporter();
  AuditExporter(const AuditExporter&) = delete;
  AuditExporter& operator=(const AuditExporter&) = delete;

  void Start();
  // Ends the thread after the export in progress. Idempotent.
  void Stop();

  // One export now: every record after the file's last, page by page.
  // Answers how many it appended; the error of the file or the store.
  absl::StatusOr<int64_t> ExportOnce();

 private:
  void Loop();

  store::Store& store_;
  const AuditFileOptions options_;
  const absl::Duration interval_;
  const Observers observers_;

  std::mutex export_mu_;              // one export at a time
  std::unique_ptr<AuditFile> file_;   // guarded by export_mu_; null until opened
  bool failing_ = false;              // guarded by export_mu_

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_AUDIT_EXPORT_H_
