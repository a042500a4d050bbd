// Internal to cosched_store: EtcdTransaction, the Transaction EtcdStore
// hands to write and read functions: reads at one etcd revision over the
// writes the function (and the batch before it) buffered.
#ifndef COSCHED_STORE_ETCD_TRANSACTION_H_
#define COSCHED_STORE_ETCD_TRANSACTION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cosched/store/etcd_records.pb.h"
#include "etcd/client.h"
#include "store/etcd_cache.h"
#include "store/etcd_replicas.h"
#include "store/store.h"

namespace cosched::store {

// The id of audit record `sequence` in its key (<prefix>/audit/<id>): newest
// first in key order, the key of sequence s sorts before s - 1's.
std::string EtcdAuditId(int64_t sequence);

// A record's value.
template <typename Message>
std::string Serialized(const Message& message) {
  std::string out;
  message.SerializeToString(&out);
  return out;
}
// The last path component of a key: the id it is for.
absl::string_view LastPart(absl::string_view key);
// OK unless `id` contains '/', where a range over a parent would then take
// in another id's keys (ids never do: common/validation.h); the error names
// `what`.
absl::Status CheckComponent(absl::string_view what, absl::string_view id);

// The layout of the keys under the prefix this code writes: 2 adds the
// vm_by/ index of VMs by owner host, reporting host and tenant (store/
// etcd_store.h). A store of layout 1 gets its index built at open.
inline constexpr int kEtcdLayoutVersion = 2;

// The revision a batch reads at and what <prefix>/meta was then.
struct EtcdSnapshot {
  etcd::Client* client = nullptr;
  std::string prefix;
  int64_t revision = 0;       // R: every read is at it
  int64_t meta_revision = 0;  // mod_revision of meta at R; 0 when absent
  std::string meta_value;     // its bytes, for a fence (EtcdStore)
  EtcdMeta meta;
  // The replicas on the prefix, for RequireLeadership; null in reads.
  EtcdReplicas* replicas = nullptr;
  // The replica's copy of the keys it holds, at R: reads of those keys are
  // answered from it, the others (the audit trail, the leader key) by etcd
  // at R.
  const EtcdCache* cache = nullptr;
  const EtcdCache::Snapshot* view = nullptr;
};

// The snapshot of a new transaction: the cache's view as it is, with meta
// as the view has it. DATA_LOSS when meta does not parse,
// FAILED_PRECONDITION when its layout is newer than this code.
absl::StatusOr<EtcdSnapshot> TakeSnapshot(etcd::Client& client, const std::string& prefix,
                                          const EtcdCache& cache,
                                          const EtcdCache::Snapshot& view);

// What the write functions of one batch did so far. Copied before each
// function and put back when it fails, as SQLite's savepoints.
struct EtcdWriteState {
  EtcdMeta meta;  // counters as the batch advanced them
  // Key -> value, or nullopt for a delete; ordered, to merge with ranges.
  std::map<std::string, std::optional<std::string>> writes;
  bool revision_taken = false;
  std::set<std::string> changed_hosts;
  // Non-zero: a function required leadership, and the Txn compares the
  // leader key's create_revision with this fence.
  int64_t fence = 0;
};

// The TxnRequest that commits `state` read at `snapshot`: compare meta's
// mod_revision (and the leader key's create_revision when fenced), then
// every write and the new meta with `commit_id`.
etcdserverpb::TxnRequest CommitRequest(const EtcdSnapshot& snapshot,
                                       const EtcdWriteState& state, uint64_t commit_id);

// Lives for one call of a TxnFn; read-only when `write` is null.
class EtcdTransaction final : public Transaction {
 public:
  EtcdTransaction(const EtcdSnapshot& snapshot, EtcdWriteState* write)
      : snap_(snapshot), write_(write) {}

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
  absl::StatusOr<std::optional<v1::Host>> GetHost(absl::string_view host_id) override;
  absl::Status PutHost(const v1::Host& host) override;
  absl::Status DeleteHost(absl::string_view host_id) override;
  absl::StatusOr<std::vector<v1::Host>> ListHosts(const Page& page) override;
  absl::Status PutObservation(absl::string_view host_id, const v1::VMObservation& vm) override;
  absl::Status DeleteObservation(absl::string_view host_id, absl::string_view vm_id) override;
  absl::StatusOr<std::vector<v1::VMObservation>> ListHostObservations(
      absl::string_view host_id) override;
  absl::StatusOr<std::optional<Observation>> FindObservation(absl::string_view key) override;
  absl::StatusOr<std::vector<Observation>> ListObservations(absl::string_view key) override;
  absl::Status RecordChange(absl::string_view host_id, absl::string_view vm_id) override;
  absl::StatusOr<HostChanges> ChangesSince(absl::string_view host_id,
                                           int64_t revision) override;
  absl::StatusOr<std::optional<v1::Rollout>> GetRollout() override;
  absl::Status PutRollout(const v1::Rollout& rollout) override;
  absl::Status RequireLeadership() override;
  absl::Status AppendAudit(const v1::AuditRecord& record) override;
  absl::StatusOr<std::vector<v1::AuditRecord>> ListAuditAfter(int64_t after_sequence,
                                                              int limit) override;
  absl::StatusOr<std::vector<v1::AuditRecord>> ListAudit(const AuditFilter& filter,
                                                         int64_t before_sequence,
                                                         int limit) override;

