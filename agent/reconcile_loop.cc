#include "agent/reconcile_loop.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log_every.h"
#include "common/validation.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"

namespace cosched::agent {
namespace {

// Whether the two passes would tell csd the same: enforcement, and the
// domain metadata csd may tag a VM from (a change of it alone is worth a
// prompt Report).
bool SameReported(const ReconcileResult& a, const ReconcileResult& b) {
  if (a.vms.size() != b.vms.size()) return false;
  for (size_t i = 0; i < a.vms.size(); ++i) {
    const VmOutcome& x = a.vms[i];
    const VmOutcome& y = b.vms[i];
    if (x.vm_id != y.vm_id ||
        !google::protobuf::util::MessageDifferencer::Equals(x.enforcement, y.enforcement) ||
        x.metadata.has_value() != y.metadata.has_value() ||
        x.metadata_unknown != y.metadata_unknown ||
        (x.metadata && !google::protobuf::util::MessageDifferencer::Equals(*x.metadata,
                                                                          *y.metadata))) {
      return false;
    }
  }
  return true;
}

}  // namespace

const char* PassTriggerName(PassTrigger trigger) {
  switch (trigger) {
    case PassTrigger::kStart: return "start";
    case PassTrigger::kRequest: return "request";
    case PassTrigger::kProcessEvent: return "process_event";
    case PassTrigger::kRescan: return "rescan";
  }
  return "rescan";
}

ReconcileLoop::ReconcileLoop(ReconcileLoopOptions options,
                             discovery::VmDiscovery* discovery,
                             CookieReconciler* reconciler,
                             AssignmentLookup lookup, ChangeListener on_change,
                             DedicatedCoreEnforcer* dedicated)
    : options_(options),
      discovery_(discovery),
      reconciler_(reconciler),
      dedicated_(dedicated),
      lookup_(std::move(lookup)),
      on_change_(std::move(on_change)) {}

ReconcileLoop::~ReconcileLoop() { Stop(); }

void ReconcileLoop::Start() { thread_ = std::thread([this] { Run(); }); }

void ReconcileLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ReconcileLoop::TriggerLocked(PassTrigger trigger,
                                  std::chrono::steady_clock::time_point not_before) {
  if (!triggered_) {
    trigger_ = trigger;
    not_before_ = not_before;
  } else {
    // Later events of a burst do not push the pass back; a request that
    // wants it now brings it forward.
    not_before_ = std::min(not_before_, not_before);
  }
  triggered_ = true;
}

void ReconcileLoop::Trigger() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    TriggerLocked(PassTrigger::kRequest);
  }
  wake_.notify_all();
}

namespace {

// The pid a vhost worker named "vhost-<pid>" serves; 0 for another name.
int VhostOwner(const std::string& comm) {
  int owner = 0;
  if (!absl::StartsWith(comm, "vhost-") ||
      !absl::SimpleAtoi(absl::string_view(comm).substr(6), &owner)) {
    return 0;
  }
  return owner;
}

}  // namespace

bool ReconcileLoop::NamesVhostOfKnownVmLocked(const std::string& comm) const {
  const int owner = VhostOwner(comm);
  return owner > 0 && vm_pids_.count(owner) > 0;
}

