// csd store backup and restore (store/store_tools.h); the migration of a
// SQLite store into etcd is store_migration.cc.
#include "store/store_tools.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "cosched/store/etcd_records.pb.h"
#include "cosched/store/store_backup.pb.h"
#include "etcd/client.h"
#include "store/sqlite_db.h"
#include "store/sqlite_schema.h"
#include "store/store_tools_internal.h"

namespace cosched::store {
namespace {

using internal::ClaimEmptyPrefix;
using internal::ConnectEtcd;
using internal::DbPath;
using internal::EtcdTarget;
using internal::FinishEtcd;
using internal::HalfWritten;
using internal::OpenExisting;
using internal::Under;

constexpr absl::string_view kDbFile = "cosched.db";
constexpr absl::string_view kEtcdMagic = "COSCHED-ETCD-BACKUP\n";
// The first 16 bytes of every SQLite database file.
constexpr absl::string_view kSqliteMagic{"SQLite format 3\0", 16};
// Bytes left free in each restore Txn for its framing, below etcd's limit.
constexpr int64_t kTxnSlack = 4096;

absl::Status FileError(int err, absl::string_view what, const std::string& path) {
  std::string message = absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM || err == EROFS) {
    return absl::PermissionDeniedError(message);
  }
  if (err == ENOENT) return absl::NotFoundError(message);
  return absl::UnavailableError(message);
}

absl::Status SyncPath(const std::string& path, bool directory) {
  int fd = open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FileError(errno, "open", path);
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  return rc == 0 ? absl::OkStatus() : FileError(err, "sync", path);
}

std::string ParentDir(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// Makes `tmp` durable and the content of `path`, atomically.
absl::Status CommitFile(const std::string& tmp, const std::string& path) {
  RETURN_IF_ERROR(SyncPath(tmp, false));
  if (rename(tmp.c_str(), path.c_str()) != 0) return FileError(errno, "rename into", path);
  return SyncPath(ParentDir(path), true);
}

// Writes `path` through `tmp`: `write` fills tmp, which then becomes path
// atomically; on any failure tmp is removed and path is untouched.
absl::Status WriteThroughTemp(const std::string& tmp, const std::string& path,
                              const std::function<absl::Status()>& write) {
  std::error_code ignored;
  std::filesystem::remove(tmp, ignored);  // a leftover of a run that died
  absl::Status status = write();
  if (status.ok()) status = CommitFile(tmp, path);
  if (!status.ok()) std::filesystem::remove(tmp, ignored);
  return status;
}

uint32_t Crc32(absl::string_view data, uint32_t crc = 0) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (unsigned char byte : data) crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

void AppendU32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint32_t ReadU32(absl::string_view in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= uint32_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return value;
}

// The file's first `limit` bytes (-1: all of it).
absl::StatusOr<std::string> ReadBackupFile(const std::string& path, std::streamsize limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return FileError(errno, "open backup file", path);
  std::string data;
  if (limit < 0) {
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else {
    data.resize(static_cast<size_t>(limit));
    in.read(data.data(), limit);
    data.resize(static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return FileError(errno, "read backup file", path);
  return data;
}

uint64_t NewCommitId() {
  std::mt19937_64 random{std::random_device{}()};
  uint64_t id = 0;
  while (id == 0) id = random();
  return id;
}

// ---- Locations -------------------------------------------------------------

absl::Status CheckPrefix(absl::string_view arg, absl::string_view prefix) {
  if (prefix.size() < 2 || prefix[0] != '/' || prefix.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        arg, ": etcd prefix '", prefix,
        "' must be absolute, not '/' and not end with '/' (e.g. etcd:127.0.0.1:2379/cosched)"));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- Shared with the migration (store_tools_internal.h) --------------------

namespace internal {

std::string DbPath(const std::string& dir) { return absl::StrCat(dir, "/", kDbFile); }

absl::StatusOr<std::unique_ptr<SqliteDb>> OpenExisting(const std::string& path, bool read_only) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat("no SQLite store at ", path));
  }
  return SqliteDb::Open(path, read_only, /*create=*/false);
}

std::string Under(const std::string& prefix, absl::string_view key) {
  return absl::StrCat(prefix, "/", key);
}

absl::StatusOr<EtcdTarget> ConnectEtcd(const StoreLocation& at) {
  RETURN_IF_ERROR(CheckPrefix("etcd store", at.etcd.prefix));
  ASSIGN_OR_RETURN(std::unique_ptr<etcd::Client> client, etcd::Client::Create(at.etcd.client));
  return EtcdTarget{std::move(client), at.etcd.prefix};
}

// Makes sure nothing is under the prefix (deleting it with `replace`), then
// writes the marker that csd refuses to start on until the last Txn.
absl::Status ClaimEmptyPrefix(EtcdTarget& target, bool replace) {
  const std::string base = absl::StrCat(target.prefix, "/");
  const std::string end = etcd::PrefixEnd(base);
  if (replace) {
    RETURN_IF_ERROR(target.client->DeleteRange(base, end).status());
  } else {
    ASSIGN_OR_RETURN(etcd::RangeResult found, target.client->Range(base, end, 0, 1, true));
    if (!found.kvs.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "target etcd store under ", target.prefix, " is not empty (it holds ",
          found.kvs[0].key(), "): restore and migrate only fill an empty store; pass "
          "--replace to delete what it holds first"));
    }
  }
  return target.client->Put(Under(target.prefix, kRestoreMarkerKey), "").status();
}

// A failure after the marker was written: the target is half-written, and
// the operator needs to know that and the way out.
absl::Status HalfWritten(const EtcdTarget& target, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(
      status.message(), "; the etcd store under ", target.prefix, " is half-written (",
      Under(target.prefix, kRestoreMarkerKey), " stays, and csd refuses to start on it): "
      "run the command again with --replace"));
}

