// SqliteTransaction: the reads and writes of the store's tables (VMs,
// tenant policies, hosts, observations, the change log, the audit trail)
// inside one
// transaction on one SQLite connection.
#include "store/sqlite_transaction.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "store/sqlite_schema.h"

namespace cosched::store {
namespace {

constexpr int kMaxPageLimit = 1000;

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

// Observations are rows (key, host_id): one under the VM's id and, when
// it has one, one under its UUID, both with the same serialized
// observation, so the UUID's row is told from another VM's by its bytes.
// seq numbers the writes, newest highest.
struct StoredObservation {
  std::string blob;
  v1::VMObservation vm;
};

absl::StatusOr<std::optional<StoredObservation>> ReadObservation(
    SqliteDb& db, absl::string_view host_id, absl::string_view vm_id) {
  ASSIGN_OR_RETURN(SqliteQuery q,
                   db.Query("SELECT observation FROM observations "
                            "WHERE key = ?1 AND host_id = ?2",
                            "read observation"));
  q.BindText(1, vm_id);
  q.BindText(2, host_id);
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<StoredObservation>();
  StoredObservation stored;
  stored.blob = std::string(q.ColumnBlob(0));
  ASSIGN_OR_RETURN(stored.vm,
                   ParseRecord<v1::VMObservation>(stored.blob, "observation", vm_id, db));
  // Another VM's row under its UUID, which is this name.
  if (stored.vm.vm_id() != vm_id) return std::optional<StoredObservation>();
  return std::optional<StoredObservation>(std::move(stored));
}

absl::Status DeleteObservationRows(SqliteDb& db, absl::string_view host_id,
                                   const StoredObservation& stored) {
  ASSIGN_OR_RETURN(SqliteQuery q,
                   db.Query("DELETE FROM observations WHERE host_id = ?1 "
                            "AND key IN (?2, ?3) AND observation = ?4",
                            "delete observation"));
  q.BindText(1, host_id);
  q.BindText(2, stored.vm.vm_id());
  q.BindText(3, stored.vm.uuid());
  q.BindBlob(4, stored.blob);
  return q.Run();
}

}  // namespace

absl::StatusOr<int64_t> SqliteTransaction::WriteRevision() {
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

absl::StatusOr<int64_t> SqliteTransaction::ReadRevision() {
  // The meta row is read in this transaction's snapshot; a write
  // transaction's WriteRevision updated it.
  return ReadMeta(db_, "revision");
}

absl::StatusOr<std::optional<v1::VM>> SqliteTransaction::GetVm(
    absl::string_view vm_id) {
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

absl::Status SqliteTransaction::PutVm(const v1::VM& vm) {
  RETURN_IF_ERROR(RequireWrite("PutVm"));
  if (vm.vm_id().empty())
    return absl::InvalidArgumentError("PutVm: vm_id is empty");
  const std::string& group = vm.assignment().trust_group();
  if (!group.empty() && !TrustGroupOfTenant(group, vm.tenant_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("PutVm: trust group '", group, "' of VM ", vm.vm_id(),
                     " does not begin with its tenant '", vm.tenant_id(), "/'"));
  }
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
  RETURN_IF_ERROR(q.Run());
  return PutPresence(vm);
}

absl::Status SqliteTransaction::PutPresence(const v1::VM& vm) {
  {
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db_.Query("DELETE FROM vm_presence WHERE vm_id = ?1",
                               "delete VM presence"));
    q.BindText(1, vm.vm_id());
    RETURN_IF_ERROR(q.Run());
  }
  for (const v1::VMPresence& p : vm.presence()) {
    if (p.host_id().empty()) continue;
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db_.Query("INSERT OR IGNORE INTO vm_presence (vm_id, host_id) "
                               "VALUES (?1, ?2)",
                               "put VM presence"));
    q.BindText(1, vm.vm_id());
    q.BindText(2, p.host_id());
    RETURN_IF_ERROR(q.Run());
  }
  return absl::OkStatus();
}

absl::Status SqliteTransaction::DeleteVm(absl::string_view vm_id) {
  RETURN_IF_ERROR(RequireWrite("DeleteVm"));
  ASSIGN_OR_RETURN(
      SqliteQuery q,
      db_.Query("DELETE FROM vms WHERE vm_id = ?1", "delete VM"));
  q.BindText(1, vm_id);
  RETURN_IF_ERROR(q.Run());
  if (db_.Changes() == 0) {
    return absl::NotFoundError(absl::StrCat("VM ", vm_id, " not found"));
  }
  v1::VM gone;
  gone.set_vm_id(std::string(vm_id));
  return PutPresence(gone);
}

absl::StatusOr<std::vector<v1::VM>> SqliteTransaction::ListVms(
    const VmFilter& filter, const Page& page) {
  if (!filter.reported_on.empty()) {
    if (!filter.tenant_id.empty() || !filter.host_id.empty() ||
        !filter.trust_group.empty()) {
      return absl::InvalidArgumentError(
          "ListVms: reported_on cannot be combined with other filters");
    }
    return ListVmsReportedOn(filter.reported_on, page);
  }
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
    // Through vms_by_tenant: a group's VMs are all of the tenant it names.
    absl::string_view tenant = TenantOfTrustGroup(filter.trust_group);
    if (!filter.tenant_id.empty() && filter.tenant_id != tenant) return std::vector<v1::VM>();
    if (filter.tenant_id.empty()) {
      sql += " AND tenant_id = ?";
      args.push_back(tenant);
    }
    sql += " AND trust_group = ?";
    args.push_back(filter.trust_group);
  }
  sql += " ORDER BY vm_id LIMIT ?";
  ASSIGN_OR_RETURN(SqliteQuery q, db_.Query(sql, "list VMs"));
  int index = 1;
  for (absl::string_view arg : args) q.BindText(index++, arg);
  q.BindInt(index, ClampLimit(page.limit));
  return ReadVms(q);
}

