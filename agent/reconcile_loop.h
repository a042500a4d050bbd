// Keeps the host's cookies right: runs a discover-then-reconcile pass
// whenever something may have changed (assignments from csd, a process or
// thread appearing, a libvirt lifecycle event) and on a timer as the safety
// net, and holds the outcome of the last pass for reports.
#ifndef COSCHED_AGENT_RECONCILE_LOOP_H_
#define COSCHED_AGENT_RECONCILE_LOOP_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/cookie_reconciler.h"
#include "agent/dedicated_cores.h"
#include "host/process_events.h"
#include "discovery/vm_discovery.h"
#include "cosched/v1/agent.pb.h"

namespace cosched::agent {

// Why a pass ran: the first reason since the previous pass.
enum class PassTrigger {
  kStart,         // the first pass
  kRequest,       // Trigger(): assignments changed, a libvirt event
  kProcessEvent,  // a process event that concerns VMs
  kRescan,        // the rescan timer alone
};
// "start", "request", "process_event", "rescan".
const char* PassTriggerName(PassTrigger trigger);

// One pass as the loop saw it, for metrics.
struct PassRecord {
  PassTrigger trigger = PassTrigger::kRescan;
  // The whole pass: discovery, cookies, dedicated cores.
  std::chrono::nanoseconds duration{0};
  // OK, or why discovery failed (then `result` is null: nothing was done).
  absl::Status discovery;
  const ReconcileResult* result = nullptr;
  // Processes found posing as VMs (discovery's impostors and duplicates).
  int impostors = 0;
};

// The impostors among `vms` (DiscoveredVm::impostor), as Reports carry them.
std::vector<v1::ImpostorProcess> ImpostorsOf(const std::vector<discovery::DiscoveredVm>& vms);

// Among VMs claiming one name or UUID (a stray QEMU, a qemu:///session
// domain, or a process posing as a VM to share its cookie), the first keeps
// it; the others lose theirs, so that they fail closed on cookies of their
// own and are not reported (they become impostors). Discovery lists
// libvirt's domains first.
// Returns the pids set aside, by the id of the VM that kept it.
std::map<std::string, std::vector<int>> SetAsideDuplicates(std::vector<discovery::DiscoveredVm>& vms);

struct ReconcileLoopOptions {
  // Full pass even when nothing said something changed.
  std::chrono::milliseconds rescan_interval{std::chrono::seconds(5)};
  // Passes never start closer together than this.
  std::chrono::milliseconds min_gap{2};
  // A pass that process events ask for starts this long after the first of
  // them, so that a burst (QEMU starting its vCPU threads, lost events) is
  // served by one pass. A new thread of a known VM is thus tagged at most
  // settle + max(min_gap, P) + P after the loop hears of its fork, P being
  // the time of a pass (a few ms for 50 VMs): settle more than before this
  // existed.
  std::chrono::milliseconds settle{2};
  // A pass running longer than this is stuck (a /proc read blocked on a
  // process in D state, a libvirtd that never answers): Observations()
  // then fails instead of passing off the last pass's results as current.
  std::chrono::milliseconds stuck_after{std::chrono::seconds(30)};
  // Called on the loop's thread after each pass, before passes() counts it.
  std::function<void(const PassRecord&)> on_pass;
  // This host's id: an assignment's pin (Assignment.pin) applies only when
  // it names this host.
  std::string host_id;
  // The revision of the assignments the lookup answers from, read as a
  // pass starts (null: 0): what enforced_revision() reports.
  std::function<int64_t()> assignment_revision;
};

// Thread-safe.
class ReconcileLoop {
 public:
  // Called after a pass whose per-VM enforcement differs from the last.
  using ChangeListener = std::function<void()>;

  // `dedicated`, when not null, runs after each cookie pass, keeps the
  // whole cores of VMs whose assignment has dedicated_cores and applies the
  // policy engine's pins; its outcome is folded into their enforcement.
  // Null: neither is enforced.
  ReconcileLoop(ReconcileLoopOptions options, discovery::VmDiscovery* discovery,
                CookieReconciler* reconciler, AssignmentLookup lookup,
                ChangeListener on_change,
                DedicatedCoreEnforcer* dedicated = nullptr);
  ~ReconcileLoop();

  void Start();
  void Stop();