void ReconcileLoop::NoteProcessEvent(const host::ProcessEvent& event) {
  bool relevant = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    switch (event.kind) {
      case host::ProcessEventKind::kFork:
        // A new thread of a VM, or a helper process it starts, or (Linux
        // < 6.4) a vhost kernel thread of one, forked by kthreadd (2) and
        // named by the time the source passes it on.
        relevant = vm_pids_.count(event.tgid) > 0 ||
                   vm_pids_.count(event.parent_tgid) > 0 ||
                   (event.parent_tgid == 2 && NamesVhostOfKnownVmLocked(event.comm));
        break;
      case host::ProcessEventKind::kExec:
        // A new QEMU, or a VM's process turning into another program.
        relevant = event.may_be_qemu || vm_pids_.count(event.tgid) > 0;
        break;
      case host::ProcessEventKind::kLost:
        relevant = true;  // any of the above may have been lost
        break;
      case host::ProcessEventKind::kExit:
        // A VM's process ending (its threads come and go all the time).
        relevant = event.tid == event.tgid && vm_pids_.count(event.tgid) > 0;
        break;
      case host::ProcessEventKind::kComm: {
        // A task named itself vhost-<pid of a known VM> (PR_SET_NAME or
        // /proc/<pid>/comm; kthread_create's naming sends no event, see
        // kFork).
        relevant = NamesVhostOfKnownVmLocked(event.comm);
        break;
      }
    }
    if (relevant) {
      TriggerLocked(PassTrigger::kProcessEvent,
                    std::chrono::steady_clock::now() + options_.settle);
    } else if (pass_started_.has_value()) {
      NoteIgnoredDuringPassLocked(event);
    }
  }
  if (relevant) wake_.notify_all();
}

void ReconcileLoop::NoteIgnoredDuringPassLocked(const host::ProcessEvent& event) {
  // A QEMU start is a burst of thread forks while the pass its exec
  // triggered lists and tags it; a fork after the listing and before the
  // main thread's tagging leaves a thread that neither inherited the cookie
  // nor was seen. Storms of short-lived processes (cron, monitoring) are
  // one parent each, so the set stays small.
  int owner = 0;
  switch (event.kind) {
    case host::ProcessEventKind::kFork:
      if (event.parent_tgid == 2) {
        owner = VhostOwner(event.comm);  // kthreadd's: a vhost kernel thread
      } else {
        owner = event.tid == event.tgid ? event.parent_tgid : event.tgid;
      }
      break;
    case host::ProcessEventKind::kComm:
      owner = VhostOwner(event.comm);
      break;
    default:
      return;  // an exec that is not QEMU's, an exit: nothing to tag
  }
  if (owner <= 0) return;
  constexpr size_t kMaxIgnoredOwners = 4096;
  if (ignored_during_pass_.size() < kMaxIgnoredOwners) {
    ignored_during_pass_.insert(owner);
  } else {
    ignored_overflow_ = true;
  }
}

bool ReconcileLoop::IgnoredEventConcernsLocked(const std::set<int>& pids) {
  bool concerns = ignored_overflow_;
  for (int owner : ignored_during_pass_) concerns = concerns || pids.count(owner) > 0;
  ignored_during_pass_.clear();
  ignored_overflow_ = false;
  return concerns;
}

void ReconcileLoop::Run() {
  auto last_pass = std::chrono::steady_clock::time_point();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    wake_.wait_until(lock, last_pass + options_.rescan_interval,
                     [this] { return stopping_ || triggered_; });
    if (stopping_) break;
    // Let a burst of events (a VM starting its threads) settle a moment,
    // and keep passes min_gap apart; a Trigger() meanwhile ends the settling.
    while (triggered_ && !stopping_) {
      const auto earliest = std::max(last_pass + options_.min_gap, not_before_);
      if (std::chrono::steady_clock::now() >= earliest) break;
      wake_.wait_until(lock, earliest);
    }
    if (stopping_) break;
    const PassTrigger trigger = triggered_ ? trigger_ : PassTrigger::kRescan;
    triggered_ = false;
    lock.unlock();
    last_pass = std::chrono::steady_clock::now();
    Pass(trigger);
    lock.lock();
  }
}

std::vector<v1::ImpostorProcess> ImpostorsOf(const std::vector<discovery::DiscoveredVm>& vms) {
  std::vector<v1::ImpostorProcess> impostors;
  for (const discovery::DiscoveredVm& vm : vms) {
    if (!vm.impostor) continue;
    v1::ImpostorProcess& p = impostors.emplace_back();
    p.set_pid(vm.qemu_pid);
    // Bounded as csd takes them: what a process claims is its own choice.
    p.set_claimed_vm_id(vm.impostor->claimed_vm_id.substr(0, 256));
    p.set_claimed_uuid(vm.impostor->claimed_uuid.substr(0, 256));
    p.set_reason(vm.impostor->reason.substr(0, 512));
  }
  return impostors;
}

