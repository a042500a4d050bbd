#include "server/state/audit_export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log_every.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "glog/logging.h"
#include "google/protobuf/util/json_util.h"

namespace cosched::server {
namespace {

// Records read from the store per page, and pages per export at most (the
// rest waits for the next one, so that Stop is never held up for long).
constexpr int kPage = 1000;
constexpr int kMaxPages = 100;

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int saved = errno;
  std::string message = absl::StrCat(what, " audit file ", path, ": ", std::strerror(saved));
  if (saved == ENOSPC || saved == EDQUOT) return absl::ResourceExhaustedError(message);
  if (saved == EACCES || saved == EPERM || saved == EROFS) {
    return absl::PermissionDeniedError(message);
  }
  return absl::UnavailableError(message);
}

std::string RotatedPath(const std::string& path, int n) { return absl::StrCat(path, ".", n); }

// The whole of an open file's bytes from `from` to `to`.
absl::StatusOr<std::string> ReadSpan(int fd, int64_t from, int64_t to, const std::string& path) {
  std::string bytes(static_cast<size_t>(to - from), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = pread(fd, bytes.data() + done, bytes.size() - done,
                            static_cast<off_t>(from + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoError("cannot read", path);
    done += static_cast<size_t>(n);
  }
  return bytes;
}

// The sequence of the last whole line of `path` (0 for an empty or absent
// file). A last line cut short (csd stopped in the middle of a write) is
// cut off when `fd` is open for writing, so that the next record starts a
// line of its own. `size` is the file's size and becomes its size after.
absl::StatusOr<int64_t> LastSequence(int fd, const std::string& path, int64_t& size,
                                     bool writable) {
  if (size == 0) return 0;
  // Backwards in growing steps until the start of the last whole line.
  int64_t step = 64 << 10;
  while (true) {
    const int64_t from = std::max<int64_t>(0, size - step);
    ASSIGN_OR_RETURN(std::string tail, ReadSpan(fd, from, size, path));
    size_t end = tail.rfind('\n');
    if (end == std::string::npos && from > 0) {
      step *= 2;
      continue;
    }
    if (end + 1 != tail.size()) {
      const int64_t whole = end == std::string::npos ? from : from + static_cast<int64_t>(end) + 1;
      LOG(WARNING) << "audit file " << path << ": its last line was cut short ("
                   << size - whole << " bytes); " << (writable ? "cut off" : "left out");
      if (writable && ftruncate(fd, static_cast<off_t>(whole)) != 0) {
        return ErrnoError("cannot cut the last line of", path);
      }
      size = whole;
      if (end == std::string::npos) return 0;
      tail.resize(end + 1);
    }
    tail.pop_back();  // its newline
    const size_t begin = tail.rfind('\n');
    if (begin == std::string::npos && from > 0) {
      step *= 2;
      continue;
    }
    const std::string line = begin == std::string::npos ? tail : tail.substr(begin + 1);
    v1::AuditRecord record;
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;
    if (!google::protobuf::util::JsonStringToMessage(line, &record, options).ok()) {
      return absl::DataLossError(absl::StrCat("audit file ", path,
                                              ": its last line is not an audit record"));
    }
    return record.sequence();
  }
}

absl::StatusOr<int64_t> LastSequenceOfRotated(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? absl::StatusOr<int64_t>(0) : ErrnoError("cannot open", path);
  struct stat st {};
  absl::StatusOr<int64_t> last = fstat(fd, &st) == 0 ? absl::StatusOr<int64_t>(st.st_size)
                                                     : ErrnoError("cannot stat", path);
  if (last.ok()) {
    int64_t size = *last;
    last = LastSequence(fd, path, size, /*writable=*/false);
  }
  close(fd);
  return last;
}

// Opens `path` for appending, creating it; its mode is 0640 whatever the
// umask (csd's unit has 0077): the group reads it, for a log shipper.
absl::StatusOr<int> OpenForAppend(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) return ErrnoError("cannot open", path);
  if (fchmod(fd, 0640) != 0) {
    absl::Status failed = ErrnoError("cannot set the mode of", path);
    close(fd);
    return failed;
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AuditFile>> AuditFile::Open(const AuditFileOptions& options) {
  ASSIGN_OR_RETURN(const int fd, OpenForAppend(options.path));
  // Read through a second descriptor: O_APPEND's has no read access.
  const int reader = open(options.path.c_str(), O_RDWR | O_CLOEXEC);
  struct stat st {};
  absl::StatusOr<int64_t> last = reader >= 0 && fstat(reader, &st) == 0
                                     ? absl::StatusOr<int64_t>(0)
                                     : ErrnoError("cannot read", options.path);
  int64_t size = st.st_size;
  if (last.ok()) last = LastSequence(reader, options.path, size, /*writable=*/true);
  if (reader >= 0) close(reader);
  if (last.ok() && *last == 0 && options.keep > 0) {
    last = LastSequenceOfRotated(RotatedPath(options.path, 1));
  }
  if (!last.ok()) {
    close(fd);
    return last.status();
  }
  return std::unique_ptr<AuditFile>(new AuditFile(options, fd, size, *last));
}

AuditFile::AuditFile(AuditFileOptions options, int fd, int64_t size, int64_t last_sequence)
    : options_(std::move(options)), fd_(fd), size_(size), last_sequence_(last_sequence) {}

AuditFile::~AuditFile() { close(fd_); }

absl::Status AuditFile::Rotate() {
  const std::string& path = options_.path;
  if (options_.keep == 0) {
    if (ftruncate(fd_, 0) != 0) return ErrnoError("cannot empty", path);
    size_ = 0;
    return absl::OkStatus();
  }
  // path.keep goes, each other moves up one, and path becomes path.1.
  if (unlink(RotatedPath(path, options_.keep).c_str()) != 0 && errno != ENOENT) {
    return ErrnoError("cannot delete the oldest rotated", path);
  }
  for (int n = options_.keep - 1; n >= 1; --n) {
    if (rename(RotatedPath(path, n).c_str(), RotatedPath(path, n + 1).c_str()) != 0 &&
        errno != ENOENT) {
      return ErrnoError("cannot rotate", path);
    }
  }
  if (rename(path.c_str(), RotatedPath(path, 1).c_str()) != 0) {
    return ErrnoError("cannot rotate", path);
  }
  ASSIGN_OR_RETURN(const int fd, OpenForAppend(path));
  close(fd_);
  fd_ = fd;
  size_ = 0;
  return absl::OkStatus();
}

absl::Status AuditFile::WriteAll(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write", options_.path);
    done += static_cast<size_t>(n);
  }
  size_ += static_cast<int64_t>(bytes.size());
  return absl::OkStatus();
}

absl::Status AuditFile::Append(const std::vector<v1::AuditRecord>& records) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  std::string pending;
  int64_t pending_last = last_sequence_;
  for (const v1::AuditRecord& record : records) {
    std::string line;
    if (!google::protobuf::util::MessageToJsonString(record, &line, print).ok()) {
      line = absl::StrCat("{\"sequence\":\"", record.sequence(), "\",\"unprintable\":true}");
    }
    line.push_back('\n');
    const int64_t line_bytes = static_cast<int64_t>(line.size());
    if (size_ + static_cast<int64_t>(pending.size()) + line_bytes > options_.max_bytes &&
        size_ + static_cast<int64_t>(pending.size()) > 0) {
      // What is pending goes into this file, synced, before it rotates.
      RETURN_IF_ERROR(WriteAll(pending));
      if (fdatasync(fd_) != 0) return ErrnoError("cannot sync", options_.path);
      last_sequence_ = pending_last;
      pending.clear();
      RETURN_IF_ERROR(Rotate());
    }
    pending += line;
    pending_last = record.sequence();
  }
  RETURN_IF_ERROR(WriteAll(pending));
  if (fdatasync(fd_) != 0) return ErrnoError("cannot sync", options_.path);
  last_sequence_ = pending_last;
  return absl::OkStatus();
}

AuditExporter::AuditExporter(store::Store& store, AuditFileOptions options,
                             absl::Duration interval, Observers observers)
    : store_(store),
      options_(std::move(options)),
      interval_(interval),
      observers_(std::move(observers)) {}

AuditExporter::~AuditExporter() { Stop(); }

void AuditExporter::Start() { thread_ = NamedThread("cs-audit", [this] { Loop(); }); }

void AuditExporter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AuditExporter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    absl::StatusOr<int64_t> exported = ExportOnce();
    if (!exported.ok()) {
      COSCHED_LOG_EVERY_T(ERROR, 60)
          << "audit: records are not reaching the audit file (they stay in the store's "
             "window until it is full): "
          << exported.status() << " (logged once a minute)";
    }
    lock.lock();
    stop_cv_.wait_for(lock, absl::ToChronoMilliseconds(interval_), [this] { return stopping_; });
  }
}