// The last Txn of a restore or migration: `meta` with a fresh commit id and
// changes_horizon at least `floor` and above this Txn's own revision, and
// the marker's deletion, only if the marker is still there and meta is
// still as read. Returns the revision of the Txn and the horizon.
absl::StatusOr<std::pair<int64_t, int64_t>> FinishEtcd(EtcdTarget& target, EtcdMeta meta,
                                                       int64_t floor) {
  const std::string meta_key = Under(target.prefix, "meta");
  const std::string marker = Under(target.prefix, kRestoreMarkerKey);
  ASSIGN_OR_RETURN(etcd::RangeResult current, target.client->Range(meta_key, ""));
  const int64_t meta_revision = current.kvs.empty() ? 0 : current.kvs[0].mod_revision();
  // The Txn commits at current.revision + 1 unless another client of the
  // cluster writes first; a horizon above it is only safer (more snapshots).
  meta.set_changes_horizon(std::max(floor, current.revision + 1));
  // A restored layout-1 copy stays one (it has no index: csd builds it at
  // its next open); a migration's store has its layout already.
  if (meta.layout_version() == 0) meta.set_layout_version(EtcdStore::kLayoutVersion);
  meta.set_commit_id(NewCommitId());
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* same_meta = request.add_compare();
  same_meta->set_key(meta_key);
  same_meta->set_target(etcdserverpb::Compare::MOD);
  same_meta->set_result(etcdserverpb::Compare::EQUAL);
  same_meta->set_mod_revision(meta_revision);
  etcdserverpb::Compare* marked = request.add_compare();
  marked->set_key(marker);
  marked->set_target(etcdserverpb::Compare::MOD);
  marked->set_result(etcdserverpb::Compare::GREATER);
  marked->set_mod_revision(0);  // present
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(meta_key);
  put->set_value(meta.SerializeAsString());
  request.add_success()->mutable_request_delete_range()->set_key(marker);
  ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response, target.client->Txn(request));
  if (!response.succeeded()) {
    return absl::AbortedError(absl::StrCat(
        "etcd store under ", target.prefix, " was written by someone else during the copy "
        "(meta or ", marker, " changed); nothing is trusted: run it again with --replace"));
  }
  return std::pair{response.header().revision(), meta.changes_horizon()};
}

}  // namespace internal

