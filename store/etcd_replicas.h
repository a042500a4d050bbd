// The csd replicas sharing one etcd prefix: each registers itself under a
// lease of its own, and one of them at a time leads, the one that runs the
// jobs that must run once per fleet (issue #16): etcd compaction, audit
// pruning, the change-log sweep (store/etcd_maintenance.h) and the policy
// engine (server/engine/engine_loop.h). Each also says, under the same lease,
// which hosts' agents it hears (<prefix>/seen/<name>/, an EtcdSeen in
// parts), and reads the others': an agent talks to one replica, and a
// Report that changes nothing is not written to the store, so this is how
// every replica knows which hosts are live (server/state/host_liveness.h).
//
// Leadership is the key <prefix>/leader, created under the leader's lease
// only while it is absent (a Txn comparing its create_revision with 0). The
// fence of a leadership is that create_revision: it changes whenever the
// key is created anew, so a write that compares it (Transaction::
// RequireLeadership, the maintenance Txns) commits only while the replica
// that checked still leads, whatever its own clock or view says.
//
// A replica renews its lease every ttl/3. It stops calling itself leader
// once a ttl has passed since the last renewal it sent that succeeded
// (before etcd can expire the lease, since etcd counts from when it
// received that renewal), and a replica whose lease is gone takes a new
// one. Closing resigns: the lease is revoked, which deletes both keys, so
// the next replica leads within one poll instead of one ttl.
#ifndef COSCHED_STORE_ETCD_REPLICAS_H_
#define COSCHED_STORE_ETCD_REPLICAS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cosched/store/etcd_records.pb.h"
#include "etcd/client.h"

namespace cosched::store {

// The form of the records under the prefix this csd reads and writes
// (EtcdReplica.record_format): 1, a staged rollout's hosts on their host
// records (Host.enabled_by_rollout).
inline constexpr int kRecordFormat = 1;

struct EtcdReplicasOptions {
  // This replica's name among the replicas on the prefix (a component:
  // letters, digits, '.', '-', '_', ':'); empty: the host name and a
  // random suffix (csd passes the host name alone: HostReplicaName). No two
  // live replicas share one: a name held under another lease is waited for
  // (a predecessor that died keeps it until its lease expires), then
  // refused.
  std::string name;
  // Where the other replicas reach its gRPC service (host:port); may be
  // empty, and set later (SetAddress) once the service listens.
  std::string address;
  // Lease time to live: how long a leader that stopped renewing (crashed,
  // cut off from etcd) keeps the others from leading. 2 s to 300 s.
  absl::Duration ttl = absl::Seconds(10);
  // How often a replica that does not lead looks whether the leader is
  // gone.
  absl::Duration poll = absl::Seconds(1);
  // How often the hosts it hears are written and the others' read
  // (store.etcd.liveness_interval_ms): 200 ms to 60 s.
  absl::Duration seen_interval = absl::Seconds(5);
};

// Whether `key` (relative to the prefix, without its '/') belongs to the
// replicas running on the prefix rather than to the desired state:
// replicas/<name>, seen/<name>/..., leader (all under a live lease) and
// compact. Backups
// leave them out: restored, a leader key without its lease would keep every
// replica from leading.
bool IsReplicaKey(absl::string_view key);

// The host name as a replica name: characters a name may not hold become
// '_'; "csd" when the host has none.
std::string HostReplicaName();

// Checks the options; INVALID_ARGUMENT naming store.etcd.<field>.
absl::Status ValidateEtcdReplicasOptions(const EtcdReplicasOptions& options);

// Thread-safe. Campaigns on a thread of its own from construction to
// destruction, and exchanges the seen records on another.
class EtcdReplicas {
 public:
  using LeadershipObserver = std::function<void(bool leading)>;

  // The first registration and campaign run before the constructor
  // returns (so a lone replica leads at once); when etcd cannot be reached
  // they are retried every poll.
  EtcdReplicas(etcd::Client& client, std::string prefix, EtcdReplicasOptions options);
  // Resigns: revokes the lease (both keys go with it).
  ~EtcdReplicas();
  EtcdReplicas(const EtcdReplicas&) = delete;
  EtcdReplicas& operator=(const EtcdReplicas&) = delete;

  const std::string& name() const { return options_.name; }

  // Waits until this replica is registered under its name: at once unless
  // another lease holds the name (a predecessor that died: until its lease
  // expires). FAILED_PRECONDITION naming store.etcd.replica_name when it
  // is still held after `timeout` (another live replica has it); else the
  // last registration's error.
  absl::Status WaitRegistered(absl::Duration timeout);
  const std::string& leader_key() const { return leader_key_; }

