// csd store migrate: a SQLite store copied into an empty etcd prefix
// (store/store_tools.h), through EtcdStore's own write functions.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "cosched/store/etcd_records.pb.h"
#include "etcd/client.h"
#include "store/etcd_store.h"
#include "store/sqlite_db.h"
#include "store/sqlite_schema.h"
#include "store/store_tools.h"
#include "store/store_tools_internal.h"

namespace cosched::store {
namespace {

// Everything a SQLite store holds, read in one snapshot.
struct SqliteContents {
  int64_t revision = 0;
  std::vector<v1::VM> vms;
  std::vector<v1::TenantPolicy> policies;
  std::vector<v1::Host> hosts;
  // Each host's report, oldest report first.
  std::vector<std::pair<std::string, std::vector<v1::VMObservation>>> reports;
  // host_id, vm_id, in revision order.
  std::vector<std::tuple<int64_t, std::string, std::string>> changes;
  std::vector<v1::AuditRecord> audit;  // oldest first
  // At most one: the current staged rollout.
  std::vector<v1::Rollout> rollout;
};

template <typename Message>
absl::Status ReadRecords(SqliteDb& db, absl::string_view sql, absl::string_view kind,
                         std::vector<Message>& out) {
  ASSIGN_OR_RETURN(SqliteQuery q, db.Query(sql, absl::StrCat("read ", kind)));
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return absl::OkStatus();
    Message message;
    if (!message.ParseFromArray(q.ColumnBlob(1).data(),
                                static_cast<int>(q.ColumnBlob(1).size()))) {
      return absl::DataLossError(absl::StrCat("store at ", db.path(), ": ", kind, " '",
                                              q.ColumnText(0), "' does not parse"));
    }
    out.push_back(std::move(message));
  }
}

absl::StatusOr<SqliteContents> ReadSqlite(SqliteDb& db) {
  SqliteContents c;
  ASSIGN_OR_RETURN(int64_t version, ReadMeta(db, "schema_version"));
  if (version != kLatestSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SQLite store ", db.path(), " has schema version ", version, ", not ",
        kLatestSchemaVersion, ": start this release's csd on it once to upgrade it"));
  }
  ASSIGN_OR_RETURN(c.revision, ReadMeta(db, "revision"));
  RETURN_IF_ERROR(ReadRecords(db, "SELECT vm_id, record FROM vms ORDER BY vm_id", "VM", c.vms));
  RETURN_IF_ERROR(ReadRecords(db, "SELECT tenant_id, record FROM tenant_policies",
                              "tenant policy", c.policies));
  RETURN_IF_ERROR(ReadRecords(db, "SELECT host_id, record FROM hosts", "host", c.hosts));
  RETURN_IF_ERROR(ReadRecords(db, "SELECT slot, record FROM rollout", "rollout", c.rollout));
  RETURN_IF_ERROR(ReadRecords(db, "SELECT sequence, record FROM audit ORDER BY sequence",
                              "audit record", c.audit));
  {
    // A report's rows share its seq; each VM is a row under its vm_id (and
    // another under its UUID, the same observation).
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db.Query("SELECT host_id, seq, key, observation FROM observations "
                              "ORDER BY seq, host_id, key",
                              "read observations"));
    std::map<std::string, size_t> index;
    while (true) {
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      v1::VMObservation vm;
      if (!vm.ParseFromArray(q.ColumnBlob(3).data(), static_cast<int>(q.ColumnBlob(3).size()))) {
        return absl::DataLossError(absl::StrCat("store at ", db.path(), ": observation '",
                                                q.ColumnText(2), "' does not parse"));
      }
      const std::string key(q.ColumnText(2));
      if (!vm.vm_id().empty() && key != vm.vm_id()) continue;  // its UUID's row
      const std::string host(q.ColumnText(0));
      auto [it, added] = index.emplace(host, c.reports.size());
      if (added) c.reports.emplace_back(host, std::vector<v1::VMObservation>{});
      c.reports[it->second].second.push_back(std::move(vm));
    }
  }
  {
    ASSIGN_OR_RETURN(SqliteQuery q, db.Query("SELECT revision, host_id, vm_id FROM changes "
                                             "ORDER BY revision, host_id, vm_id",
                                             "read the change log"));
    while (true) {
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      c.changes.emplace_back(q.ColumnInt(0), std::string(q.ColumnText(1)),
                             std::string(q.ColumnText(2)));
    }
  }
  return c;
}