namespace {

// ---- etcd backup file ------------------------------------------------------

struct EtcdBackup {
  StoreBackupHeader header;
  std::vector<StoreBackupEntry> entries;
};

absl::Status Corrupt(const std::string& file, absl::string_view why) {
  return absl::DataLossError(
      absl::StrCat("backup file ", file, " is corrupt or truncated: ", why));
}

absl::StatusOr<EtcdBackup> ParseEtcdBackup(const std::string& file, absl::string_view data) {
  EtcdBackup backup;
  if (data.size() < kEtcdMagic.size() + 4 + 4) return Corrupt(file, "too short");
  const uint32_t want = ReadU32(data.substr(data.size() - 4));
  if (Crc32(data.substr(0, data.size() - 4)) != want) {
    return Corrupt(file, "its checksum does not match its content");
  }
  absl::string_view rest = data.substr(kEtcdMagic.size(), data.size() - kEtcdMagic.size() - 4);
  auto next = [&](auto& message, absl::string_view what) -> absl::Status {
    if (rest.size() < 4) return Corrupt(file, absl::StrCat("it ends inside the ", what));
    const uint32_t size = ReadU32(rest);
    rest.remove_prefix(4);
    if (size > static_cast<uint32_t>(std::numeric_limits<int>::max()) || rest.size() < size) return Corrupt(file, absl::StrCat("it ends inside the ", what));
    if (!message.ParseFromArray(rest.data(), static_cast<int>(size))) {
      return Corrupt(file, absl::StrCat("the ", what, " does not parse"));
    }
    rest.remove_prefix(size);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(next(backup.header, "header"));
  if (backup.header.key_count() < 0) return Corrupt(file, "negative key count");
  for (int64_t i = 0; i < backup.header.key_count(); ++i) {
    StoreBackupEntry entry;
    RETURN_IF_ERROR(next(entry, absl::StrCat("entry ", i)));
    if (entry.key().empty() || entry.key()[0] == '/' || entry.key() == kRestoreMarkerKey ||
        IsReplicaKey(entry.key())) {
      return Corrupt(file, absl::StrCat("entry ", i, " has the invalid key '", entry.key(), "'"));
    }
    backup.entries.push_back(std::move(entry));
  }
  if (!rest.empty()) return Corrupt(file, "bytes follow the last entry");
  return backup;
}

absl::StatusOr<ToolReport> BackupEtcd(const StoreLocation& from, const std::string& file) {
  ASSIGN_OR_RETURN(EtcdTarget source, ConnectEtcd(from));
  const std::string base = absl::StrCat(source.prefix, "/");
  // One Range: every page is read at the first page's revision.
  ASSIGN_OR_RETURN(etcd::RangeResult range,
                   source.client->Range(base, etcd::PrefixEnd(base)));
  // The running replicas' own keys are not state (store/etcd_replicas.h).
  std::erase_if(range.kvs, [&](const mvccpb::KeyValue& kv) {
    return IsReplicaKey(absl::string_view(kv.key()).substr(base.size()));
  });
  StoreBackupHeader header;
  header.set_prefix(source.prefix);
  header.set_revision(range.revision);
  header.set_created_unix_ns(absl::GetCurrentTimeNanos());
  header.set_key_count(static_cast<int64_t>(range.kvs.size()));
  header.set_layout_version(EtcdStore::kLayoutVersion);
  for (const mvccpb::KeyValue& kv : range.kvs) {
    const absl::string_view key = absl::string_view(kv.key()).substr(base.size());
    if (key == kRestoreMarkerKey) {
      return absl::FailedPreconditionError(absl::StrCat(
          "etcd store under ", source.prefix, " is half-written (", kv.key(),
          " is present): it is no state to back up"));
    }
    if (key == "meta") {
      EtcdMeta meta;
      if (!meta.ParseFromString(kv.value())) {
        return absl::DataLossError(absl::StrCat(
            "etcd store: value of key ", kv.key(), " does not parse as the store's metadata"));
      }
      header.set_layout_version(meta.layout_version());
      header.set_store_revision(kv.mod_revision());
    }
  }
  std::string out(kEtcdMagic);
  auto append = [&out](const google::protobuf::Message& message) {
    const std::string bytes = message.SerializeAsString();
    AppendU32(out, static_cast<uint32_t>(bytes.size()));
    out += bytes;
  };
  append(header);
  for (const mvccpb::KeyValue& kv : range.kvs) {
    StoreBackupEntry entry;
    entry.set_key(kv.key().substr(base.size()));
    entry.set_value(kv.value());
    append(entry);
  }
  AppendU32(out, Crc32(out));
  const std::string tmp = absl::StrCat(file, ".tmp");
  RETURN_IF_ERROR(WriteThroughTemp(tmp, file, [&]() -> absl::Status {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return FileError(errno, "create", tmp);
    f.write(out.data(), static_cast<std::streamsize>(out.size()));
    f.close();
    if (!f) return FileError(errno, "write", tmp);
    return absl::OkStatus();
  }));
  return ToolReport{header.store_revision(), header.key_count(), 0};
}

absl::StatusOr<ToolReport> FillEtcd(const std::string& file, const EtcdBackup& backup,
                                    const EtcdMeta& meta, EtcdTarget& target,
                                    const RestoreOptions& options);

absl::StatusOr<ToolReport> RestoreEtcd(const std::string& file, absl::string_view data,
                                       const StoreLocation& to, const RestoreOptions& options) {
  ASSIGN_OR_RETURN(EtcdBackup backup, ParseEtcdBackup(file, data));
  if (backup.header.layout_version() > EtcdStore::kLayoutVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backup file ", file, " has layout version ", backup.header.layout_version(),
        " but this program knows version ", EtcdStore::kLayoutVersion,
        ": restore it with the release that made it"));
  }
  EtcdMeta meta;
  for (const StoreBackupEntry& entry : backup.entries) {
    if (entry.key() == "meta" && !meta.ParseFromString(entry.value())) {
      return Corrupt(file, "its meta entry does not parse as the store's metadata");
    }
  }
  ASSIGN_OR_RETURN(EtcdTarget target, ConnectEtcd(to));
  RETURN_IF_ERROR(ClaimEmptyPrefix(target, options.replace));
  absl::StatusOr<ToolReport> restored = FillEtcd(file, backup, meta, target, options);
  if (!restored.ok()) return HalfWritten(target, restored.status());
  return restored;
}

