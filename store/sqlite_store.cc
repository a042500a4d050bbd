#include "store/sqlite_store.h"

#include <glog/logging.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "store/sqlite_db.h"

namespace cosched::store {
namespace {

constexpr char kDbFileName[] = "cosched.db";
constexpr size_t kMaxIdleReaders = 8;
constexpr int kMaxPageLimit = 1000;

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
};
constexpr int kLatestSchemaVersion =
    static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM || err == EROFS) {
    return absl::PermissionDeniedError(message);
  }
  return absl::UnavailableError(message);
}

// Creates the data dir with mode 0700 (its parents with the default mode)
// and checks that the store can create its files there.
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

// Refuses a file that SQLite cannot read as a sound database, rather than
// risk starting over on an empty store.
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

template <typename Message>
absl::StatusOr<Message> ParseRecord(absl::string_view blob,
                                    absl::string_view kind,
                                    absl::string_view key, const SqliteDb& db) {
  Message message;
  if (!message.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) {
    return absl::DataLossError(absl::StrCat("store at ", db.path(),
                                            " is corrupt: ", kind, " record ",
                                            key, " does not parse"));
  }
  return message;
}

template <typename Message>
absl::StatusOr<std::string> Serialize(const Message& message,
                                      absl::string_view kind) {
  std::string out;
  if (!message.SerializeToString(&out)) {
    return absl::InternalError(
        absl::StrCat("cannot serialize ", kind, " record"));
  }
  return out;
}

int ClampLimit(int limit) { return std::clamp(limit, 1, kMaxPageLimit); }

// What one write function did, kept apart so that it can be dropped when the
// function fails.
struct WriteState {
  explicit WriteState(int64_t* allocated) : allocated_revision(allocated) {}

  int64_t* allocated_revision;  // the store's, shared by the batch
  int64_t revision = 0;         // 0 until WriteRevision
  std::vector<std::string> changed_hosts;
  int64_t change_rows = 0;
};

// A transaction on one connection; read-only when `write` is null. Lives for
// one call of a TxnFn, on that call's thread.
class SqliteTransaction final : public Transaction {
 public:
  SqliteTransaction(SqliteDb& db, WriteState* write) : db_(db), write_(write) {}

  absl::StatusOr<int64_t> WriteRevision() override {
    RETURN_IF_ERROR(RequireWrite("WriteRevision"));
    if (write_->revision == 0) {
      int64_t revision = *write_->allocated_revision + 1;
      // Kept in meta as the function goes, so that its own later reads
      // (ChangesSince) and a rollback of it stay consistent.
      ASSIGN_OR_RETURN(
          SqliteQuery q,
          db_.Query("UPDATE meta SET value = ?1 WHERE key = 'revision'",
                    "write store revision"));
      q.BindInt(1, revision);
      RETURN_IF_ERROR(q.Run());
      *write_->allocated_revision = revision;
      write_->revision = revision;
    }
    return write_->revision;
  }

  absl::StatusOr<std::optional<v1::VM>> GetVm(
      absl::string_view vm_id) override {
    ASSIGN_OR_RETURN(
        SqliteQuery q,
        db_.Query("SELECT record FROM vms WHERE vm_id = ?1", "get VM"));
    q.BindText(1, vm_id);
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return std::optional<v1::VM>();
    ASSIGN_OR_RETURN(v1::VM vm,
                     ParseRecord<v1::VM>(q.ColumnBlob(0), "VM", vm_id, db_));
    return std::optional<v1::VM>(std::move(vm));
  }