namespace {

bool SameImpostors(const std::vector<v1::ImpostorProcess>& a,
                   const std::vector<v1::ImpostorProcess>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const v1::ImpostorProcess& x, const v1::ImpostorProcess& y) {
                      return x.SerializeAsString() == y.SerializeAsString();
                    });
}

}  // namespace

std::vector<v1::ImpostorProcess> ReconcileLoop::Impostors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return impostors_;
}

std::map<std::string, std::vector<int>> SetAsideDuplicates(std::vector<discovery::DiscoveredVm>& vms) {
  std::map<std::string, std::string> first;  // vm_id or uuid -> the first VM's id
  std::map<std::string, std::vector<int>> impostors;
  for (discovery::DiscoveredVm& vm : vms) {
    std::string claimed;
    for (const std::string* key : {&vm.vm_id, &vm.uuid}) {
      if (key->empty()) continue;
      if (auto it = first.find(*key); it != first.end()) claimed = it->second;
    }
    if (!claimed.empty()) {
      LOG_EVERY_N(WARNING, 100) << "QEMU pid " << vm.qemu_pid << " claims VM '" << vm.vm_id
                                << "' (uuid '" << vm.uuid << "') that VM '" << claimed
                                << "' already runs as: isolating it on a cookie of its own";
      impostors[claimed].push_back(vm.qemu_pid);
      // With no name it gets the fail-closed cookie of its pid, and is not
      // reported: csd would refuse a Report naming a VM twice.
      vm.MarkImpostor(absl::StrCat("another process already runs VM '", claimed, "'"));
      continue;
    }
    for (const std::string* key : {&vm.vm_id, &vm.uuid}) {
      if (!key->empty()) first.emplace(*key, vm.vm_id.empty() ? *key : vm.vm_id);
    }
  }
  return impostors;
}