// RestoreEtcd's writes once the marker is there.
absl::StatusOr<ToolReport> FillEtcd(const std::string& file, const EtcdBackup& backup,
                                    const EtcdMeta& meta, EtcdTarget& target,
                                    const RestoreOptions& options) {
  const int max_ops = target.client->options().max_txn_ops;
  const int64_t max_bytes = target.client->options().max_request_bytes - kTxnSlack;
  etcdserverpb::TxnRequest batch;
  auto flush = [&]() -> absl::Status {
    if (batch.success_size() == 0) return absl::OkStatus();
    RETURN_IF_ERROR(target.client->Txn(batch).status());
    batch.Clear();
    return absl::OkStatus();
  };
  for (const StoreBackupEntry& entry : backup.entries) {
    if (entry.key() == "meta") continue;  // last, in FinishEtcd
    etcdserverpb::RequestOp op;
    op.mutable_request_put()->set_key(Under(target.prefix, entry.key()));
    op.mutable_request_put()->set_value(entry.value());
    const int64_t size = static_cast<int64_t>(op.ByteSizeLong()) + 8;
    if (size > max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "key ", entry.key(), " of backup file ", file, " (", size, " bytes) does not fit "
          "etcd's request limit of ", max_bytes + kTxnSlack, " bytes"));
    }
    if (batch.success_size() >= max_ops ||
        static_cast<int64_t>(batch.ByteSizeLong()) + size > max_bytes) {
      RETURN_IF_ERROR(flush());
    }
    *batch.add_success() = std::move(op);
  }
  RETURN_IF_ERROR(flush());
  const int64_t floor = std::max(backup.header.store_revision(), options.resume_floor) + 1;
  ASSIGN_OR_RETURN(auto finished, FinishEtcd(target, meta, floor));
  return ToolReport{finished.first, static_cast<int64_t>(backup.entries.size()),
                    finished.second};
}

// ---- SQLite backup ---------------------------------------------------------

// Copies the whole database `from` into `to` with the online backup API,
// in one step: one read transaction of the source, so a consistent copy
// while csd writes.
absl::Status SqliteCopy(SqliteDb& from, SqliteDb& to) {
  sqlite3_backup* backup = sqlite3_backup_init(to.handle(), "main", from.handle(), "main");
  if (backup == nullptr) return to.Error(sqlite3_errcode(to.handle()), "start backup");
  const int step = sqlite3_backup_step(backup, -1);
  const int finish = sqlite3_backup_finish(backup);
  if (step != SQLITE_DONE) return from.Error(step, "copy the database");
  if (finish != SQLITE_OK) return to.Error(finish, "finish the copy");
  return absl::OkStatus();
}

