// The durable store of csd's desired state, behind one interface with two
// implementations: SqliteStore (store/sqlite_store.h, embedded, the default)
// and EtcdStore (store/etcd_store.h, in etcd, shared by csd replicas).
#ifndef COSCHED_STORE_STORE_H_
#define COSCHED_STORE_STORE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cosched/v1/agent.pb.h"
#include "cosched/v1/control_plane.pb.h"
#include "cosched/v1/types.pb.h"

namespace cosched::store {

// Filters and paging of Transaction::ListVms. Empty filters match all.
// A trust group is only ever one tenant's, so filtering by one reads only
// that tenant's VMs.
struct VmFilter {
  std::string tenant_id;
  // The VM's owner host (VM.host_id).
  std::string host_id;
  std::string trust_group;
  // VMs whose presence names this host (VM.presence): the owner's and every
  // other host that reports them, as during a live migration. Only alone:
  // INVALID_ARGUMENT with any other filter.
  std::string reported_on;

  // The two listings of a host's VMs: those it owns, and those it reports
  // (a live migration's other side).
  static VmFilter OwnedBy(std::string host_id) {
    VmFilter filter;
    filter.host_id = std::move(host_id);
    return filter;
  }
  static VmFilter ReportedOn(std::string host_id) {
    VmFilter filter;
    filter.reported_on = std::move(host_id);
    return filter;
  }
};

// The tenant a trust group belongs to: its id up to the first '/'
// (policy/trust_group.h: "<tenant>/vm/<vm>", "<tenant>/tenant[/classes]",
// "<tenant>/dedicated/<vm>"). Both stores list a group's VMs through their
// index of VMs by tenant.
absl::string_view TenantOfTrustGroup(absl::string_view group);
// Whether `group` is one of `tenant`'s: what PutVm requires of a VM.
bool TrustGroupOfTenant(absl::string_view group, absl::string_view tenant);

// One page of a listing: keys strictly greater than `after`, at most `limit`.
struct Page {
  std::string after;
  int limit = 100;
};

// A VM key (a VM id or a UUID) as one host last reported it.
struct Observation {
  std::string host_id;
  v1::VMObservation vm;
};

// The VMs whose assignments changed for one host after some revision.
struct HostChanges {
  // False when changes after the asked revision were compacted away (or the
  // revision is newer than the store's): the caller must send a snapshot.
  bool complete = false;
  std::vector<std::string> vm_ids;  // distinct, in no particular order
  // The revision the answer is complete up to: the last commit the
  // transaction sees (its own when it took one). A stream that sends these
  // changes is then at this revision, not at one read before or after it.
  int64_t revision = 0;
};

// What other writers committed to a shared store (EtcdStore: other csd
// replicas on the same prefix), as this process learned it from its watch
// of the store. It names what changed; what the records are now is read
// from the store, so that a view never goes back to an older state.
struct ExternalChange {
  // The last revision it covers.
  int64_t revision = 0;
  // The watch lost track (its history was compacted away while it was
  // behind): anything may have changed, and every view of the store must
  // be read again. The other fields are then empty.
  bool resync = false;
  // Hosts whose assignments changed (the change log), as CommitObserver's.
  std::vector<std::string> assignment_hosts;
  // VMs written or deleted, each with what it was before the first of
  // these commits (nullopt: it did not exist).
  std::vector<std::pair<std::string, std::optional<v1::VM>>> vms;
  // Hosts written or deleted.
  std::vector<std::string> hosts;
  // Hosts whose report changed, with what each reports now (empty when
  // its report was deleted).
  std::vector<std::pair<std::string, std::vector<v1::VMObservation>>> reports;
  // A tenant policy was written.
  bool policies = false;
  // The rollout record was written (the leader advanced, halted or an
  // operator changed it): which hosts are enabled may have changed.
  bool rollout = false;