void ReconcileLoop::Pass(PassTrigger trigger) {
  const auto started = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    pass_started_ = started;
  }
  // Before any lookup: the pass enforces this revision or a later one.
  const int64_t revision = options_.assignment_revision ? options_.assignment_revision() : 0;
  PassRecord record;
  record.trigger = trigger;
  absl::StatusOr<std::vector<discovery::DiscoveredVm>> vms = discovery_->Discover();
  if (!vms.ok()) {
    COSCHED_LOG_EVERY_T(WARNING, 60) << "VM discovery failed; keeping cookies as they "
                                "are: " << vms.status();
    if (options_.on_pass) {
      record.duration = std::chrono::steady_clock::now() - started;
      record.discovery = vms.status();
      options_.on_pass(record);
    }
    std::lock_guard<std::mutex> lock(mu_);
    discovery_status_ = vms.status();
    pass_started_.reset();
    // The VMs are unknown; the next pass (a retry or rescan) lists anew.
    IgnoredEventConcernsLocked({});
    ++passes_;
    wake_.notify_all();
    return;
  }
  const std::map<std::string, std::vector<int>> impostors = SetAsideDuplicates(*vms);
  std::vector<v1::ImpostorProcess> posing = ImpostorsOf(*vms);
  record.impostors = static_cast<int>(posing.size());
  ReconcileResult result = reconciler_->Reconcile(*vms, lookup_);
  for (VmOutcome& vm : result.vms) {
    auto it = impostors.find(vm.vm_id);
    if (it == impostors.end()) continue;
    const bool one = it->second.size() == 1;
    std::string note = absl::StrCat(
        "more than one QEMU process claims VM '", vm.vm_id, "' by name or UUID: ",
        one ? "pid " : "pids ", absl::StrJoin(it->second, ", "), one ? " was" : " were",
        " isolated on cookies of their own; only this one, found first (libvirt's, when "
        "libvirt runs it), gets the VM's assignment");
    const std::string& before = vm.enforcement.last_error();
    vm.enforcement.set_last_error(before.empty() ? note : absl::StrCat(before, "; ", note));
  }
  std::vector<DedicatedVmOutcome> dedicated;
  // Observing, the agent changes no affinity either (dedicated cores and
  // pins are not predicted).
  if (dedicated_ != nullptr && !result.stats.observed) {
    dedicated = EnforceDedicatedCores(*vms, result);
  }
  for (const VmOutcome& vm : result.vms) {
    // Observing, what enforcing would reach is what counts.
    const v1::EnforcementState state = vm.enforcement.state() == v1::ENFORCEMENT_STATE_OBSERVED
                                           ? vm.enforcement.observed_state()
                                           : vm.enforcement.state();
    if (state != v1::ENFORCEMENT_STATE_ENFORCED && state != v1::ENFORCEMENT_STATE_FAIL_CLOSED) {
      COSCHED_LOG_EVERY_T(WARNING, 60)
          << "vm " << vm.vm_id << ": " << vm.enforcement.ShortDebugString();
    }
  }
  // Passes that change something are worth a line; quiet ones are not.
  // Observing, every pass would write the same again: a line a minute.
  if (result.stats.observed) {
    COSCHED_LOG_EVERY_T(INFO, 60)
        << "reconcile pass (observing, nothing written): " << result.stats.vms << " VMs, "
        << result.stats.threads << " threads; enforcing would move "
        << result.stats.observed_moves << " threads with " << result.stats.observed_writes
        << " prctl writes";
  }
  LOG_IF(INFO, !result.stats.observed && (result.stats.cookie_writes > 0 || passes() == 0))
      << "reconcile pass: " << result.stats.vms << " VMs, "
      << result.stats.threads << " threads, " << result.stats.threads_changed
      << " threads moved, " << result.stats.cookie_writes << " prctl writes, "
      << result.stats.duration.count() / 1000 << " us";
  if (options_.on_pass) {
    record.duration = std::chrono::steady_clock::now() - started;
    record.result = &result;
    options_.on_pass(record);
  }
  std::set<int> pids;
  for (const discovery::DiscoveredVm& vm : *vms) pids.insert(vm.qemu_pid);
  bool changed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    changed = !last_ || !discovery_status_.ok() || !SameReported(*last_, result) ||
              revision != last_revision_ || !SameImpostors(impostors_, posing);
    last_ = std::move(result);
    impostors_ = std::move(posing);
    last_revision_ = revision;
    pass_started_.reset();
    last_dedicated_ = std::move(dedicated);
    discovery_status_ = absl::OkStatus();
    if (IgnoredEventConcernsLocked(pids)) {
      TriggerLocked(PassTrigger::kProcessEvent,
                    std::chrono::steady_clock::now() + options_.settle);
    }
    vm_pids_ = std::move(pids);
  }
  if (changed && on_change_) on_change_();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++passes_;
  }
  wake_.notify_all();
}