absl::StatusOr<std::optional<v1::TenantPolicy>>
SqliteTransaction::GetTenantPolicy(absl::string_view tenant_id) {
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

absl::Status SqliteTransaction::PutTenantPolicy(
    const v1::TenantPolicy& policy) {
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

absl::StatusOr<std::optional<v1::Rollout>> SqliteTransaction::GetRollout() {
  ASSIGN_OR_RETURN(SqliteQuery q,
                   db_.Query("SELECT record FROM rollout WHERE slot = 0", "get rollout"));
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<v1::Rollout>();
  ASSIGN_OR_RETURN(v1::Rollout rollout,
                   ParseRecord<v1::Rollout>(q.ColumnBlob(0), "rollout", "current", db_));
  return std::optional<v1::Rollout>(std::move(rollout));
}

absl::Status SqliteTransaction::PutRollout(const v1::Rollout& rollout) {
  RETURN_IF_ERROR(RequireWrite("PutRollout"));
  if (rollout.rollout_id().empty() && rollout.state() != v1::Rollout::STATE_UNSPECIFIED) {
    return absl::InvalidArgumentError("PutRollout: rollout_id is empty in a started rollout");
  }
  ASSIGN_OR_RETURN(std::string record, Serialize(rollout, "rollout"));
  ASSIGN_OR_RETURN(SqliteQuery q,
                   db_.Query("INSERT OR REPLACE INTO rollout (slot, record) VALUES (0, ?1)",
                             "put rollout"));
  q.BindBlob(1, record);
  return q.Run();
}

absl::StatusOr<std::vector<v1::TenantPolicy>>
SqliteTransaction::ListTenantPolicies(const Page& page) {
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

absl::StatusOr<std::optional<v1::Host>> SqliteTransaction::GetHost(
    absl::string_view host_id) {
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

absl::Status SqliteTransaction::PutHost(const v1::Host& host) {
  RETURN_IF_ERROR(RequireWrite("PutHost"));
  if (host.host_id().empty())
    return absl::InvalidArgumentError("PutHost: host_id is empty");
  std::string record;
  // A stored `connected` or `unplaceable_reason` would outlive the moment
  // it describes.
  if (host.connected() || !host.unplaceable_reason().empty()) {
    v1::Host stored = host;
    stored.clear_connected();
    stored.clear_unplaceable_reason();
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

absl::Status SqliteTransaction::DeleteHost(absl::string_view host_id) {
  RETURN_IF_ERROR(RequireWrite("DeleteHost"));
  ASSIGN_OR_RETURN(SqliteQuery q, db_.Query("DELETE FROM hosts WHERE host_id = ?1",
                                            "delete host"));
  q.BindText(1, host_id);
  RETURN_IF_ERROR(q.Run());
  if (db_.Changes() == 0) {
    return absl::NotFoundError(absl::StrCat("host ", host_id, " not found"));
  }
  ASSIGN_OR_RETURN(SqliteQuery observations,
                   db_.Query("DELETE FROM observations WHERE host_id = ?1",
                             "delete observations"));
  observations.BindText(1, host_id);
  return observations.Run();
}

absl::StatusOr<std::vector<v1::Host>> SqliteTransaction::ListHosts(
    const Page& page) {
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

absl::Status SqliteTransaction::PutObservation(absl::string_view host_id,
                                               const v1::VMObservation& vm) {
  RETURN_IF_ERROR(RequireWrite("PutObservation"));
  if (host_id.empty()) return absl::InvalidArgumentError("PutObservation: host_id is empty");
  if (vm.vm_id().empty()) return absl::InvalidArgumentError("PutObservation: vm_id is empty");
  ASSIGN_OR_RETURN(std::optional<StoredObservation> old, ReadObservation(db_, host_id, vm.vm_id()));
  if (old) RETURN_IF_ERROR(DeleteObservationRows(db_, host_id, *old));
  int64_t seq = 0;
  {
    ASSIGN_OR_RETURN(
        SqliteQuery q,
        db_.Query("UPDATE meta SET value = value + 1 "
                  "WHERE key = 'observation_seq' RETURNING value",
                  "number observation"));
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (row) seq = q.ColumnInt(0);
    RETURN_IF_ERROR(q.Run());
  }
  ASSIGN_OR_RETURN(std::string record, Serialize(vm, "observation"));
  // A VM whose UUID is another VM's name on the host is found by the UUID
  // only where it does not take that VM's row: the name wins.
  bool uuid_row = !vm.uuid().empty() && vm.uuid() != vm.vm_id();
  if (uuid_row) {
    ASSIGN_OR_RETURN(std::optional<StoredObservation> named,
                     ReadObservation(db_, host_id, vm.uuid()));
    uuid_row = !named.has_value();
  }
  for (const std::string* key : {&vm.vm_id(), &vm.uuid()}) {
    if (key->empty() || (key == &vm.uuid() && !uuid_row)) continue;
    ASSIGN_OR_RETURN(SqliteQuery q,
                     db_.Query("INSERT OR REPLACE INTO observations "
                               "(key, host_id, seq, observation) "
                               "VALUES (?1, ?2, ?3, ?4)",
                               "put observation"));
    q.BindText(1, *key);
    q.BindText(2, host_id);
    q.BindInt(3, seq);
    q.BindBlob(4, record);
    RETURN_IF_ERROR(q.Run());
  }
  return absl::OkStatus();
}

absl::Status SqliteTransaction::DeleteObservation(absl::string_view host_id,
                                                  absl::string_view vm_id) {
  RETURN_IF_ERROR(RequireWrite("DeleteObservation"));
  ASSIGN_OR_RETURN(std::optional<StoredObservation> old, ReadObservation(db_, host_id, vm_id));
  if (!old) {
    return absl::NotFoundError(
        absl::StrCat("host ", host_id, " has no observation of vm ", vm_id));
  }
  return DeleteObservationRows(db_, host_id, *old);
}

absl::StatusOr<std::vector<v1::VMObservation>> SqliteTransaction::ListHostObservations(
    absl::string_view host_id) {
  ASSIGN_OR_RETURN(SqliteQuery q,
                   db_.Query("SELECT key, observation FROM observations "
                             "WHERE host_id = ?1 ORDER BY key",
                             "list host observations"));
  q.BindText(1, host_id);
  std::vector<v1::VMObservation> all;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(v1::VMObservation vm,
                     ParseRecord<v1::VMObservation>(q.ColumnBlob(1), "observation",
                                                    q.ColumnText(0), db_));
    if (vm.vm_id() == q.ColumnText(0)) all.push_back(std::move(vm));  // not its UUID's row
  }
  return all;
}

absl::StatusOr<std::optional<Observation>> SqliteTransaction::FindObservation(
    absl::string_view key) {
  ASSIGN_OR_RETURN(SqliteQuery q,
                   db_.Query("SELECT host_id, observation FROM observations "
                             "WHERE key = ?1 ORDER BY seq DESC LIMIT 1",
                             "find observation"));
  q.BindText(1, key);
  ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<Observation>();
  Observation observation;
  observation.host_id = std::string(q.ColumnText(0));
  ASSIGN_OR_RETURN(observation.vm,
                   ParseRecord<v1::VMObservation>(q.ColumnBlob(1),
                                                  "observation", key, db_));
  return std::optional<Observation>(std::move(observation));
}

absl::StatusOr<std::vector<Observation>> SqliteTransaction::ListObservations(
    absl::string_view key) {
  ASSIGN_OR_RETURN(SqliteQuery q,
                   db_.Query("SELECT host_id, observation FROM observations "
                             "WHERE key = ?1 ORDER BY seq DESC",
                             "list observations"));
  q.BindText(1, key);
  std::vector<Observation> all;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    Observation observation;
    observation.host_id = std::string(q.ColumnText(0));
    ASSIGN_OR_RETURN(observation.vm,
                     ParseRecord<v1::VMObservation>(q.ColumnBlob(1),
                                                    "observation", key, db_));
    all.push_back(std::move(observation));
  }
  return all;
}

absl::Status SqliteTransaction::RecordChange(absl::string_view host_id,
                                             absl::string_view vm_id) {
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

absl::StatusOr<HostChanges> SqliteTransaction::ChangesSince(
    absl::string_view host_id, int64_t revision) {
  HostChanges changes;
  // Both read in this transaction's snapshot, with the log itself.
  ASSIGN_OR_RETURN(int64_t current, ReadRevision());
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
  changes.revision = current;
  return changes;
}

absl::Status SqliteTransaction::RequireWrite(absl::string_view op) const {
  if (write_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(op, " is not allowed in a read-only transaction"));
}

absl::Status SqliteTransaction::AppendAudit(const v1::AuditRecord& record) {
  RETURN_IF_ERROR(RequireWrite("AppendAudit"));
  if (record.who().empty() || record.method().empty()) {
    return absl::InvalidArgumentError("AppendAudit: who or method is empty");
  }
  v1::AuditRecord stored = record;
  stored.clear_sequence();  // the rowid is the sequence
  ASSIGN_OR_RETURN(std::string blob, Serialize(stored, "audit"));
  ASSIGN_OR_RETURN(SqliteQuery q,
                   db_.Query("INSERT INTO audit (time_unix_ns, who, subject, "
                             "record) VALUES (?1, ?2, ?3, ?4)",
                             "append audit record"));
  q.BindInt(1, record.time_unix_ns());
  q.BindText(2, record.who());
  q.BindText(3, record.subject());
  q.BindBlob(4, blob);
  RETURN_IF_ERROR(q.Run());
  ++write_->audit_rows;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::AuditRecord>> SqliteTransaction::ListAudit(
    const AuditFilter& filter, int64_t before_sequence, int limit) {
  ASSIGN_OR_RETURN(
      SqliteQuery q,
      db_.Query("SELECT sequence, record FROM audit "
                "WHERE (?1 = 0 OR sequence < ?1) AND (?2 = '' OR subject = ?2) "
                "AND (?3 = '' OR who = ?3) AND time_unix_ns >= ?4 "
                "ORDER BY sequence DESC LIMIT ?5",
                "list audit records"));
  q.BindInt(1, before_sequence);
  q.BindText(2, filter.subject);
  q.BindText(3, filter.who);
  q.BindInt(4, filter.since_unix_ns);
  q.BindInt(5, ClampLimit(limit));
  std::vector<v1::AuditRecord> records;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    int64_t sequence = q.ColumnInt(0);
    ASSIGN_OR_RETURN(v1::AuditRecord record,
                     ParseRecord<v1::AuditRecord>(q.ColumnBlob(1), "audit",
                                                  absl::StrCat(sequence), db_));
    record.set_sequence(sequence);
    records.push_back(std::move(record));
  }
  return records;
}

absl::StatusOr<std::vector<v1::AuditRecord>> SqliteTransaction::ListAuditAfter(
    int64_t after_sequence, int limit) {
  if (write_ != nullptr) {
    return absl::FailedPreconditionError("ListAuditAfter reads committed records: use Store::Read");
  }
  ASSIGN_OR_RETURN(SqliteQuery q,
                   db_.Query("SELECT sequence, record FROM audit WHERE sequence > ?1 "
                             "ORDER BY sequence LIMIT ?2",
                             "list audit records after a sequence"));
  q.BindInt(1, after_sequence);
  q.BindInt(2, ClampLimit(limit));
  std::vector<v1::AuditRecord> records;
  while (true) {
    ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    const int64_t sequence = q.ColumnInt(0);
    ASSIGN_OR_RETURN(v1::AuditRecord record,
                     ParseRecord<v1::AuditRecord>(q.ColumnBlob(1), "audit",
                                                  absl::StrCat(sequence), db_));
    record.set_sequence(sequence);
    records.push_back(std::move(record));
  }
  return records;
}

absl::StatusOr<std::vector<v1::VM>> SqliteTransaction::ReadVms(SqliteQuery& q) {
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

absl::StatusOr<std::vector<v1::VM>> SqliteTransaction::ListVmsReportedOn(
    absl::string_view host_id, const Page& page) {
  ASSIGN_OR_RETURN(
      SqliteQuery q,
      db_.Query("SELECT v.vm_id, v.record FROM vm_presence p "
                "JOIN vms v ON v.vm_id = p.vm_id "
                "WHERE p.host_id = ?1 AND p.vm_id > ?2 ORDER BY p.vm_id LIMIT ?3",
                "list VMs reported on a host"));
  q.BindText(1, host_id);
  q.BindText(2, page.after);
  q.BindInt(3, ClampLimit(page.limit));
  return ReadVms(q);
}

}  // namespace cosched::store