absl::StatusOr<ToolReport> BackupSqlite(const StoreLocation& from, const std::string& file) {
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> source,
                   OpenExisting(DbPath(from.sqlite_dir), /*read_only=*/true));
  const std::string tmp = absl::StrCat(file, ".tmp");
  int64_t revision = 0;
  RETURN_IF_ERROR(WriteThroughTemp(tmp, file, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> copy, SqliteDb::Open(tmp, false, true));
    RETURN_IF_ERROR(SqliteCopy(*source, *copy));
    // A single file: the copy carries the source's WAL flag otherwise, and
    // a backup is read where no -wal file goes with it.
    RETURN_IF_ERROR(copy->Exec("PRAGMA journal_mode = DELETE", "make the copy one file"));
    RETURN_IF_ERROR(CheckIntegrity(*copy));
    ASSIGN_OR_RETURN(revision, ReadMeta(*copy, "revision"));
    return absl::OkStatus();
  }));
  return ToolReport{revision, 0, 0};
}

// Whether the store in `db` holds anything: a revision or any record.
absl::StatusOr<bool> SqliteHoldsData(SqliteDb& db) {
  ASSIGN_OR_RETURN(int64_t revision, ReadMeta(db, "revision"));
  if (revision > 0) return true;
  for (const char* table :
       {"vms", "tenant_policies", "hosts", "observations", "audit", "rollout"}) {
    ASSIGN_OR_RETURN(SqliteQuery q, db.Query(absl::StrCat("SELECT 1 FROM ", table, " LIMIT 1"),
                                             "look for records"));
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (row) return true;
  }
  return false;
}

absl::StatusOr<ToolReport> RestoreSqlite(const std::string& file, const StoreLocation& to,
                                         const RestoreOptions& options) {
  // Every failure to read the backup is the file's: DATA_LOSS naming it.
  auto bad = [&file](const absl::Status& status) {
    return Corrupt(file, status.message());
  };
  auto backup = SqliteDb::Open(file, /*read_only=*/true, /*create=*/false);
  if (!backup.ok()) return bad(backup.status());
  if (absl::Status sound = CheckIntegrity(**backup); !sound.ok()) return bad(sound);
  auto version = ReadMeta(**backup, "schema_version");
  if (!version.ok()) return bad(version.status());
  if (*version < 1 || *version > kLatestSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backup file ", file, " has schema version ", *version, "; this program knows 1 to ",
        kLatestSchemaVersion));
  }
  auto backup_revision = ReadMeta(**backup, "revision");
  if (!backup_revision.ok()) return bad(backup_revision.status());

  RETURN_IF_ERROR(PrepareDataDir(to.sqlite_dir));
  const std::string path = DbPath(to.sqlite_dir);
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> existing, SqliteDb::Open(path, true, false));
    ASSIGN_OR_RETURN(bool holds, SqliteHoldsData(*existing));
    if (holds && !options.replace) {
      return absl::FailedPreconditionError(absl::StrCat(
          "target SQLite store ", path, " is not empty: restore only fills an empty store; "
          "stop csd and pass --replace to replace it"));
    }
  }
  const std::string tmp = absl::StrCat(path, ".restore");
  const int64_t revision = *backup_revision + kRestoreRevisionGap;
  RETURN_IF_ERROR(WriteThroughTemp(tmp, path, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> copy, SqliteDb::Open(tmp, false, true));
    RETURN_IF_ERROR(SqliteCopy(**backup, *copy));
    // Agents' resume revisions are all at most what the lost store reached:
    // the store goes on from far above, with no change log below.
    RETURN_IF_ERROR(copy->Exec("BEGIN IMMEDIATE", "begin restore"));
    RETURN_IF_ERROR(copy->Exec("DELETE FROM changes", "clear the change log"));
    {
      ASSIGN_OR_RETURN(SqliteQuery q,
                       copy->Query("UPDATE meta SET value = ?1 "
                                   "WHERE key IN ('revision', 'compacted_revision')",
                                   "move the revision past the old store's"));
      q.BindInt(1, revision);
      RETURN_IF_ERROR(q.Run());
    }
    RETURN_IF_ERROR(copy->Exec("COMMIT", "commit restore"));
    copy.reset();
    // The old store's WAL must not be replayed into the new file.
    for (const char* suffix : {"-wal", "-shm"}) {
      const std::string stale = absl::StrCat(path, suffix);
      std::error_code removed;
      std::filesystem::remove(stale, removed);
      if (removed) return FileError(removed.value(), "remove", stale);
    }
    return absl::OkStatus();
  }));
  return ToolReport{revision, 0, revision};
}

}  // namespace