// Writes `items` through `store`, `per_write` to a write function, in order.
template <typename Item>
absl::Status WriteInChunks(Store& store, const std::vector<Item>& items, size_t per_write,
                           const std::function<absl::Status(Transaction&, const Item&)>& put) {
  for (size_t begin = 0; begin < items.size(); begin += per_write) {
    const size_t end = std::min(items.size(), begin + per_write);
    RETURN_IF_ERROR(store.WriteSync([&](Transaction& txn) -> absl::Status {
      for (size_t i = begin; i < end; ++i) RETURN_IF_ERROR(put(txn, items[i]));
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ToolReport> MigrateStore(const StoreLocation& from, const StoreLocation& to,
                                        const MigrateOptions& options) {
  if (from.kind != StoreLocation::Kind::kSqlite || to.kind != StoreLocation::Kind::kEtcd) {
    return absl::InvalidArgumentError(absl::StrCat(
        "migrate copies a SQLite store into etcd: --from must be sqlite:DIR and --to "
        "etcd:..., not ", from.Describe(), " and ", to.Describe()));
  }
  SqliteContents contents;
  {
    ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db,
                     internal::OpenExisting(internal::DbPath(from.sqlite_dir), /*read_only=*/true));
    RETURN_IF_ERROR(db->Exec("BEGIN", "begin the read"));
    ASSIGN_OR_RETURN(contents, ReadSqlite(*db));
    RETURN_IF_ERROR(db->Exec("COMMIT", "end the read"));
  }
  ASSIGN_OR_RETURN(internal::EtcdTarget target, internal::ConnectEtcd(to));
  RETURN_IF_ERROR(internal::ClaimEmptyPrefix(target, options.replace));
  // Everything after the marker: a failure leaves a half-written prefix.
  auto copy = [&]() -> absl::StatusOr<ToolReport> {
    {
      EtcdStoreOptions store_options = to.etcd;
      store_options.ignore_restore_marker = true;
      ASSIGN_OR_RETURN(std::unique_ptr<EtcdStore> store, EtcdStore::Open(store_options));
      // Small write functions: each must fit one etcd Txn on its own.
      constexpr size_t kPerWrite = 32;
      RETURN_IF_ERROR(WriteInChunks<v1::TenantPolicy>(
          *store, contents.policies, kPerWrite,
          [](Transaction& txn, const v1::TenantPolicy& p) { return txn.PutTenantPolicy(p); }));
      RETURN_IF_ERROR(WriteInChunks<v1::Rollout>(
          *store, contents.rollout, 1,
          [](Transaction& txn, const v1::Rollout& r) { return txn.PutRollout(r); }));
      RETURN_IF_ERROR(WriteInChunks<v1::Host>(
          *store, contents.hosts, kPerWrite,
          [](Transaction& txn, const v1::Host& h) { return txn.PutHost(h); }));
      RETURN_IF_ERROR(WriteInChunks<v1::VM>(
          *store, contents.vms, kPerWrite,
          [](Transaction& txn, const v1::VM& vm) { return txn.PutVm(vm); }));
      using Report = std::pair<std::string, std::vector<v1::VMObservation>>;
      RETURN_IF_ERROR(WriteInChunks<Report>(
          *store, contents.reports, 1, [](Transaction& txn, const Report& r) {
            return ReplaceObservations(txn, r.first, r.second).status();
          }));
      // One revision's changes stay together, and a later revision is never
      // written before an earlier one.
      using Change = std::tuple<int64_t, std::string, std::string>;
      std::vector<std::vector<Change>> by_revision;
      for (const Change& change : contents.changes) {
        if (by_revision.empty() || std::get<0>(by_revision.back().front()) != std::get<0>(change)) {
          by_revision.emplace_back();
        }
        by_revision.back().push_back(change);
      }
      RETURN_IF_ERROR(WriteInChunks<std::vector<Change>>(
          *store, by_revision, 1, [](Transaction& txn, const std::vector<Change>& changes) {
            for (const auto& change : changes) {
              RETURN_IF_ERROR(txn.RecordChange(std::get<1>(change), std::get<2>(change)));
            }
            return absl::OkStatus();
          }));
      RETURN_IF_ERROR(WriteInChunks<v1::AuditRecord>(
          *store, contents.audit, kPerWrite,
          [](Transaction& txn, const v1::AuditRecord& r) { return txn.AppendAudit(r); }));
    }
    ASSIGN_OR_RETURN(etcd::RangeResult meta_kv,
                     target.client->Range(internal::Under(target.prefix, "meta"), ""));
    EtcdMeta meta;
    if (!meta_kv.kvs.empty() && !meta.ParseFromString(meta_kv.kvs[0].value())) {
      return absl::DataLossError(absl::StrCat("etcd store: value of key ", meta_kv.kvs[0].key(),
                                              " does not parse as the store's metadata"));
    }
    // Agents hold SQLite revisions, which mean nothing in etcd's history.
    ASSIGN_OR_RETURN(auto finished, internal::FinishEtcd(target, meta, contents.revision + 1));
    const int64_t items = static_cast<int64_t>(
        contents.vms.size() + contents.policies.size() + contents.hosts.size() +
        contents.reports.size() + contents.changes.size() + contents.audit.size() +
        contents.rollout.size());
    return ToolReport{finished.first, items, finished.second};
  };
  absl::StatusOr<ToolReport> copied = copy();
  if (!copied.ok()) return internal::HalfWritten(target, copied.status());
  return copied;
}

}  // namespace cosched::store
