// Makes the kernel's core-scheduling cookies match the assignments: one
// cookie per trust group present on the host, every in-scope thread of the
// group's VMs in it, no thread of any other group. It reads every cookie
// back (PR_SCHED_CORE_GET) and writes only what differs, so a pass over a
// host where nothing changed makes no prctl writes.
//
// Cookies cannot be set to a chosen value: a group's cookie lives in its
// threads. The reconciler remembers one "anchor" thread per group and, to
// put threads in the group, has a short-lived courier thread take the
// anchor's cookie (SHARE_FROM) and give it (SHARE_TO); the courier's copy
// dies with it, so no agent thread keeps a VM's cookie. A restarted agent
// adopts the cookies it finds in the kernel rather than creating new ones,
// so no VM thread is untagged or regrouped by the restart.
//
// Read-back can be blind: Linux 6.1's PR_SCHED_CORE_GET writes 0 for every
// task, tagged or not, until the kernel's pointer-hash key is ready
// (__ptr_to_hashval -EBUSY; early after boot on a host short of entropy).
// A CREATE that succeeded and still reads 0 shows it. Taking those zeros
// for untagged threads would make a new cookie and rewrite every thread on
// every pass, and report cookie 0 as the group's. Instead the reconciler
// remembers which threads it gave which group's cookie, writes each once,
// reports them as unverified (not enforced), and goes back to read-back as
// soon as any GET gives a non-zero hash.
#ifndef COSCHED_AGENT_COOKIE_RECONCILER_H_
#define COSCHED_AGENT_COOKIE_RECONCILER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host/core_sched.h"
#include "discovery/vm_discovery.h"
#include "cosched/v1/types.pb.h"

namespace cosched::agent {

// The assignment of a discovered VM (matched by name or UUID), if any.
using AssignmentLookup =
    std::function<std::optional<v1::Assignment>(const discovery::DiscoveredVm&)>;

struct ReconcilerOptions {
  // VMs without an assignment keep whatever cookie they have instead of
  // getting one of their own.
  bool fail_open = false;
  // Host facts: without SMT or without kernel support nothing is tagged and
  // every VM reports why.
  bool smt_active = true;
  host::CoreSchedProbe probe;
  // The hazards present now (HazardWatch); null: none. While any is, a pass
  // reads cookies and writes none: every VM is HELD with the hazard named.
  std::function<std::vector<v1::Hazard>()> hazards;
  // on_hazard: clear. While a hazard lasts, a pass takes every cookie off
  // the threads of the VMs it manages (once: a cleared thread reads 0) and
  // then writes nothing; the groups get new cookies once it clears.
  bool clear_on_hazard = false;
  // What csd says of cookies on this host (HostEnablementState); null:
  // enforce. WAIVED: a pass reads cookies and writes none, each VM
  // WAIVED with csd's reason (a hazard, if any, is named first);
  // NOT_ENABLED (a staged rollout) the same, each VM NOT_ENABLED.
  std::function<v1::HostEnablement()> enablement;
  // enforce: observe. A pass writes nothing: it runs as a fresh reconciler
  // over a ShadowCoreSched (host/core_sched_shadow.h), so from the cookies
  // the kernel holds now it works out what enforcing would write, and each
  // VM reports OBSERVED with the state it would reach (observed_state).
  bool observe = false;
};

// The outcome of one pass for one VM.
struct VmOutcome {
  std::string vm_id;
  std::string uuid;
  // The cookie group: a trust group id, a fail-closed group of the VM's
  // own, or empty for "no cookie" (level none, or fail-open).
  std::string group;
  bool assigned = false;
  // The group's cookie hash after the pass (0 for none).
  uint64_t cookie = 0;
  // Threads in scope that are alive, in tid order.
  std::vector<int> tids;
  // The VM's own cgroup (DiscoveredVm::cgroup); empty: none.
  std::string cgroup;
  // As discovery saw it (DiscoveredVm::run_state), for csd.
  v1::VMRunState run_state = v1::VM_RUN_STATE_UNSPECIFIED;
  v1::VMEnforcement enforcement;
  // As discovery read it (DiscoveredVm::metadata), for csd.
  std::optional<v1::DomainMetadata> metadata;
  bool metadata_unknown = false;
};

struct ReconcileStats {
  int vms = 0;
  int threads = 0;
  int cookie_reads = 0;
  int cookie_writes = 0;
  int threads_changed = 0;
  // The kernel reads tagged tasks back as 0 (see above): `threads_unverified`
  // threads were given their group's cookie but cannot be checked.
  bool readback_blind = false;
  int threads_unverified = 0;
  // An observing pass (ReconcilerOptions::observe): cookie_writes and
  // threads_changed are 0; these are what enforcing would have done.
  bool observed = false;
  int observed_writes = 0;
  int observed_moves = 0;
  std::chrono::nanoseconds duration{0};
};

struct ReconcileResult {
  std::vector<VmOutcome> vms;
  ReconcileStats stats;
  // The pass ran with enforcement switched off (HostEnablement OFF): its
  // cookies were taken off (or, observing, would have been), and nothing
  // else the agent set on VM threads is to stay either.
  bool enforcement_off = false;
};

// The name of the group a VM without assignment gets when failing closed.
std::string FailClosedGroup(const discovery::DiscoveredVm& vm);

// Whether `thread` carries its VM's cookie under `scope`.
bool InScope(const discovery::DiscoveredThread& thread, v1::ThreadScope scope);

// Thread-compatible: one Reconcile at a time (SetPolicy from any thread).
// Keeps the anchors of the groups it saw in the last pass, nothing more.
class CookieReconciler {
 public:
  CookieReconciler(host::CoreSched* kernel, ReconcilerOptions options);