std::string StoreLocation::Describe() const {
  if (kind == Kind::kSqlite) return absl::StrCat("sqlite:", sqlite_dir);
  return absl::StrCat("etcd:", absl::StrJoin(etcd.client.endpoints, ","), etcd.prefix);
}

absl::StatusOr<StoreLocation> ParseStoreLocation(absl::string_view arg, absl::string_view spec) {
  StoreLocation at;
  if (absl::ConsumePrefix(&spec, "sqlite:")) {
    if (spec.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(arg, ": sqlite: needs the store's data dir (sqlite:/var/lib/cosched)"));
    }
    at.kind = StoreLocation::Kind::kSqlite;
    at.sqlite_dir = std::string(spec);
    return at;
  }
  if (absl::ConsumePrefix(&spec, "etcd:")) {
    const size_t slash = spec.find('/');
    if (slash == absl::string_view::npos || slash == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          arg, ": etcd location '", spec,
          "' must be HOST:PORT[,HOST:PORT...]/PREFIX (e.g. etcd:127.0.0.1:2379/cosched)"));
    }
    at.kind = StoreLocation::Kind::kEtcd;
    at.etcd.prefix = std::string(spec.substr(slash));
    RETURN_IF_ERROR(CheckPrefix(arg, at.etcd.prefix));
    for (absl::string_view endpoint : absl::StrSplit(spec.substr(0, slash), ',')) {
      const size_t colon = endpoint.rfind(':');
      int port = 0;
      if (colon == absl::string_view::npos || colon == 0 ||
          !absl::SimpleAtoi(endpoint.substr(colon + 1), &port) || port < 1 || port > 65535) {
        return absl::InvalidArgumentError(absl::StrCat(
            arg, ": etcd endpoint '", endpoint, "' must be HOST:PORT with a port of 1-65535"));
      }
      at.etcd.client.endpoints.emplace_back(endpoint);
    }
    return at;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      arg, ": store location '", spec,
      "' must begin with sqlite: (sqlite:DIR) or etcd: (etcd:HOST:PORT[,HOST:PORT]/PREFIX)"));
}

absl::StatusOr<ToolReport> BackupStore(const StoreLocation& from, const std::string& file) {
  if (file.empty()) return absl::InvalidArgumentError("backup file name is empty");
  return from.kind == StoreLocation::Kind::kSqlite ? BackupSqlite(from, file)
                                                   : BackupEtcd(from, file);
}

absl::StatusOr<ToolReport> RestoreStore(const std::string& file, const StoreLocation& to,
                                        const RestoreOptions& options) {
  ASSIGN_OR_RETURN(std::string start, ReadBackupFile(file, 32));
  const bool sqlite = absl::StartsWith(start, kSqliteMagic);
  const bool etcd = absl::StartsWith(start, kEtcdMagic);
  if (!sqlite && !etcd) {
    return Corrupt(file, "it begins with neither an SQLite header nor the etcd backup's magic");
  }
  if (sqlite != (to.kind == StoreLocation::Kind::kSqlite)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "backup file ", file, " is of a", sqlite ? "n SQLite" : "n etcd", " store and ",
        to.Describe(), " is not: restore it into its own kind (then `csd store migrate` "
        "copies SQLite into etcd)"));
  }
  if (sqlite) return RestoreSqlite(file, to, options);
  ASSIGN_OR_RETURN(std::string data, ReadBackupFile(file, -1));
  return RestoreEtcd(file, data, to, options);
}

}  // namespace cosched::store