absl::StatusOr<int64_t> AuditExporter::ExportOnce() {
  std::lock_guard<std::mutex> lock(export_mu_);
  if (!store_.Leads()) return 0;
  absl::StatusOr<int64_t> result = [&]() -> absl::StatusOr<int64_t> {
    if (file_ == nullptr) {
      ASSIGN_OR_RETURN(file_, AuditFile::Open(options_));
    }
    int64_t appended = 0;
    for (int page = 0; page < kMaxPages; ++page) {
      const int64_t after = file_->last_sequence();
      std::vector<v1::AuditRecord> records;
      RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
        ASSIGN_OR_RETURN(records, txn.ListAuditAfter(after, kPage));
        return absl::OkStatus();
      }));
      if (records.empty()) break;
      if (after > 0 && records.front().sequence() > after + 1) {
        const int64_t missing = records.front().sequence() - after - 1;
        LOG(ERROR) << "audit: records " << after + 1 << " to " << records.front().sequence() - 1
                   << " left the store's window before they reached " << options_.path
                   << ": the file was behind by more than audit window_records";
        if (observers_.missing) observers_.missing(missing);
      }
      RETURN_IF_ERROR(file_->Append(records));
      appended += static_cast<int64_t>(records.size());
      if (observers_.exported) observers_.exported(static_cast<int64_t>(records.size()),
                                                   file_->last_sequence());
      if (records.size() < static_cast<size_t>(kPage)) break;
    }
    return appended;
  }();
  // After any failure the file is opened afresh next time: its last line
  // says what it holds (a write may have stopped halfway), and it may have
  // been moved or replaced by hand meanwhile.
  if (!result.ok()) file_.reset();
  if (result.ok() == failing_) {
    failing_ = !result.ok();
    if (observers_.failing) observers_.failing(failing_);
  }
  return result;
}

}  // namespace cosched::server
