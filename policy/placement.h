// Core-scheduling-aware placement: ranks hosts for a new VM by the
// throughput it is predicted to lose (and to make others lose) under its
// isolation constraints, and says which cores to pin it to. The fleet state
// is kept in memory; a decision scans every host once with O(1) work per
// host. The cost model is analytic (docs/scenarios.md, "Placement"), uses
// the simulator's parameters, and is meant to rank hosts, not to predict
// absolute figures. Thread-compatible: callers serialise access.
#ifndef COSCHED_POLICY_PLACEMENT_H_
#define COSCHED_POLICY_PLACEMENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/types.pb.h"
#include "policy/simulator.h"

namespace cosched::policy {

struct PlacementOptions {
  // Most vCPUs per hardware thread on a host.
  double max_vcpus_per_thread = 4.0;
  // Pairs of interference classes that must never share a core.
  std::vector<std::pair<std::string, std::string>> conflicts;
  SimParams params;
};

struct PlacementRequest {
  std::string vm_id;
  std::string tenant;
  int vcpus = 1;
  // `vm`, `tenant` or `dedicated` (`none` is treated as `vm`: placement
  // never relies on sharing cookie 0 with strangers).
  v1::IsolationLevel isolation = v1::ISOLATION_LEVEL_VM;
  std::vector<std::string> classes;
  // Declared load per vCPU, 0-1.
  double load = 1.0;
  // Whether the VM will be pinned (then it needs whole free cores).
  bool pinning = true;
};

struct HostCandidate {
  std::string host_id;
  // Predicted loss: share of the new VM's throughput it loses, plus the
  // share of one core-equivalent per vCPU it makes the others lose.
  double predicted_cost = 0;
  std::string reason;
};

struct PlacementDecision {
  std::string host_id;
  // Cores to pin to (empty when not pinned); CPU ids are core and
  // core + cores on hosts numbered like Linux on x86.
  std::vector<int> cores;
  double predicted_cost = 0;
  std::string reason;
  // The best few hosts, best first (the chosen one included).
  std::vector<HostCandidate> ranked;
};

// The placement view of a fleet. Hosts have `cores` cores of
// `threads_per_core` hardware threads each (2 on an SMT host, 1 with SMT
// off); a pinned VM takes whole cores, ceil(vcpus / threads_per_core).
class PlacementIndex {
 public:
  explicit PlacementIndex(PlacementOptions options);

  // ALREADY_EXISTS for a known host; INVALID_ARGUMENT for cores < 1 or
  // threads_per_core outside 1-8.
  absl::Status AddHost(absl::string_view host_id, int cores, int threads_per_core = 2);
  // Records a VM already on a host, pinned to `cores` (empty: unpinned).
  // NOT_FOUND for an unknown host, FAILED_PRECONDITION when a core is taken.
  absl::Status AddVm(absl::string_view host_id, const PlacementRequest& vm,
                     const std::vector<int>& cores);
  // NOT_FOUND when the VM is not on the host.
  absl::Status RemoveVm(absl::string_view host_id, absl::string_view vm_id);

  // Why a host may not be chosen now, whatever its capacity (draining, not
  // live, unable to isolate): a short fixed phrase, empty when it may.
  using RuleOut = std::function<std::string(const std::string& host_id)>;

  // The best host for `request` and the cores to pin to, among the hosts
  // `rule_out` (when given) leaves. Pinned VMs never take a host's last
  // shared cores (common/core_budget.h). INVALID_ARGUMENT for a bad
  // request; RESOURCE_EXHAUSTED when no host can take it (each constraint
  // and each rule-out reason is named with the count of hosts it ruled out).
  absl::StatusOr<PlacementDecision> Place(const PlacementRequest& request,
                                          const RuleOut& rule_out = nullptr) const;

  // The free cores Place would pin a VM of `vcpus` to on `host_id` (the
  // lowest, a contiguous run when there is one). NOT_FOUND for an unknown
  // host; RESOURCE_EXHAUSTED when too few are free.
  absl::StatusOr<std::vector<int>> FreeCoresFor(absl::string_view host_id,
                                                int vcpus) const;

  size_t host_count() const { return hosts_.size(); }
  size_t vm_count() const { return vm_count_; }

 private:
  struct Vm {
    std::string vm_id;
    int group = 0;
    int vcpus = 0;
    double load = 0;
    uint64_t classes = 0;
    std::vector<int> cores;
  };
  struct Host {
    std::string host_id;
    int cores = 0;
    int threads_per_core = 2;
    int free_cores = 0;
    std::vector<int32_t> core_owner;  // group pinned there, -1: free
    int vcpus = 0;
    double unpinned_load = 0;      // vCPUs x load of unpinned VMs
    uint64_t unpinned_classes = 0;
    std::vector<Vm> vms;
  };

  // What Place derives from a request once, for every host it scores.
  struct RequestShape {
    bool pinned = false;
    double demand = 0;     // vCPUs x load
    uint64_t conflicts = 0;  // classes it must not share a core with
    // Unpinned load of its tenant group per host (level tenant only).
    const std::unordered_map<size_t, double>* same_group = nullptr;
  };
  struct Scored {
    size_t host;
    double cost;
    int leftover;  // free cores left: fewer wins a tie (packing)
  };
  // Hosts that could not take the request, by reason, for the error.
  struct Tally {
    int no_cores = 0, full = 0, conflicted = 0;
    int odd_hosts = 0;  // hosts without 2 threads per core
    std::map<std::string, int> ruled_out;
  };
  // Place's steps: the request's cost on one host (or why it does not fit
  // there), the error when it fits nowhere, and the decision.
  std::optional<Scored> Score(size_t h, const PlacementRequest& request,
                              const RequestShape& shape, const RuleOut& rule_out,
                              Tally& tally) const;
  absl::Status NoHost(const PlacementRequest& request, const RequestShape& shape,
                      const Tally& tally) const;
  PlacementDecision Decide(const PlacementRequest& request, const RequestShape& shape,
                           const std::vector<Scored>& best) const;

  int GroupId(const PlacementRequest& request) const;
  uint64_t ClassMask(const std::vector<std::string>& classes) const;
  uint64_t ConflictMask(uint64_t classes) const;
  void Recount(Host& host);

  PlacementOptions options_;
  std::vector<Host> hosts_;
  std::unordered_map<std::string, size_t> host_index_;
  // Interned class names (at most 64) and trust groups.
  mutable std::unordered_map<std::string, int> class_bits_;
  mutable std::unordered_map<std::string, int> group_ids_;
  std::vector<std::pair<uint64_t, uint64_t>> conflict_masks_;
  // Group id -> host index -> unpinned load of that group there, for
  // tenant-level requests that may share a cookie with their tenant.
  std::unordered_map<int, std::unordered_map<size_t, double>> group_load_;
  size_t vm_count_ = 0;
};

}  // namespace cosched::policy

#endif  // COSCHED_POLICY_PLACEMENT_H_