  bool empty() const {
    return !resync && assignment_hosts.empty() && vms.empty() && hosts.empty() &&
           reports.empty() && !policies && !rollout;
  }
};

// Filters of Transaction::ListAudit. Empty strings and 0 match all.
struct AuditFilter {
  std::string subject;
  std::string who;
  int64_t since_unix_ns = 0;
};

// Reads and writes of one transaction. Reads see the transaction's own
// writes. Records are proto messages; which fields are stored is said per
// method. Every method may fail with the store's I/O error; writes fail with
// FAILED_PRECONDITION in a read-only transaction (Store::Read) and with
// INVALID_ARGUMENT when the record's key is empty.
class Transaction {
 public:
  virtual ~Transaction() = default;

  // The revision this transaction writes at: allocated on first call,
  // greater than every committed revision, the same for later calls within
  // one write function (and, in EtcdStore, for every function committed in
  // the same etcd Txn). Errors in read-only transactions.
  virtual absl::StatusOr<int64_t> WriteRevision() = 0;
  // The last revision this transaction's view includes: the newest commit
  // its snapshot sees, or its own WriteRevision() once taken. Whatever a
  // caller sends from this transaction's reads is stamped with it, never
  // with a revision read separately (Store::CurrentRevision may already be
  // past a commit the reads did not see).
  virtual absl::StatusOr<int64_t> ReadRevision() = 0;

  // VMs: stored whole (host_id and presence included, enforcement ignored).
  virtual absl::StatusOr<std::optional<v1::VM>> GetVm(absl::string_view vm_id) = 0;
  // INVALID_ARGUMENT when vm_id is empty, or the trust group (when set) does
  // not begin with "<tenant_id>/", as policy/trust_group.h makes them.
  virtual absl::Status PutVm(const v1::VM& vm) = 0;
  // NOT_FOUND when absent.
  virtual absl::Status DeleteVm(absl::string_view vm_id) = 0;
  // Ordered by vm_id.
  virtual absl::StatusOr<std::vector<v1::VM>> ListVms(const VmFilter& filter,
                                                      const Page& page) = 0;

  // Tenant policies, ordered by tenant_id.
  virtual absl::StatusOr<std::optional<v1::TenantPolicy>> GetTenantPolicy(
      absl::string_view tenant_id) = 0;
  virtual absl::Status PutTenantPolicy(const v1::TenantPolicy& policy) = 0;
  virtual absl::StatusOr<std::vector<v1::TenantPolicy>> ListTenantPolicies(
      const Page& page) = 0;

  // Hosts (stored whole; `connected` and `unplaceable_reason` are not
  // meaningful in the store).
  virtual absl::StatusOr<std::optional<v1::Host>> GetHost(
      absl::string_view host_id) = 0;
  virtual absl::Status PutHost(const v1::Host& host) = 0;
  // Deletes the host and what it reported (its observations); NOT_FOUND
  // when absent.
  virtual absl::Status DeleteHost(absl::string_view host_id) = 0;
  virtual absl::StatusOr<std::vector<v1::Host>> ListHosts(const Page& page) = 0;

  // Observations: what agents report, one record per host and VM, each
  // findable by its vm_id and, when set, its uuid. A Report writes only the
  // VMs whose observation changed (ReplaceObservations below), so that a
  // host of 50 VMs where one changed costs one record, not 50.
  //
  // The host's observation of vm.vm_id() now, replacing its earlier one
  // (and the UUID that one was findable by). INVALID_ARGUMENT when host_id
  // or vm.vm_id() is empty.
  virtual absl::Status PutObservation(absl::string_view host_id,
                                      const v1::VMObservation& vm) = 0;
  // Deletes the host's observation of `vm_id`; NOT_FOUND when absent.
  virtual absl::Status DeleteObservation(absl::string_view host_id,
                                         absl::string_view vm_id) = 0;
  // What the host reports, ordered by vm_id.
  virtual absl::StatusOr<std::vector<v1::VMObservation>> ListHostObservations(
      absl::string_view host_id) = 0;
  // The most recently written observation of `key` (vm id or uuid) on any
  // host.
  virtual absl::StatusOr<std::optional<Observation>> FindObservation(
      absl::string_view key) = 0;
  // Every host's observation of `key`, the most recently written first.
  // (EtcdStore keeps a host's observations in one record, so there its
  // order is by when each host's record was last written.) Nothing that
  // decides who owns a VM reads this order: ownership follows run states
  // (server/state/vm_presence.h).
  virtual absl::StatusOr<std::vector<Observation>> ListObservations(
      absl::string_view key) = 0;