  // fail_open, clear_on_hazard and observe anew (a reload of
  // cs-agent.yaml), from the next pass on.
  void SetPolicy(bool fail_open, bool clear_on_hazard, bool observe);

  ReconcileResult Reconcile(const std::vector<discovery::DiscoveredVm>& vms,
                            const AssignmentLookup& lookup);

 private:
  struct GroupCookie {
    uint64_t hash = 0;
    int anchor_tid = 0;
  };
  struct ThreadState;
  struct VmPlan;

  // An observing pass: a fresh reconciler enforcing over a shadow of the
  // kernel, its outcomes reported as OBSERVED.
  ReconcileResult Observe(const std::vector<discovery::DiscoveredVm>& vms,
                          const AssignmentLookup& lookup);
  void ReadCookies(std::vector<VmPlan>& plans, ReconcileStats& stats);
  void ChooseCookies(std::vector<VmPlan>& plans, ReconcileStats& stats);
  void MoveThreads(std::vector<VmPlan>& plans, ReconcileStats& stats);
  void Verify(std::vector<VmPlan>& plans, ReconcileStats& stats);
  std::string HostUnsupportedMessage() const;
  // Empty when tagging is safe; else why not, naming each hazard.
  std::string HazardMessage() const;
  // Whether a cookie may be written now; false from the first hazard seen
  // in this pass on (held_why_ says why).
  bool MayWrite();
  // Every VM of the pass in `state` (HELD, WAIVED): nothing written,
  // the cookies read reported.
  void Hold(std::vector<VmPlan>& plans, v1::EnforcementState state, const std::string& why);
  // on_hazard: clear: every thread of a managed VM that holds a cookie is
  // given none; the groups' cookies are forgotten. How many threads could
  // not be cleared (they are named in their VM's error).
  int ClearCookies(std::vector<VmPlan>& plans, ReconcileStats& stats, absl::string_view why);
  // Gives each of `targets` the cookie of `group` ("" = none) from a
  // courier thread; records what it changed, and each target's error.
  void GiveCookie(const std::string& group, const std::vector<ThreadState*>& targets,
                  ReconcileStats& stats);
  // While read-back is blind: whether this reconciler gave `tid` the cookie
  // of `group` ("" = none).
  bool WrittenAs(int tid, const std::string& group) const;

  host::CoreSched* const kernel_;
  const ReconcilerOptions options_;
  // options_'s, as reloaded.
  std::atomic<bool> fail_open_;
  std::atomic<bool> clear_on_hazard_;
  std::atomic<bool> observe_;
  std::map<std::string, GroupCookie> cookies_;
  // Read-back is blind (GET reads 0 for tagged tasks); its groups' hashes
  // are 0, and `written_` says which thread was given which group's cookie.
  bool readback_blind_ = false;
  std::map<int, std::string> written_;
  // Non-empty once a hazard stopped this pass's writes.
  std::string held_why_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_COOKIE_RECONCILER_H_
