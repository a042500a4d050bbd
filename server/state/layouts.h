// The layouts aggregate of the desired state: the policy engine's decisions
// (server/engine/) written as TagVM writes its, and its flag of a host
// whose budget no layout meets.
#ifndef COSCHED_SERVER_STATE_LAYOUTS_H_
#define COSCHED_SERVER_STATE_LAYOUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cosched/v1/control_plane.pb.h"
#include "server/state/commit_effects.h"
#include "server/state/write_support.h"
#include "store/store.h"

namespace cosched::server {

// The audit trail's `who` of the policy engine's decisions.
inline constexpr char kEngineActor[] = "csd:engine";

// One VM's layout as the policy engine decided it, against the VM as it
// was at `expected_revision` (its assignment's revision when planned).
struct LayoutChange {
  std::string vm_id;
  int64_t expected_revision = 0;
  v1::IsolationLevel isolation = v1::ISOLATION_LEVEL_UNSPECIFIED;
  std::string trust_group;
  // The host's CPUs its vCPUs are pinned to (Assignment.pin on the host
  // planned); empty: not pinned.
  std::vector<int> pin_cpus;
  // Reasons and predicted figures; decided_by and decided_at are set by
  // ApplyLayout.
  v1::LayoutDecision decision;
};

// Thread-safe. Both writes are fenced: only the replica that leads writes.
class Layouts {
 public:
  Layouts(store::Store& store, const CommitEffects& effects)
      : store_(store), effects_(effects) {}

  // Writes the policy engine's layout of `host_id`: every change or none,
  // at one revision, each VM audited (method EngineDecision, who
  // kEngineActor) with its decision's reasons and predicted figures, and
  // streamed to the hosts that receive it. A compare-and-set: ABORTED when
  // a VM's assignment is no longer at its expected_revision (a TagVM or
  // policy change came first: re-read and re-decide), when it left the
  // host, or when it is no longer the engine's to decide (tagged with a
  // level, its tenant not in mode auto); FAILED_PRECONDITION when its
  // tenant's policy does not allow the level or the group is not the one
  // the level gives. Answers the revision written.
  void ApplyLayout(const std::string& host_id, std::vector<LayoutChange> changes,
                   Done<int64_t> done);
  // The policy engine's flag of a host whose budget no allowed layout meets
  // (Host.budget_unmet): `reason` sets it, empty clears it. Written and
  // audited (method EngineBudgetFlag) only when it turns on or off, so a
  // host that stays flagged is not rewritten every pass. Answers whether
  // it was written. NOT_FOUND for an unknown host.
  void SetBudgetFlag(const std::string& host_id, const std::string& reason, Done<bool> done);

 private:
  store::Store& store_;
  const CommitEffects& effects_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_LAYOUTS_H_
