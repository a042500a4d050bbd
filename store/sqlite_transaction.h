// Internal to cosched_store: SqliteTransaction, the Transaction that
// SqliteStore hands to write and read functions, over one SQLite connection,
// and WriteState, what one write function did.
#ifndef COSCHED_STORE_SQLITE_TRANSACTION_H_
#define COSCHED_STORE_SQLITE_TRANSACTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "store/sqlite_db.h"
#include "store/store.h"

namespace cosched::store {

// What one write function did, kept apart so that it can be dropped when the
// function fails.
struct WriteState {
  explicit WriteState(int64_t* allocated) : allocated_revision(allocated) {}

  int64_t* allocated_revision;  // the store's, shared by the batch
  int64_t revision = 0;         // 0 until WriteRevision
  std::vector<std::string> changed_hosts;
  int64_t change_rows = 0;
  int64_t audit_rows = 0;  // audit records appended
};

// A transaction on one connection; read-only when `write` is null. Lives for
// one call of a TxnFn, on that call's thread.
class SqliteTransaction final : public Transaction {
 public:
  SqliteTransaction(SqliteDb& db, WriteState* write) : db_(db), write_(write) {}

  absl::StatusOr<int64_t> WriteRevision() override;
  absl::StatusOr<int64_t> ReadRevision() override;
  absl::StatusOr<std::optional<v1::VM>> GetVm(absl::string_view vm_id) override;
  absl::Status PutVm(const v1::VM& vm) override;
  absl::Status DeleteVm(absl::string_view vm_id) override;
  absl::StatusOr<std::vector<v1::VM>> ListVms(const VmFilter& filter,
                                              const Page& page) override;
  absl::StatusOr<std::optional<v1::TenantPolicy>> GetTenantPolicy(
      absl::string_view tenant_id) override;
  absl::Status PutTenantPolicy(const v1::TenantPolicy& policy) override;
  absl::StatusOr<std::vector<v1::TenantPolicy>> ListTenantPolicies(
      const Page& page) override;
  absl::StatusOr<std::optional<v1::Host>> GetHost(
      absl::string_view host_id) override;
  absl::Status PutHost(const v1::Host& host) override;
  absl::Status DeleteHost(absl::string_view host_id) override;
  absl::StatusOr<std::vector<v1::Host>> ListHosts(const Page& page) override;
  absl::Status PutObservation(absl::string_view host_id,
                              const v1::VMObservation& vm) override;
  absl::Status DeleteObservation(absl::string_view host_id,
                                 absl::string_view vm_id) override;
  absl::StatusOr<std::vector<v1::VMObservation>> ListHostObservations(
      absl::string_view host_id) override;
  absl::StatusOr<std::optional<Observation>> FindObservation(
      absl::string_view key) override;
  absl::StatusOr<std::vector<Observation>> ListObservations(
      absl::string_view key) override;
  absl::Status RecordChange(absl::string_view host_id,
                            absl::string_view vm_id) override;
  absl::StatusOr<HostChanges> ChangesSince(absl::string_view host_id,
                                           int64_t revision) override;
  // The store has one writer, this process: it always leads.
  absl::StatusOr<std::optional<v1::Rollout>> GetRollout() override;
  absl::Status PutRollout(const v1::Rollout& rollout) override;
  absl::Status RequireLeadership() override { return absl::OkStatus(); }
  absl::Status AppendAudit(const v1::AuditRecord& record) override;
  absl::StatusOr<std::vector<v1::AuditRecord>> ListAudit(
      const AuditFilter& filter, int64_t before_sequence, int limit) override;
  absl::StatusOr<std::vector<v1::AuditRecord>> ListAuditAfter(int64_t after_sequence,
                                                              int limit) override;

 private:
  // Keeps vm_presence equal to vm.presence (no rows for a VM without one).
  absl::Status PutPresence(const v1::VM& vm);
  absl::StatusOr<std::vector<v1::VM>> ListVmsReportedOn(absl::string_view host_id,
                                                        const Page& page);
  // The VMs of a query whose columns are (vm_id, record).
  absl::StatusOr<std::vector<v1::VM>> ReadVms(SqliteQuery& q);

  absl::Status RequireWrite(absl::string_view op) const;

  SqliteDb& db_;
  WriteState* write_;
};

}  // namespace cosched::store

#endif  // COSCHED_STORE_SQLITE_TRANSACTION_H_