absl::StatusOr<std::vector<v1::VMObservation>> ReconcileLoop::Observations()
    const {
  std::lock_guard<std::mutex> lock(mu_);
  if (pass_started_.has_value()) {
    const auto running = std::chrono::steady_clock::now() - *pass_started_;
    if (running > options_.stuck_after) {
      const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(running).count();
      COSCHED_LOG_EVERY_T(ERROR, 60) << "reconcile pass running for " << seconds
                             << " s: stuck reading /proc or asking libvirtd; new VMs are "
                                "not tagged and reports are withheld until it ends";
      return absl::DeadlineExceededError(absl::StrCat(
          "the reconcile pass has been running for ", seconds,
          " s (stuck reading /proc or asking libvirtd?): its last results are not current"));
    }
  }
  if (!discovery_status_.ok()) {
    return absl::Status(discovery_status_.code(),
                        absl::StrCat("VM discovery: ", discovery_status_.message()));
  }
  std::vector<v1::VMObservation> observations;
  const auto now = google::protobuf::util::TimeUtil::GetCurrentTime();
  for (const VmOutcome& vm : last_->vms) {
    // csd refuses a whole Report with an id it cannot take: leave out a VM
    // without one (QEMU without -name and -uuid) or with a name outside the
    // id rule. It is still tagged (failed closed); only csd cannot know it.
    if (absl::Status valid = ValidateId("vm_id", vm.vm_id); !valid.ok()) {
      LOG_EVERY_N(WARNING, 100) << "not reporting VM '" << vm.vm_id << "' (uuid '" << vm.uuid
                                << "') to csd: " << valid.message();
      continue;
    }
    v1::VMObservation o;
    o.set_vm_id(vm.vm_id);
    o.set_uuid(vm.uuid);
    *o.mutable_enforcement() = vm.enforcement;
    *o.mutable_enforcement()->mutable_report_time() = now;
    if (vm.metadata) *o.mutable_metadata() = *vm.metadata;
    o.set_metadata_unknown(vm.metadata_unknown);
    observations.push_back(std::move(o));
  }
  return observations;
}

int64_t ReconcileLoop::enforced_revision() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_revision_;
}

int ReconcileLoop::passes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return passes_;
}

bool ReconcileLoop::WaitForPasses(int passes,
                                  std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return wake_.wait_for(lock, timeout, [&] { return passes_ >= passes; });
}

std::optional<ReconcileResult> ReconcileLoop::last_result() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

std::vector<DedicatedVmOutcome> ReconcileLoop::last_dedicated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_dedicated_;
}

std::vector<DedicatedVmOutcome> ReconcileLoop::EnforceDedicatedCores(
    const std::vector<discovery::DiscoveredVm>& vms, ReconcileResult& result) {
  std::vector<DedicatedVmThreads> threads;
  for (const discovery::DiscoveredVm& vm : vms) {
    DedicatedVmThreads t;
    t.vm_id = vm.vm_id;
    // Enforcement off: no dedicated core and no pin either, so the
    // enforcer gives every thread it confined its CPUs back.
    std::optional<v1::Assignment> assignment =
        result.enforcement_off ? std::nullopt : lookup_(vm);
    t.dedicated = assignment.has_value() &&
                  (assignment->dedicated_cores() ||
                   assignment->isolation() == v1::ISOLATION_LEVEL_DEDICATED);
    if (assignment.has_value() && assignment->has_pin() &&
        assignment->pin().host_id() == options_.host_id) {
      t.pin = host::CpuSet(
          std::vector<int>(assignment->pin().cpus().begin(), assignment->pin().cpus().end()));
    }
    for (const discovery::DiscoveredThread& thread : vm.threads) {
      (thread.kind == discovery::DiscoveredThread::Kind::kVcpu ? t.vcpu_tids
                                                    : t.other_tids)
          .push_back(thread.tid);
    }
    threads.push_back(std::move(t));
  }
  DedicatedCoreResult applied = dedicated_->Enforce(threads);
  LOG_IF(INFO, applied.stats.affinity_writes > 0)
      << "dedicated cores and pins: " << applied.stats.affinity_writes
      << " affinity writes, " << applied.stats.threads_restored
      << " threads given their CPUs back; shared CPUs "
      << applied.plan.shared.ToString();
  std::map<std::string, const DedicatedVmOutcome*> by_vm;
  for (const DedicatedVmOutcome& o : applied.vms) by_vm[o.vm_id] = &o;
  for (VmOutcome& vm : result.vms) {
    auto it = by_vm.find(vm.vm_id);
    if (it != by_vm.end()) MergeDedicatedOutcome(*it->second, vm.enforcement);
  }
  return std::move(applied.vms);
}

}  // namespace cosched::agent