  absl::Status PutVm(const v1::VM& vm) override {
    RETURN_IF_ERROR(RequireWrite("PutVm"));
    if (vm.vm_id().empty())
      return absl::InvalidArgumentError("PutVm: vm_id is empty");
    std::string record;
    if (vm.has_enforcement()) {
      v1::VM stored = vm;
      stored.clear_enforcement();
      ASSIGN_OR_RETURN(record, Serialize(stored, "VM"));
    } else {
      ASSIGN_OR_RETURN(record, Serialize(vm, "VM"));
    }
    ASSIGN_OR_RETURN(
        SqliteQuery q,
        db_.Query("INSERT OR REPLACE INTO vms "
                  "(vm_id, tenant_id, host_id, trust_group, record) "
                  "VALUES (?1, ?2, ?3, ?4, ?5)",
                  "put VM"));
    q.BindText(1, vm.vm_id());
    q.BindText(2, vm.tenant_id());
    q.BindText(3, vm.host_id());
    q.BindText(4, vm.assignment().trust_group());
    q.BindBlob(5, record);
    return q.Run();
  }

  absl::Status DeleteVm(absl::string_view vm_id) override {
    RETURN_IF_ERROR(RequireWrite("DeleteVm"));
    ASSIGN_OR_RETURN(
        SqliteQuery q,
        db_.Query("DELETE FROM vms WHERE vm_id = ?1", "delete VM"));
    q.BindText(1, vm_id);
    RETURN_IF_ERROR(q.Run());
    if (db_.Changes() == 0) {
      return absl::NotFoundError(absl::StrCat("VM ", vm_id, " not found"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<v1::VM>> ListVms(const VmFilter& filter,
                                              const Page& page) override {
    // At most eight distinct statements, each cached once.
    std::string sql = "SELECT vm_id, record FROM vms WHERE vm_id > ?";
    std::vector<absl::string_view> args = {page.after};
    if (!filter.tenant_id.empty()) {
      sql += " AND tenant_id = ?";
      args.push_back(filter.tenant_id);
    }
    if (!filter.host_id.empty()) {
      sql += " AND host_id = ?";
      args.push_back(filter.host_id);
    }
    if (!filter.trust_group.empty()) {
      sql += " AND trust_group = ?";
      args.push_back(filter.trust_group);
    }
    sql += " ORDER BY vm_id LIMIT ?";
    ASSIGN_OR_RETURN(SqliteQuery q, db_.Query(sql, "list VMs"));
    int index = 1;
    for (absl::string_view arg : args) q.BindText(index++, arg);
    q.BindInt(index, ClampLimit(page.limit));
    std::vector<v1::VM> vms;
    while (true) {
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      ASSIGN_OR_RETURN(v1::VM vm, ParseRecord<v1::VM>(q.ColumnBlob(1), "VM",
                                                      q.ColumnText(0), db_));
      vms.push_back(std::move(vm));
    }
    return vms;
  }

  absl::StatusOr<std::optional<v1::TenantPolicy>> GetTenantPolicy(
      absl::string_view tenant_id) override {
    ASSIGN_OR_RETURN(
        SqliteQuery q,
        db_.Query("SELECT record FROM tenant_policies WHERE tenant_id = ?1",
                  "get tenant policy"));
    q.BindText(1, tenant_id);
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return std::optional<v1::TenantPolicy>();
    ASSIGN_OR_RETURN(v1::TenantPolicy policy,
                     ParseRecord<v1::TenantPolicy>(
                         q.ColumnBlob(0), "tenant policy", tenant_id, db_));
    return std::optional<v1::TenantPolicy>(std::move(policy));
  }

  absl::Status PutTenantPolicy(const v1::TenantPolicy& policy) override {
    RETURN_IF_ERROR(RequireWrite("PutTenantPolicy"));
    if (policy.tenant_id().empty()) {
      return absl::InvalidArgumentError("PutTenantPolicy: tenant_id is empty");
    }
    ASSIGN_OR_RETURN(std::string record, Serialize(policy, "tenant policy"));
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db_.Query("INSERT OR REPLACE INTO tenant_policies "
                               "(tenant_id, record) VALUES (?1, ?2)",
                               "put tenant policy"));
    q.BindText(1, policy.tenant_id());
    q.BindBlob(2, record);
    return q.Run();
  }

  absl::StatusOr<std::vector<v1::TenantPolicy>> ListTenantPolicies(
      const Page& page) override {
    ASSIGN_OR_RETURN(
        SqliteQuery q,
        db_.Query("SELECT tenant_id, record FROM tenant_policies "
                  "WHERE tenant_id > ?1 ORDER BY tenant_id LIMIT ?2",
                  "list tenant policies"));
    q.BindText(1, page.after);
    q.BindInt(2, ClampLimit(page.limit));
    std::vector<v1::TenantPolicy> policies;
    while (true) {
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      ASSIGN_OR_RETURN(
          v1::TenantPolicy policy,
          ParseRecord<v1::TenantPolicy>(q.ColumnBlob(1), "tenant policy",
                                        q.ColumnText(0), db_));
      policies.push_back(std::move(policy));
    }
    return policies;
  }

  absl::StatusOr<std::optional<v1::Host>> GetHost(
      absl::string_view host_id) override {
    ASSIGN_OR_RETURN(
        SqliteQuery q,
        db_.Query("SELECT record FROM hosts WHERE host_id = ?1", "get host"));
    q.BindText(1, host_id);
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return std::optional<v1::Host>();
    ASSIGN_OR_RETURN(v1::Host host, ParseRecord<v1::Host>(
                                        q.ColumnBlob(0), "host", host_id, db_));
    return std::optional<v1::Host>(std::move(host));
  }

  absl::Status PutHost(const v1::Host& host) override {
    RETURN_IF_ERROR(RequireWrite("PutHost"));
    if (host.host_id().empty())
      return absl::InvalidArgumentError("PutHost: host_id is empty");
    std::string record;
    // A stored `connected` would outlive the stream it describes.
    if (host.connected()) {
      v1::Host stored = host;
      stored.clear_connected();
      ASSIGN_OR_RETURN(record, Serialize(stored, "host"));
    } else {
      ASSIGN_OR_RETURN(record, Serialize(host, "host"));
    }
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db_.Query("INSERT OR REPLACE INTO hosts (host_id, record) "
                               "VALUES (?1, ?2)",
                               "put host"));
    q.BindText(1, host.host_id());
    q.BindBlob(2, record);
    return q.Run();
  }

  absl::StatusOr<std::vector<v1::Host>> ListHosts(const Page& page) override {
    ASSIGN_OR_RETURN(
        SqliteQuery q,
        db_.Query("SELECT host_id, record FROM hosts WHERE host_id > ?1 "
                  "ORDER BY host_id LIMIT ?2",
                  "list hosts"));
    q.BindText(1, page.after);
    q.BindInt(2, ClampLimit(page.limit));
    std::vector<v1::Host> hosts;
    while (true) {
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      ASSIGN_OR_RETURN(
          v1::Host host,
          ParseRecord<v1::Host>(q.ColumnBlob(1), "host", q.ColumnText(0), db_));
      hosts.push_back(std::move(host));
    }
    return hosts;
  }

  absl::Status ReplaceObservations(
      absl::string_view host_id,
      const std::vector<v1::VMObservation>& vms) override {
    RETURN_IF_ERROR(RequireWrite("ReplaceObservations"));
    if (host_id.empty()) {
      return absl::InvalidArgumentError(
          "ReplaceObservations: host_id is empty");
    }
    int64_t seq = 0;
    {
      ASSIGN_OR_RETURN(
          SqliteQuery q,
          db_.Query("UPDATE meta SET value = value + 1 "
                    "WHERE key = 'observation_seq' RETURNING value",
                    "number observation report"));
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (row) seq = q.ColumnInt(0);
      RETURN_IF_ERROR(q.Run());
    }
    {
      ASSIGN_OR_RETURN(SqliteQuery q,
                       db_.Query("DELETE FROM observations WHERE host_id = ?1",
                                 "delete observations"));
      q.BindText(1, host_id);
      RETURN_IF_ERROR(q.Run());
    }
    for (const v1::VMObservation& vm : vms) {
      ASSIGN_OR_RETURN(std::string record,
                       Serialize(vm.enforcement(), "enforcement"));
      for (const std::string* key : {&vm.vm_id(), &vm.uuid()}) {
        if (key->empty()) continue;
        ASSIGN_OR_RETURN(SqliteQuery q,
                         db_.Query("INSERT OR REPLACE INTO observations "
                                   "(key, host_id, seq, enforcement) "
                                   "VALUES (?1, ?2, ?3, ?4)",
                                   "put observation"));
        q.BindText(1, *key);
        q.BindText(2, host_id);
        q.BindInt(3, seq);
        q.BindBlob(4, record);
        RETURN_IF_ERROR(q.Run());
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<Observation>> FindObservation(
      absl::string_view key) override {
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db_.Query("SELECT host_id, enforcement FROM observations "
                               "WHERE key = ?1 ORDER BY seq DESC LIMIT 1",
                               "find observation"));
    q.BindText(1, key);
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return std::optional<Observation>();
    Observation observation;
    observation.host_id = std::string(q.ColumnText(0));
    ASSIGN_OR_RETURN(observation.enforcement,
                     ParseRecord<v1::VMEnforcement>(q.ColumnBlob(1),
                                                    "observation", key, db_));
    return std::optional<Observation>(std::move(observation));
  }

  absl::Status RecordChange(absl::string_view host_id,
                            absl::string_view vm_id) override {
    RETURN_IF_ERROR(RequireWrite("RecordChange"));
    ASSIGN_OR_RETURN(int64_t revision, WriteRevision());
    // No agent can be told about a VM that is on no host.
    if (host_id.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(
        SqliteQuery q,
        db_.Query("INSERT OR IGNORE INTO changes (revision, host_id, vm_id) "
                  "VALUES (?1, ?2, ?3)",
                  "record change"));
    q.BindInt(1, revision);
    q.BindText(2, host_id);
    q.BindText(3, vm_id);
    RETURN_IF_ERROR(q.Run());
    write_->change_rows += db_.Changes();
    auto& hosts = write_->changed_hosts;
    if (std::find(hosts.begin(), hosts.end(), host_id) == hosts.end()) {
      hosts.emplace_back(host_id);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<HostChanges> ChangesSince(absl::string_view host_id,
                                           int64_t revision) override {
    HostChanges changes;
    // Both read in this transaction's snapshot, with the log itself.
    ASSIGN_OR_RETURN(int64_t current, ReadMeta(db_, "revision"));
    ASSIGN_OR_RETURN(int64_t horizon, ReadMeta(db_, "compacted_revision"));
    if (revision > current || revision < horizon) return changes;
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db_.Query("SELECT DISTINCT vm_id FROM changes "
                               "WHERE host_id = ?1 AND revision > ?2",
                               "read changes"));
    q.BindText(1, host_id);
    q.BindInt(2, revision);
    while (true) {
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      changes.vm_ids.emplace_back(q.ColumnText(0));
    }
    changes.complete = true;
    return changes;
  }

 private:
  absl::Status RequireWrite(absl::string_view op) const {
    if (write_ != nullptr) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(op, " is not allowed in a read-only transaction"));
  }

  SqliteDb& db_;
  WriteState* write_;
};

// What every write of a batch that could not be committed gets. Only a full
// disk is told apart: the caller can do nothing else but retry later.
absl::Status CommitFailure(const absl::Status& cause) {
  if (absl::IsResourceExhausted(cause)) return cause;
  return absl::UnavailableError(cause.message());
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
  store->writer_ = std::thread([s = store.get()] { s->WriterLoop(); });
  return store;
}

SqliteStore::SqliteStore(SqliteStoreOptions options, std::string db_path,
                         std::unique_ptr<SqliteDb> writer)
    : options_(std::move(options)),
      db_path_(std::move(db_path)),
      writer_db_(std::move(writer)) {}

SqliteStore::~SqliteStore() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void SqliteStore::Write(TxnFn fn, DoneFn done) {
  bool accepted = false;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    // Done callbacks may chain writes while the destructor drains the queue.
    if (!stopping_ || std::this_thread::get_id() == writer_.get_id()) {
      queue_.push_back(PendingWrite{std::move(fn), std::move(done)});
      accepted = true;
    }
  }
  if (accepted) {
    queue_cv_.notify_one();
  } else if (done) {
    done(absl::UnavailableError(
        absl::StrCat("store at ", db_path_, " is closing")));
  }
}

void SqliteStore::SetCommitObserver(CommitObserver observer) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  observer_ = std::move(observer);
}

int64_t SqliteStore::CurrentRevision() const {
  return committed_revision_.load(std::memory_order_acquire);
}

void SqliteStore::WriterLoop() {
  while (true) {
    std::vector<PendingWrite> batch;
    CommitObserver observer;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      size_t n =
          std::min(queue_.size(), static_cast<size_t>(options_.max_batch));
      batch.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      observer = observer_;
    }
    std::set<std::string> changed_hosts;
    bool committed = RunBatch(batch, changed_hosts);
    if (committed && !changed_hosts.empty() && observer) {
      observer(
          std::vector<std::string>(changed_hosts.begin(), changed_hosts.end()),
          CurrentRevision());
    }
  }
}

bool SqliteStore::RunBatch(std::vector<PendingWrite>& batch,
                           std::set<std::string>& changed_hosts) {
  SqliteDb& db = *writer_db_;
  std::vector<absl::Status> results(batch.size());
  const int64_t change_rows_before = change_rows_;
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
  if (batch_error.ok())
    batch_error = db.Run("COMMIT", "commit write transaction");

  if (!batch_error.ok()) {
    if (db.InTransaction()) {
      absl::Status undone = db.Exec("ROLLBACK", "roll back write transaction");
      LOG_IF(ERROR, !undone.ok()) << undone;
    }
    allocated_revision_ = committed_revision_.load();
    change_rows_ = change_rows_before;
    changed_hosts.clear();
    LOG_EVERY_N(ERROR, 100) << "store commit failed: " << batch_error;
    absl::Status failure = CommitFailure(batch_error);
    for (size_t i = 0; i < batch.size(); ++i) {
      // A write that failed on its own keeps its error: it is no less true.
      if (batch[i].done) batch[i].done(results[i].ok() ? failure : results[i]);
    }
    return false;
  }

  committed_revision_.store(allocated_revision_, std::memory_order_release);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].done) batch[i].done(std::move(results[i]));
  }
  return true;
}

absl::Status SqliteStore::MaybeCompact() {
  // The slack keeps compaction to one query every retention/16 changes,
  // instead of a delete on every commit once the log is full.
  const int64_t retention = options_.changelog_retention;
  if (change_rows_ <= retention + retention / 16) return absl::OkStatus();
  SqliteDb& db = *writer_db_;
  RETURN_IF_ERROR(db.Exec("SAVEPOINT compact", "begin change log compaction"));
  int64_t deleted = 0;
  absl::Status status = [&]() -> absl::Status {
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
  }();
  if (status.ok()) {
    status = db.Exec("RELEASE compact", "end change log compaction");
    if (status.ok()) change_rows_ -= deleted;
  } else if (db.InTransaction()) {
    absl::Status undone = db.Exec("ROLLBACK TO compact; RELEASE compact",
                                  "undo change log compaction");
    LOG_IF(ERROR, !undone.ok()) << undone;
  }
  LOG_IF(WARNING, !status.ok()) << "change log compaction failed: " << status;
  return status;
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