  // Building the index of a layout-1 store (EtcdStore::Open): writes the
  // index keys of up to `limit` VMs after `after`; returns the last VM's
  // id, empty when there were none.
  absl::StatusOr<std::string> IndexVms(const std::string& after, int limit);
  // Marks the store as being of `version` with this commit.
  void SetLayoutVersion(int version);
  // Buffers what the function's observation writes left open (each host's
  // report, serialized once however many of its VMs were written). Called
  // once the write function returned OK, before its writes are committed.
  void FinishWrites();

 private:
  // Called with each key and value in order; returns whether the record
  // counts against the limit.
  using Visit = std::function<absl::StatusOr<bool>(const std::string& key,
                                                   const std::string& value)>;

  std::string Key(absl::string_view kind, absl::string_view id) const;
  // The value of `key` in this transaction: buffered, else at the snapshot.
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key);
  // Keys in [begin, end) in order, buffered writes merged in, until `limit`
  // visits counted (0: all): from the cache when it holds the range, else
  // from etcd at the snapshot's revision, a page at a time.
  absl::Status Scan(const std::string& begin, const std::string& end, int limit,
                    const Visit& visit);
  void Put(std::string key, std::string value);
  void Delete(std::string key);
  absl::Status RequireWrite(absl::string_view op) const;
  absl::StatusOr<std::optional<EtcdReport>> GetReport(absl::string_view host_id);
  // A host's report as this function is changing it: PutObservation and
  // DeleteObservation edit the parsed report here; FinishWrites writes it.
  struct OpenReport {
    bool stored = false;                // the function found one
    std::set<std::string> keys_before;  // its VMs' ids and UUIDs, as found
    EtcdReport report;
  };
  absl::StatusOr<OpenReport*> Open(absl::string_view host_id);
  // <prefix>/vm_by/<kind>/<value>/: the index of the VMs whose `kind`
  // (host, reported, tenant) is `value`, one key per VM id.
  std::string IndexPrefix(absl::string_view kind, absl::string_view value) const;
  // The index keys of `vm`, sorted.
  std::vector<std::string> IndexKeys(const v1::VM& vm) const;
  // Whether the snapshot's store keeps the index: a new store, or layout 2.
  bool Indexed() const;

  template <typename Message>
  absl::StatusOr<Message> Parse(const std::string& key, const std::string& value,
                                absl::string_view kind) const;

  const EtcdSnapshot& snap_;
  EtcdWriteState* write_;
  std::map<std::string, OpenReport, std::less<>> open_reports_;
};

template <typename Message>
absl::StatusOr<Message> EtcdTransaction::Parse(const std::string& key, const std::string& value,
                                               absl::string_view kind) const {
  Message message;
  if (!message.ParseFromString(value)) {
    return absl::DataLossError(absl::StrCat("etcd store: value of key ", key,
                                            " does not parse as a ", kind, " record"));
  }
  return message;
}

}  // namespace cosched::store

#endif  // COSCHED_STORE_ETCD_TRANSACTION_H_