  // Change log that lets agents resume: records that the assignment of
  // `vm_id` changed for `host_id` at WriteRevision(). With an empty
  // `host_id` (a VM no agent reported yet) it only takes the revision.
  virtual absl::Status RecordChange(absl::string_view host_id,
                                    absl::string_view vm_id) = 0;
  virtual absl::StatusOr<HostChanges> ChangesSince(absl::string_view host_id,
                                                   int64_t revision) = 0;

  // The staged rollout of enforcement (v1::Rollout, stored whole): one
  // record, the latest started whatever its state; nullopt before the
  // first. PutRollout replaces it; INVALID_ARGUMENT when rollout_id is
  // empty in a started one (a record that only holds the fleet's
  // new_hosts setting has neither id nor state).
  virtual absl::StatusOr<std::optional<v1::Rollout>> GetRollout() = 0;
  virtual absl::Status PutRollout(const v1::Rollout& rollout) = 0;

  // Makes the writes of this transaction commit only while this process
  // leads the store's writers (Store::Leads): for the jobs that must run
  // once per fleet, such as the policy engine's. FAILED_PRECONDITION naming
  // the leader when it does not lead (the write function should return
  // it); a store with one writer (SqliteStore) always leads.
  virtual absl::Status RequireLeadership() = 0;

  // Audit trail: appends `record` (stored whole; its sequence is assigned,
  // greater than every earlier one). INVALID_ARGUMENT when who or method is
  // empty.
  virtual absl::Status AppendAudit(const v1::AuditRecord& record) = 0;
  // Newest first: records matching `filter` with a sequence below
  // `before_sequence` (0: from the newest), at most `limit` (1-1000).
  virtual absl::StatusOr<std::vector<v1::AuditRecord>> ListAudit(
      const AuditFilter& filter, int64_t before_sequence, int limit) = 0;
  // Oldest first: the records with a sequence above `after_sequence`, at
  // most `limit` (1-1000); what an exporter of the trail reads next. In a
  // read transaction only (FAILED_PRECONDITION in a write).
  virtual absl::StatusOr<std::vector<v1::AuditRecord>> ListAuditAfter(int64_t after_sequence,
                                                                      int limit) = 0;
};

// Every VM matching `filter`, read page by page inside `txn`.
absl::StatusOr<std::vector<v1::VM>> ListAllVms(Transaction& txn, const VmFilter& filter);

// Makes `vms` what `host_id` reports, writing only what changed: each VM
// whose observation differs from the stored one in more than
// enforcement.report_time (csd's stamp of when it heard it) is put, with
// `report_time` as its stamp when given; each stored VM not in `vms` is
// deleted. INVALID_ARGUMENT naming the VM when a vm_id is empty or given
// twice, before anything is written. Returns the vm_ids whose observations
// were put or deleted.
absl::StatusOr<std::vector<std::string>> ReplaceObservations(
    Transaction& txn, absl::string_view host_id,
    const google::protobuf::RepeatedPtrField<v1::VMObservation>& vms,
    const google::protobuf::Timestamp* report_time = nullptr);
absl::StatusOr<std::vector<std::string>> ReplaceObservations(
    Transaction& txn, absl::string_view host_id, const std::vector<v1::VMObservation>& vms);

// Thread-safe. Write functions run one at a time on the store's writer, in
// submission order; concurrent writes are committed together (group commit)
// but each is atomic on its own.
class Store {
 public:
  using TxnFn = std::function<absl::Status(Transaction&)>;
  using DoneFn = std::function<void(absl::Status)>;
  // Hosts whose assignments changed in a commit, and its last revision.
  using CommitObserver =
      std::function<void(const std::vector<std::string>& hosts, int64_t revision)>;