  // The fence of this replica's leadership (the leader key's
  // create_revision) while it leads; 0 while it does not.
  int64_t fence() const;
  bool leading() const { return fence() != 0; }
  // The leader's name as last seen; empty when none was seen.
  std::string leader() const;
  // A fenced write found the leader key no longer at `fence` (`leader`
  // holds it now; empty: nobody): this replica stops leading at once (if it
  // still did under that fence).
  void LostFence(int64_t fence, const std::string& leader = "");

  // Called on the campaign's thread each time this replica starts or stops
  // leading. Set once; not called after the destructor begins.
  void SetObserver(LeadershipObserver observer);

  // Registers `address` as where the others reach this replica: csd knows
  // its port only once it listens, after the store opened. Written by the
  // campaign's next round (within a poll).
  void SetAddress(std::string address);
  std::string address() const;

  // The replicas registered now, by name (a linearizable read).
  absl::StatusOr<std::vector<EtcdReplica>> List() const;
  // OK when every replica registered now reads and writes records of
  // `format` (EtcdReplica.record_format) or newer; FAILED_PRECONDITION
  // naming one that does not (a rolling upgrade under way), or List's
  // error.
  absl::Status CheckRecordFormat(int format) const;

  // The exchange of which hosts each replica hears: every seen_interval
  // its own thread writes what `source` returns as this replica's
  // record (under its lease: it goes with the replica) and hands `sink`
  // the other replicas' records. Setting (nullptr to stop) waits for an
  // exchange in progress, so that neither is called once it returns.
  using SeenSource = std::function<std::vector<EtcdSeenHost>()>;
  using SeenSink = std::function<void(std::vector<EtcdSeen> others)>;
  void SetSeenExchange(SeenSource source, SeenSink sink);
  // Writes `hosts` as this replica's seen record, in parts of at most
  // kSeenPartBytes, and deletes parts left from a longer one before.
  // UNAVAILABLE before the replica holds a lease.
  absl::Status PublishSeen(const std::vector<EtcdSeenHost>& hosts);
  // The other replicas' seen records, parts merged (a linearizable read).
  // DATA_LOSS naming the key of a value that does not parse.
  absl::StatusOr<std::vector<EtcdSeen>> ListSeen() const;
  static constexpr size_t kSeenPartBytes = 512 * 1024;

 private:
  using Clock = std::chrono::steady_clock;

  void Run();
  // One round: a lease, the registration, the campaign, a renewal when
  // due. Returns what it changed of `leading`.
  void Round();
  absl::Status Register();
  // This replica's record (EtcdReplica: name, address, now) as a value.
  std::string SelfRecord() const;
  // A Txn that puts `value` at `key` under this replica's lease if
  // `compare` (its target and operand; EQUAL) holds, else reads `key`.
  etcdserverpb::TxnRequest PutUnderLeaseIf(const std::string& key, const std::string& value,
                                           etcdserverpb::Compare compare) const;
  // The exchange's own thread: every seen_interval while a lease is held,
  // so that a slow etcd never delays the campaign's lease renewals.
  void RunSeen();
  void ExchangeSeen();
  absl::Status Campaign();
  void Renew();
  // Under mu_; calls the observer after unlocking (returns it).
  LeadershipObserver SetFenceLocked(int64_t fence);

  etcd::Client& client_;
  const std::string prefix_;
  const std::string leader_key_;
  EtcdReplicasOptions options_;
  std::string own_key_;  // <prefix>/replicas/<name>
  std::string seen_key_;  // <prefix>/seen/<name>/

  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;             // guarded by mu_
  int64_t fence_ = 0;                 // guarded by mu_
  std::string leader_;                // guarded by mu_
  LeadershipObserver observer_;       // guarded by mu_
  std::string address_;               // guarded by mu_
  bool address_changed_ = false;      // guarded by mu_
  // Whether the name is registered under this replica's lease, and why
  // not; registered_cv_ is told of each registration's outcome.
  bool name_registered_ = false;      // guarded by mu_
  absl::Status register_status_ = absl::UnavailableError("not registered yet");  // guarded by mu_
  std::condition_variable registered_cv_;
  // Held through an exchange: SetSeenExchange waits for it.
  std::mutex seen_mu_;
  SeenSource seen_source_;            // guarded by seen_mu_
  SeenSink seen_sink_;                // guarded by seen_mu_
  int64_t lease_id_ = 0;              // guarded by mu_: lease_, for PublishSeen
  // The campaign thread's own.
  int64_t lease_ = 0;
  bool registered_ = false;
  Clock::time_point renewed_{};       // when the last renewal that succeeded was sent
  Clock::time_point next_renewal_{};
  std::thread thread_;
  std::thread seen_thread_;
};

}  // namespace cosched::store

#endif  // COSCHED_STORE_ETCD_REPLICAS_H_
