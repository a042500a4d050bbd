// csd's in-memory placement view of the fleet: a policy::PlacementIndex of
// the registered hosts (their topology) and the tagged VMs agents reported
// on them (tenant, level, classes, vCPUs). Built from the store at start,
// then kept current by the writes (commit_effects.h), which hand it what each committed
// write changed, in commit order. Place answers from memory only.
#ifndef COSCHED_SERVER_STATE_PLACEMENT_VIEW_H_
#define COSCHED_SERVER_STATE_PLACEMENT_VIEW_H_

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/agent.pb.h"
#include "cosched/v1/types.pb.h"
#include "policy/placement.h"
#include "store/store.h"

namespace cosched::server {

// A tagged VM as placement sees it.
struct PlacedVm {
  std::string vm_id;
  std::string tenant_id;
  // Empty: no agent reported it (not in the index).
  std::string host_id;
  v1::IsolationLevel isolation = v1::ISOLATION_LEVEL_VM;
  std::vector<std::string> classes;
  // As last reported by its host's agent; 0 when not known (counted as 1).
  int vcpus = 0;
  // The host's CPUs others confine its vCPUs to, as its agent last
  // reported them (VMEnforcement.vcpu_affinity); empty: anywhere.
  std::vector<int> vcpu_affinity;

  bool operator==(const PlacedVm&) const = default;
};

// What one committed write changed.
struct PlacementDelta {
  // Hosts (re)registered, drained or undrained, with their topology.
  std::vector<v1::Host> hosts;
  // Hosts removed (csctl hosts rm).
  std::vector<std::string> removed_hosts;
  // VMs in their state after the write.
  std::vector<PlacedVm> vms;
  // VMs untagged.
  std::vector<std::string> removed_vms;
  // Tenant policies written.
  std::vector<v1::TenantPolicy> policies;

  bool empty() const {
    return hosts.empty() && removed_hosts.empty() && vms.empty() && removed_vms.empty() &&
           policies.empty();
  }
};

// The PlacedVm of a stored VM: its assignment's level and the vCPUs of its
// observation on its host.
absl::StatusOr<PlacedVm> PlacedVmOf(store::Transaction& txn, const v1::VM& vm);

// Thread-safe: Apply and Place may run concurrently.
class PlacementView {
 public:
  // Unpinned existing VMs are assumed busy (load 1 per vCPU): csd does not
  // know their load, and over-estimating keeps new VMs off crowded hosts.
  explicit PlacementView(policy::PlacementOptions options);

  // Replaces the view with the store's hosts, tagged and reported VMs, and
  // tenant policies.
  absl::Status Load(store::Store& store);
  // Reads every tenant policy again (another replica wrote one).
  absl::Status LoadPolicies(store::Transaction& txn);
  // Applies what a committed write changed.
  void Apply(const PlacementDelta& delta);
  // What host `host_id` reports now, written by another csd replica: the
  // vCPUs of the VMs the view places there (found by id or UUID).
  void ApplyReportedVcpus(const std::string& host_id,
                          const std::vector<v1::VMObservation>& reported);

  struct Answer {
    policy::PlacementDecision decision;
    // The logical CPUs of decision.cores, from the host's topology.
    std::vector<int> cpus;
  };
  // policy::PlacementIndex::Place over the hosts `rule_out` leaves (it sees
  // each host's stored record: draining, capabilities, last_seen_time);
  // RESOURCE_EXHAUSTED also when no host is registered.
  using RuleOut = std::function<std::string(const v1::Host& host)>;
  absl::StatusOr<Answer> Place(const policy::PlacementRequest& request,
                               const RuleOut& rule_out = nullptr) const;

  // The tenant's policy as last committed (its default when none was set):
  // Place reads it here, not from the store, so that it answers while the
  // store cannot be reached (csd on etcd with etcd gone).
  v1::TenantPolicy PolicyOf(const std::string& tenant_id) const;

  // For tests: host id -> sorted ids of the VMs placed there.
  std::map<std::string, std::vector<std::string>> VmsByHost() const;
  // Hosts with a topology (placeable).
  size_t host_count() const;
  // The registered host's record as last committed, without its topology;
  // nullopt for a host that is not registered.
  std::optional<v1::Host> HostRecord(const std::string& host_id) const;
  // Calls `fn` with each registered host's record (without its topology),
  // under the view's lock: `fn` must be short and must not call the view.
  void ForEachHost(const std::function<void(const v1::Host&)>& fn) const;

 private:
  struct HostInfo {
    // cpus of Topology.cores, by core index; empty until it registers one.
    std::vector<std::vector<int>> cores;
    // The fewest CPUs of its cores (2 on an SMT host, 1 with SMT off).
    int ThreadsPerCore() const;
    // Its VMs, in id order: a host's part of the index is always rebuilt in
    // this order, so that it depends only on the host and its VMs, never
    // on the order of the writes (the view csd loads at its next start is
    // then the same, dedicated VMs' cores included).
    std::set<std::string> vms;
    // The host's record without its topology (that is `cores`), for the
    // rules of who may be chosen.
    v1::Host record;
  };

  void ApplyHostLocked(const v1::Host& host, std::set<std::string>& dirty);
  void ApplyVmLocked(const PlacedVm& vm, std::set<std::string>& dirty);
  void RemoveVmLocked(const std::string& vm_id, std::set<std::string>& dirty);
  // Takes the host's VMs out of the index and adds them back in id order.
  void ResetHostLocked(const std::string& host_id);
  void RebuildLocked();

  const policy::PlacementOptions options_;
  mutable std::mutex mu_;
  policy::PlacementIndex index_;
  // Registered hosts, and hosts that VMs name (without cores until they
  // register).
  std::unordered_map<std::string, HostInfo> hosts_;
  // VMs on a host.
  std::unordered_map<std::string, PlacedVm> vms_;
  // Tenant policies set explicitly, by tenant id.
  std::unordered_map<std::string, v1::TenantPolicy> policies_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_PLACEMENT_VIEW_H_