  virtual ~Store() = default;

  // Runs `fn` in a transaction. When `fn` fails, its writes are undone and
  // `done` gets its status. Otherwise `done` gets OK only once the writes are
  // durable, or UNAVAILABLE / RESOURCE_EXHAUSTED when the commit failed
  // (nothing written), or ABORTED when it lost too many races with other
  // writers (EtcdStore). `done` runs on the store's completion thread, in
  // commit order: keep it short.
  //
  // `fn` may run more than once: EtcdStore runs it again on a new snapshot
  // when another writer committed first. Only the last run's writes and
  // status count, so a function must reset whatever it fills outside the
  // transaction when it starts. EtcdStore's UNAVAILABLE after a commit
  // whose answer was lost, when etcd could not be asked afterwards either,
  // says the outcome is unknown.
  virtual void Write(TxnFn fn, DoneFn done) = 0;

  // Blocking form of Write.
  absl::Status WriteSync(TxnFn fn);

  // Runs `fn` on a consistent read-only view, on the calling thread. The
  // view has every write acknowledged (by any writer) before Read began.
  virtual absl::Status Read(const TxnFn& fn) = 0;
  // As Read, but the view need only have what this process has seen: its
  // own acknowledged writes, the changes of other writers it delivered
  // (SetExternalObserver) and what an earlier Read saw. EtcdStore answers
  // it from its cache without asking etcd; a store with one writer answers
  // it as Read. For a job that reads many records one at a time after one
  // Read (the policy engine's pass: each write it makes compares what it
  // read) and for views kept by the store's changes.
  virtual absl::Status ReadRecent(const TxnFn& fn) { return Read(fn); }

  // The highest committed revision.
  virtual int64_t CurrentRevision() const = 0;

  // Set once, before the first Write: called after each durable commit that
  // recorded changes, after that commit's done functions, on the thread that
  // runs them.
  virtual void SetCommitObserver(CommitObserver observer) = 0;

  // What other writers of a shared store committed, and whether this
  // process can reach the store.
  using ExternalObserver = std::function<void(const ExternalChange& change)>;
  using ReachabilityObserver =
      std::function<void(bool reachable, const std::string& why)>;
  // Set once, before the first Write. Called for every commit of another
  // writer (never for this store's own), on the thread that runs done
  // functions and the commit observer, in revision order with them: a
  // change is delivered after the done functions of every commit of this
  // store below it and before those above it. A store that no one else
  // writes (SqliteStore) never calls it. Set to nullptr, it stops: no
  // change is queued once the call returns (one queued before still runs,
  // before a write submitted after it completes).
  virtual void SetExternalObserver(ExternalObserver observer) { (void)observer; }
  // Set once, before the first Write. Called, on a thread of the store's
  // own, when the store stops being reachable (why: the error) and when it
  // is reachable again. A store that is always reachable (SqliteStore, a
  // file) never calls it.
  virtual void SetReachabilityObserver(ReachabilityObserver observer) { (void)observer; }

  // Whether this process leads the store's writers: the one that runs the
  // jobs that must run once (EtcdStore: one replica at a time, elected in
  // etcd; SqliteStore: always). A leader's fenced writes
  // (Transaction::RequireLeadership) fail once it no longer leads, even
  // before it learns so here.
  virtual bool Leads() const { return true; }
  // Set once, before the first Write: called, on a thread of the store's
  // own, when this process starts or stops leading. A store that always
  // leads never calls it.
  using LeadershipObserver = std::function<void(bool leading)>;
  virtual void SetLeadershipObserver(LeadershipObserver observer) { (void)observer; }
};

}  // namespace cosched::store

#endif  // COSCHED_STORE_STORE_H_