  // Asks for a pass as soon as possible.
  void Trigger();
  // A process event from the kernel: a pass is triggered when it concerns a
  // VM (a thread or child of a known QEMU process, or one exiting, or
  // exec'ing another program), may start one (an exec that may be of QEMU:
  // event.may_be_qemu), a kernel thread or task is named
  // "vhost-<pid of a known VM>" (a vhost kernel thread, Linux < 6.4, forked
  // by kthreadd: event.comm), or events were lost. Any other
  // exec or rename, the bulk of them on a busy host, costs a set lookup.
  void NoteProcessEvent(const host::ProcessEvent& event);

  // What to report: one observation per VM of the last pass. UNAVAILABLE
  // before the first pass, and while discovery fails (reporting nothing
  // would tell csd the VMs are gone); DEADLINE_EXCEEDED while a pass is
  // stuck (options.stuck_after).
  absl::StatusOr<std::vector<v1::VMObservation>> Observations() const;

  // The processes the last pass found posing as VMs, each on a fail-closed
  // cookie of its own (ReportRequest.impostors).
  std::vector<v1::ImpostorProcess> Impostors() const;

  // The assignment revision the last completed pass enforced (what the
  // agent tells csd it applied); 0 before one.
  int64_t enforced_revision() const;

  // For tests and metrics.
  int passes() const;
  bool WaitForPasses(int passes, std::chrono::milliseconds timeout) const;
  std::optional<ReconcileResult> last_result() const;
  // Per VM of the last pass: the dedicated cores it got ("dedicated cores
  // 1,3 (CPUs 2-3,6-7)" in `note`) or why not. Empty without an enforcer.
  std::vector<DedicatedVmOutcome> last_dedicated() const;

 private:
  void Run();
  void Pass(PassTrigger trigger);
  // Whether `comm` is "vhost-<pid of a VM of the last pass>"; mu_ held.
  bool NamesVhostOfKnownVmLocked(const std::string& comm) const;
  // Notes, while a pass runs, which process an event found irrelevant would
  // have concerned had it been a VM: a new thread's process, a new
  // process's parent, the owner a vhost worker is named after; mu_ held.
  void NoteIgnoredDuringPassLocked(const host::ProcessEvent& event);
  // At a pass's end, with the VMs it found: whether an event ignored
  // during it concerned one of them; clears the notes; mu_ held.
  bool IgnoredEventConcernsLocked(const std::set<int>& pids);
  // Marks a pass as wanted for `trigger`, to start no sooner than
  // `not_before` unless something else wants it sooner; mu_ held.
  void TriggerLocked(PassTrigger trigger,
                     std::chrono::steady_clock::time_point not_before = {});
  // Runs the dedicated-core enforcer over the pass's VMs and folds its
  // per-VM outcome into `result`.
  std::vector<DedicatedVmOutcome> EnforceDedicatedCores(
      const std::vector<discovery::DiscoveredVm>& vms, ReconcileResult& result);

  const ReconcileLoopOptions options_;
  discovery::VmDiscovery* const discovery_;
  CookieReconciler* const reconciler_;
  DedicatedCoreEnforcer* const dedicated_;
  const AssignmentLookup lookup_;
  const ChangeListener on_change_;

  mutable std::mutex mu_;
  mutable std::condition_variable wake_;
  bool stopping_ = false;
  bool triggered_ = true;  // the first pass runs at once
  PassTrigger trigger_ = PassTrigger::kStart;
  // When the wanted pass may start at the earliest (process events settle).
  std::chrono::steady_clock::time_point not_before_;
  int passes_ = 0;
  absl::Status discovery_status_ = absl::UnavailableError("no pass yet");
  std::optional<ReconcileResult> last_;
  std::vector<v1::ImpostorProcess> impostors_;
  // When the running pass started; empty between passes.
  std::optional<std::chrono::steady_clock::time_point> pass_started_;
  int64_t last_revision_ = 0;
  std::vector<DedicatedVmOutcome> last_dedicated_;
  std::set<int> vm_pids_;
  // While a pass runs: the processes that forks and vhost names of the
  // events it ignored were about (see OwnersOfIgnoredEventLocked). One of
  // them may be a VM this very pass finds, listed before the fork and
  // tagged after it, so that the new thread neither inherited a cookie nor
  // was seen; the pass's end runs another for it. Bounded: past the bound,
  // another pass runs anyway.
  std::set<int> ignored_during_pass_;
  bool ignored_overflow_ = false;
  std::thread thread_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_RECONCILE_LOOP_H_
