#include "agent/cookie_reconciler.h"

#include <algorithm>
#include <set>
#include <system_error>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log_every.h"
#include "common/names.h"
#include "host/core_sched_shadow.h"
#include "glog/logging.h"

namespace cosched::agent {

struct CookieReconciler::ThreadState {
  int tid = 0;
  // Out of the VM's thread scope: must hold no cookie.
  bool in_scope = true;
  bool alive = true;
  bool changed = false;
  uint64_t actual = 0;
  absl::Status error;  // a failure other than "the thread is gone"
};

struct CookieReconciler::VmPlan {
  const discovery::DiscoveredVm* vm = nullptr;
  VmOutcome outcome;
  // False for a fail-open VM without assignment: left as it is.
  bool managed = true;
  std::vector<ThreadState> threads;
};

namespace {

// Fail-closed groups are named apart from every valid trust group (those
// begin with a tenant id, never '~') and from each other: a VM id has no
// '/', so "~fail-closed/<vm id>" never equals "~fail-closed-pid/<pid>" of
// a QEMU without a name.
constexpr char kFailClosedPrefix[] = "~fail-closed/";
constexpr char kFailClosedPidPrefix[] = "~fail-closed-pid/";

// Runs `fn` on a new thread that ends right after: the courier whose copy
// of a VM's cookie must not outlive its errand. RESOURCE_EXHAUSTED when no
// thread can be started (the host is out of pids or memory): the agent
// reports that and goes on, rather than dying into a restart loop.
template <typename Fn>
absl::Status OnCourierThread(host::CoreSched* kernel, Fn fn) {
  try {
    std::thread courier([&] {
      kernel->OnCourierStart();
      fn();
      kernel->OnCourierEnd();
    });
    courier.join();
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start a thread to carry the cookie: ", e.what()));
  }
  return absl::OkStatus();
}

void NoteError(v1::VMEnforcement& e, const absl::Status& status) {
  e.set_last_error(std::string(status.message()));
}

std::string BlindReadbackMessage(int unverified) {
  return absl::StrCat(
      "cookies cannot be verified: the kernel reads every cookie back as 0 "
      "(PR_SCHED_CORE_GET before its pointer-hash key is ready: Linux 6.1 "
      "early after boot, short of entropy); ",
      unverified, " threads were given the group's cookie once and are not "
      "rewritten; rechecked every pass");
}

}  // namespace

std::string FailClosedGroup(const discovery::DiscoveredVm& vm) {
  // A QEMU without a name still gets a cookie no other VM shares.
  if (vm.vm_id.empty()) return absl::StrCat(kFailClosedPidPrefix, vm.qemu_pid);
  return absl::StrCat(kFailClosedPrefix, vm.vm_id);
}

bool InScope(const discovery::DiscoveredThread& thread, v1::ThreadScope scope) {
  switch (scope) {
    case v1::THREAD_SCOPE_VCPUS:
      return thread.kind == discovery::DiscoveredThread::Kind::kVcpu;
    case v1::THREAD_SCOPE_FULL:
      return true;
    case v1::THREAD_SCOPE_EMULATOR:
    default:
      return thread.kind != discovery::DiscoveredThread::Kind::kHelper;
  }
}

CookieReconciler::CookieReconciler(host::CoreSched* kernel, ReconcilerOptions options)
    : kernel_(kernel),
      options_(std::move(options)),
      fail_open_(options_.fail_open),
      clear_on_hazard_(options_.clear_on_hazard),
      observe_(options_.observe) {}

void CookieReconciler::SetPolicy(bool fail_open, bool clear_on_hazard, bool observe) {
  fail_open_ = fail_open;
  clear_on_hazard_ = clear_on_hazard;
  observe_ = observe;
}

bool CookieReconciler::WrittenAs(int tid, const std::string& group) const {
  auto it = written_.find(tid);
  return it != written_.end() && it->second == group;
}

std::string CookieReconciler::HostUnsupportedMessage() const {
  if (!options_.smt_active) {
    return absl::StrCat("no SMT on this host: core scheduling has nothing to "
                        "isolate (", options_.probe.detail, ")");
  }
  return options_.probe.detail.empty() ? "core scheduling is not available"
                                       : options_.probe.detail;
}

ReconcileResult CookieReconciler::Reconcile(
    const std::vector<discovery::DiscoveredVm>& vms, const AssignmentLookup& lookup) {
  if (observe_) return Observe(vms, lookup);
  const auto started = std::chrono::steady_clock::now();
  ReconcileResult result;
  std::vector<VmPlan> plans;
  plans.reserve(vms.size());
  for (const discovery::DiscoveredVm& vm : vms) {
    VmPlan plan;
    plan.vm = &vm;
    VmOutcome& out = plan.outcome;
    out.vm_id = vm.vm_id;
    out.uuid = vm.uuid;
    out.cgroup = vm.cgroup;
    out.run_state = vm.run_state;
    out.metadata = vm.metadata;
    out.metadata_unknown = vm.metadata_unknown;
    // An impostor (a process posing as a VM) never gets an assignment, and
    // fails closed even with fail_open: untagged, it could share cores
    // with whatever else runs untagged.
    std::optional<v1::Assignment> assignment =
        vm.impostor ? std::nullopt : lookup(vm);
    v1::ThreadScope scope = v1::THREAD_SCOPE_EMULATOR;
    out.assigned = assignment.has_value();
    if (!assignment) {
      if (fail_open_ && !vm.impostor) {
        plan.managed = false;
        out.enforcement.set_state(v1::ENFORCEMENT_STATE_PENDING);
        out.enforcement.set_last_error(
            "no assignment from csd yet; fail_open leaves the VM as it is");
      } else {
        out.group = FailClosedGroup(vm);
      }
    } else {
      scope = assignment->thread_scope();
      if (assignment->isolation() != v1::ISOLATION_LEVEL_NONE) {
        out.group = assignment->trust_group();
        if (out.group.empty()) out.group = FailClosedGroup(vm);
      }
    }
    int vcpus = 0;
    for (const discovery::DiscoveredThread& t : vm.threads) {
      ThreadState state;
      state.tid = t.tid;
      state.in_scope = InScope(t, scope);
      plan.threads.push_back(state);
      if (t.kind == discovery::DiscoveredThread::Kind::kVcpu) ++vcpus;
    }
    // For csd's placement view and ExplainVM.
    out.enforcement.set_vcpus(vcpus);
    std::sort(plan.threads.begin(), plan.threads.end(),
              [](const ThreadState& a, const ThreadState& b) { return a.tid < b.tid; });
    plans.push_back(std::move(plan));
  }

  const bool supported =
      options_.smt_active &&
      options_.probe.support == v1::CORE_SCHED_SUPPORT_SUPPORTED;
  if (!supported) {
    const std::string why = HostUnsupportedMessage();
    for (VmPlan& plan : plans) {
      for (const ThreadState& t : plan.threads) {
        if (t.in_scope) plan.outcome.tids.push_back(t.tid);
      }
      const int found = static_cast<int>(plan.outcome.tids.size());
      v1::VMEnforcement& e = plan.outcome.enforcement;
      e.set_threads_found(found);
      e.set_threads_untaggable(found);
      e.set_state(v1::ENFORCEMENT_STATE_FAILED);
      e.set_last_error(why);
      result.stats.threads += found;
    }
  } else {
    held_why_ = HazardMessage();
    ReadCookies(plans, result.stats);
    const v1::HostEnablement enablement =
        options_.enablement ? options_.enablement() : v1::HostEnablement();
    if (enablement.state() == v1::HostEnablement::STATE_OFF) {
      result.enforcement_off = true;
      // The operator's off switch: back to cookie 0, whatever else holds
      // (a hazard's hold included: no cookie is what both want).
      const int left = ClearCookies(plans, result.stats, "enforcement switched off");
      Hold(plans, v1::ENFORCEMENT_STATE_OFF,
           left == 0 ? absl::StrCat("enforcement off: ", enablement.reason(),
                                    "; every cookie was taken off")
                     : absl::StrCat("enforcement off: ", enablement.reason(),
                                    "; the cookie could not be taken off ", left, " threads"));
      held_why_.clear();
    } else if (held_why_.empty() &&
               enablement.state() == v1::HostEnablement::STATE_WAIVED) {
      Hold(plans, v1::ENFORCEMENT_STATE_WAIVED,
           absl::StrCat("cookies waived: ", enablement.reason(),
                        "; the VM's threads keep the cookies they have"));
    } else if (held_why_.empty() &&
               enablement.state() == v1::HostEnablement::STATE_NOT_ENABLED) {
      // The same path as waived: a staged rollout decides when this
      // host starts making cookies, and until then it makes and moves none.
      Hold(plans, v1::ENFORCEMENT_STATE_NOT_ENABLED,
           absl::StrCat("cookies not enabled: ", enablement.reason(),
                        "; the VM's threads keep the cookies they have"));
    } else if (held_why_.empty()) {
      // Every write asks MayWrite first: a hazard that appears during the
      // pass stops it before its next write.
      ChooseCookies(plans, result.stats);
      MoveThreads(plans, result.stats);
      Verify(plans, result.stats);
    }
    if (!held_why_.empty()) {
      if (!clear_on_hazard_) {
        absl::StrAppend(&held_why_, "; the VM's threads keep the cookies they have");
      } else if (const int left = ClearCookies(plans, result.stats, "on_hazard: clear"); left == 0) {
        absl::StrAppend(&held_why_, "; on_hazard: clear took every cookie off");
      } else {
        absl::StrAppend(&held_why_, "; on_hazard: clear could not take the cookie off ", left,
                        " threads");
      }
      Hold(plans, v1::ENFORCEMENT_STATE_HELD, held_why_);
    }
  }
  result.stats.vms = static_cast<int>(plans.size());
  result.stats.readback_blind = readback_blind_;
  for (VmPlan& plan : plans) result.vms.push_back(std::move(plan.outcome));
  result.stats.duration = std::chrono::steady_clock::now() - started;
  return result;
}

ReconcileResult CookieReconciler::Observe(const std::vector<discovery::DiscoveredVm>& vms,
                                          const AssignmentLookup& lookup) {
  // A fresh reconciler each pass: it starts from the kernel's cookies as
  // a restarted agent would (adopting those its groups hold), so what it
  // would write is what enforcing from now on would write, and nothing
  // it imagined in an earlier pass carries over.
  host::ShadowCoreSched shadow(kernel_);
  ReconcilerOptions enforcing = options_;
  enforcing.fail_open = fail_open_;
  enforcing.clear_on_hazard = clear_on_hazard_;
  enforcing.observe = false;
  // What enforcing would do once enabled: a canary observes while a
  // staged rollout still holds it (or csd waives cookies), and that is
  // what it is for. The off switch is an operator's order to take
  // cookies off now: it is predicted as it is. A hazard holds as always.
  const v1::HostEnablement enablement =
      options_.enablement ? options_.enablement() : v1::HostEnablement();
  const bool not_yet = enablement.state() == v1::HostEnablement::STATE_NOT_ENABLED ||
                       enablement.state() == v1::HostEnablement::STATE_WAIVED;
  if (not_yet) enforcing.enablement = nullptr;
  ReconcileResult result = CookieReconciler(&shadow, std::move(enforcing)).Reconcile(vms, lookup);
  ReconcileStats& stats = result.stats;
  stats.observed = true;
  stats.observed_writes = stats.cookie_writes;
  stats.observed_moves = stats.threads_changed;
  stats.cookie_writes = 0;
  stats.threads_changed = 0;
  for (VmOutcome& vm : result.vms) {
    v1::VMEnforcement& e = vm.enforcement;
    const v1::EnforcementState would = e.state();
    e.set_observed_state(would);
    e.set_state(v1::ENFORCEMENT_STATE_OBSERVED);
    e.set_last_error(absl::StrCat(
        "observing (enforce: observe), no cookie written: ",
        not_yet ? absl::StrCat("once csd enables cookies here (now ",
                               enablement.state() == v1::HostEnablement::STATE_WAIVED
                                   ? "waived"
                                   : "not enabled",
                               "), ")
                : "",
        "enforcing would make it ", EnforcementStateName(would),
        e.last_error().empty() ? "" : " (", e.last_error(), e.last_error().empty() ? "" : ")"));
    // Its threads keep the cookies they have; the imagined one is no
    // cookie of the kernel's.
    vm.cookie = 0;
  }
  return result;
}

std::string CookieReconciler::HazardMessage() const {
  if (!options_.hazards) return "";
  std::vector<std::string> each;
  for (const v1::Hazard& h : options_.hazards()) each.push_back(h.detail());
  if (each.empty()) return "";
  return absl::StrCat("tagging held: ", absl::StrJoin(each, "; "));
}

bool CookieReconciler::MayWrite() {
  if (held_why_.empty()) held_why_ = HazardMessage();
  return held_why_.empty();
}

void CookieReconciler::Hold(std::vector<VmPlan>& plans, v1::EnforcementState state,
                            const std::string& why) {
  if (state == v1::ENFORCEMENT_STATE_HELD) {
    COSCHED_LOG_EVERY_T(ERROR, 60) << why << " (" << plans.size() << " VMs)";
  }
  for (VmPlan& plan : plans) {
    plan.outcome.tids.clear();
    int found = 0;
    for (const ThreadState& t : plan.threads) {
      if (!t.alive || !t.in_scope) continue;
      plan.outcome.tids.push_back(t.tid);
      ++found;
    }
    v1::VMEnforcement& e = plan.outcome.enforcement;
    e.set_threads_found(found);
    e.set_state(state);
    e.set_last_error(why);
  }
}

void CookieReconciler::ReadCookies(std::vector<VmPlan>& plans,
                                   ReconcileStats& stats) {
  bool any_cookie = false;
  for (VmPlan& plan : plans) {
    if (!plan.managed) continue;
    for (ThreadState& t : plan.threads) {
      ++stats.cookie_reads;
      auto cookie = kernel_->Get(t.tid);
      if (cookie.ok()) {
        t.actual = *cookie;
        any_cookie = any_cookie || *cookie != 0;
      } else if (absl::IsNotFound(cookie.status())) {
        t.alive = false;  // exited since discovery: normal
      } else {
        t.error = cookie.status();
      }
    }
    stats.threads += static_cast<int>(plan.threads.size());
  }
  if (readback_blind_ && any_cookie) {
    // The key is ready: hashes are real from now on. The groups' hashes
    // (0) are forgotten, so each group adopts the cookie its threads hold,
    // which is the one given them while blind.
    LOG(INFO) << "cookies read back again (the kernel's pointer-hash key is "
                 "ready); verifying what was set while they read 0";
    readback_blind_ = false;
    written_.clear();
    for (auto it = cookies_.begin(); it != cookies_.end();) {
      it = it->second.hash == 0 ? cookies_.erase(it) : std::next(it);
    }
  }
}

void CookieReconciler::ChooseCookies(std::vector<VmPlan>& plans,
                                     ReconcileStats& stats) {
  // Threads of each group that can be read, and how many hold each cookie.
  std::map<std::string, std::vector<ThreadState*>> members;
  std::map<std::string, const discovery::DiscoveredVm*> first_vm;
  for (VmPlan& plan : plans) {
    if (!plan.managed || plan.outcome.group.empty()) continue;
    first_vm.try_emplace(plan.outcome.group, plan.vm);
    for (ThreadState& t : plan.threads) {
      if (t.in_scope && t.alive && t.error.ok()) {
        members[plan.outcome.group].push_back(&t);
      }
    }
  }

  // Keep remembered cookies whose anchor (or another member) still holds
  // them; forget groups no longer on the host.
  std::map<std::string, GroupCookie> kept;
  std::set<uint64_t> claimed;
  if (readback_blind_) {
    // Hashes say nothing: a group keeps its cookie while a live member
    // holds it by this reconciler's own record (the anchor, else another).
    for (auto& [group, cookie] : cookies_) {
      auto it = members.find(group);
      if (it == members.end()) continue;
      int anchor = 0;
      for (ThreadState* t : it->second) {
        if (WrittenAs(t->tid, group) && (anchor == 0 || t->tid == cookie.anchor_tid)) {
          anchor = t->tid;
        }
      }
      if (anchor != 0) kept[group] = GroupCookie{0, anchor};
    }
    // A group that lost its cookie gets a new one below: what its threads
    // were given no longer counts. Nor does the record of a thread that is
    // gone, whose tid may come back as a new thread.
    std::set<int> alive;
    for (const VmPlan& plan : plans) {
      for (const ThreadState& t : plan.threads) {
        if (t.alive) alive.insert(t.tid);
      }
    }
    for (auto it = written_.begin(); it != written_.end();) {
      const bool stale = (!it->second.empty() && kept.count(it->second) == 0) ||
                         alive.count(it->first) == 0;
      it = stale ? written_.erase(it) : std::next(it);
    }
    cookies_.clear();
  }
  for (auto& [group, cookie] : cookies_) {
    auto it = members.find(group);
    if (it == members.end()) continue;
    bool valid = false;
    for (ThreadState* t : it->second) {
      if (t->actual == cookie.hash) {
        cookie.anchor_tid = t->tid;
        valid = true;
        break;
      }
    }
    if (!valid) {
      ++stats.cookie_reads;
      auto anchor = kernel_->Get(cookie.anchor_tid);
      valid = anchor.ok() && *anchor == cookie.hash;
    }
    if (valid && claimed.insert(cookie.hash).second) kept[group] = cookie;
  }
  cookies_ = std::move(kept);

  // Adopt cookies already in the kernel (after an agent restart, or set by
  // libvirt's own sched_core): a cookie goes to the group with the most
  // threads holding it, and each group takes its most common free cookie.
  std::vector<std::tuple<int, std::string, uint64_t>> candidates;
  for (auto& [group, threads] : members) {
    if (cookies_.count(group)) continue;
    std::map<uint64_t, int> counts;
    for (ThreadState* t : threads) {
      if (t->actual != 0) ++counts[t->actual];
    }
    for (auto& [hash, count] : counts) candidates.emplace_back(-count, group, hash);
  }
  std::sort(candidates.begin(), candidates.end());
  for (auto& [negative_count, group, hash] : candidates) {
    if (cookies_.count(group) || claimed.count(hash)) continue;
    for (ThreadState* t : members[group]) {
      if (t->actual == hash) {
        cookies_[group] = GroupCookie{hash, t->tid};
        break;
      }
    }
    claimed.insert(hash);
  }

  // Groups with no usable cookie get a new one, created on QEMU's main
  // thread when it is in the group, so threads it creates later inherit it.
  for (auto& [group, threads] : members) {
    if (cookies_.count(group) || threads.empty()) continue;
    const int qemu_pid = first_vm[group]->qemu_pid;
    ThreadState* seed = threads.front();
    for (ThreadState* t : threads) {
      if (t->tid == qemu_pid) seed = t;
    }
    if (!MayWrite()) return;
    ++stats.cookie_writes;
    absl::Status created = kernel_->Create(seed->tid, host::CoreSchedScope::kThread);
    if (!created.ok()) {
      if (absl::IsNotFound(created)) {
        seed->alive = false;
      } else {
        seed->error = created;
      }
      LOG_EVERY_N(WARNING, 100) << "cannot create a cookie for group " << group
                                << ": " << created;
      continue;
    }
    ++stats.cookie_reads;
    auto hash = kernel_->Get(seed->tid);
    if (!hash.ok()) {
      seed->error = hash.status();
      continue;
    }
    if (*hash == 0 && !readback_blind_) {
      // It holds the cookie just made, yet reads 0: every 0 read is
      // meaningless until the kernel can hash again.
      LOG(WARNING) << "a cookie just created on thread " << seed->tid
                   << " reads back as 0: the kernel cannot report cookies yet "
                      "(pointer-hash key not ready); setting each thread once "
                      "and waiting for read-back";
      readback_blind_ = true;
    }
    if (readback_blind_) written_[seed->tid] = group;
    seed->actual = *hash;
    seed->changed = true;
    cookies_[group] = GroupCookie{*hash, seed->tid};
  }
}

void CookieReconciler::MoveThreads(std::vector<VmPlan>& plans,
                                   ReconcileStats& stats) {
  // Targets per destination cookie group ("" = no cookie).
  std::map<std::string, std::vector<ThreadState*>> moves;
  for (VmPlan& plan : plans) {
    if (!plan.managed) continue;
    const std::string& group = plan.outcome.group;
    auto cookie = group.empty() ? cookies_.end() : cookies_.find(group);
    for (ThreadState& t : plan.threads) {
      if (!t.alive || !t.error.ok()) continue;
      if (!t.in_scope && !plan.outcome.assigned) {
        // A VM without an assignment (a new one, or any after the agent
        // lost its state file) is scoped by default, but its cookies may
        // come from an assignment of wider scope: clearing them would untag
        // threads csd wants tagged. Only an assignment may take a cookie.
        continue;
      }
      if (!t.in_scope || group.empty()) {
        if (readback_blind_ ? !WrittenAs(t.tid, "") : t.actual != 0) moves[""].push_back(&t);
      } else if (cookie != cookies_.end() &&
                 (readback_blind_ ? !WrittenAs(t.tid, group)
                                  : t.actual != cookie->second.hash)) {
        // (No cookie: its creation failed, which Verify reports.)
        moves[group].push_back(&t);
      }
    }
  }
  for (auto& [group, targets] : moves) {
    if (!MayWrite()) return;
    GiveCookie(group, targets, stats);
  }
}

int CookieReconciler::ClearCookies(std::vector<VmPlan>& plans, ReconcileStats& stats,
                                   absl::string_view why) {
  std::vector<ThreadState*> targets;
  for (VmPlan& plan : plans) {
    if (!plan.managed) continue;
    for (ThreadState& t : plan.threads) {
      if (!t.alive || !t.error.ok()) continue;
      // While blind, a 0 read proves nothing: clear what this agent gave a
      // cookie, which is every thread it wrote (an unknown one is cleared
      // too: on_hazard: clear asks for no cookie on the host).
      if (readback_blind_ ? !WrittenAs(t.tid, "") : t.actual != 0) targets.push_back(&t);
    }
  }
  if (!targets.empty()) {
    LOG(WARNING) << why << ": taking the cookie off " << targets.size() << " threads";
    GiveCookie("", targets, stats);
  }
  cookies_.clear();
  int left = 0;
  for (VmPlan& plan : plans) {
    for (ThreadState& t : plan.threads) {
      if (!t.alive) continue;
      if (t.changed && t.error.ok()) t.actual = 0;
      if (!t.error.ok()) {
        NoteError(plan.outcome.enforcement, t.error);
        ++left;
      }
    }
  }
  return left;
}

void CookieReconciler::GiveCookie(const std::string& group,
                                  const std::vector<ThreadState*>& targets,
                                  ReconcileStats& stats) {
  absl::Status started = OnCourierThread(kernel_, [&] {
    if (!group.empty()) {
      ++stats.cookie_writes;
      const GroupCookie cookie = cookies_[group];
      absl::Status took = kernel_->ShareFrom(cookie.anchor_tid);
      if (took.ok() && !readback_blind_) {
        // The anchor was checked this pass, but its tid may have gone to
        // another task since (it exited and the tid was reused, or someone
        // else re-cookied it): never hand out a cookie that is not the
        // group's.
        ++stats.cookie_reads;
        absl::StatusOr<uint64_t> own = kernel_->Get(0);
        if (!own.ok()) {
          took = own.status();
        } else if (*own != cookie.hash) {
          took = absl::AbortedError(absl::StrCat(
              "the cookie taken from thread ", cookie.anchor_tid, " is not group ", group,
              "'s any more (the thread exited or was re-tagged); nothing was shared"));
        }
      }
      if (!took.ok()) {
        // The anchor vanished or changed: the next pass picks or makes
        // another.
        for (ThreadState* t : targets) t->error = took;
        cookies_.erase(group);
        return;
      }
    } else {
      ++stats.cookie_reads;
      auto own = kernel_->Get(0);
      if (!own.ok() || *own != 0) {
        absl::Status why = own.ok() ? absl::FailedPreconditionError(
                                          "the agent's own threads carry a "
                                          "cookie, so it cannot clear one")
                                    : own.status();
        for (ThreadState* t : targets) t->error = why;
        return;
      }
    }
    for (ThreadState* t : targets) {
      ++stats.cookie_writes;
      absl::Status gave = kernel_->ShareTo(t->tid, host::CoreSchedScope::kThread);
      if (gave.ok()) {
        t->changed = true;
        ++stats.threads_changed;
        if (readback_blind_) written_[t->tid] = group;
      } else if (absl::IsNotFound(gave)) {
        t->alive = false;
      } else {
        t->error = gave;
      }
    }
  });
  if (!started.ok()) {
    for (ThreadState* t : targets) t->error = started;
  }
}

void CookieReconciler::Verify(std::vector<VmPlan>& plans,
                              ReconcileStats& stats) {
  for (VmPlan& plan : plans) {
    VmOutcome& out = plan.outcome;
    v1::VMEnforcement& e = out.enforcement;
    uint64_t want = 0;
    bool have_cookie = true;
    if (!out.group.empty()) {
      auto it = cookies_.find(out.group);
      have_cookie = it != cookies_.end();
      if (have_cookie) want = it->second.hash;
    }
    out.cookie = want;
    int found = 0, tagged = 0, untaggable = 0, unverified = 0;
    for (ThreadState& t : plan.threads) {
      if (t.alive && t.changed && t.error.ok()) {
        ++stats.cookie_reads;
        auto now = kernel_->Get(t.tid);
        if (now.ok()) {
          t.actual = *now;
        } else if (absl::IsNotFound(now.status())) {
          t.alive = false;
        } else {
          t.error = now.status();
        }
      }
      if (!t.alive) continue;
      if (!t.in_scope) {
        if (plan.managed && !t.error.ok()) NoteError(e, t.error);
        continue;
      }
      ++found;
      out.tids.push_back(t.tid);
      if (!t.error.ok()) {
        ++untaggable;
        NoteError(e, t.error);
      } else if (plan.managed && readback_blind_) {
        // A 0 read back proves nothing either way.
        if (have_cookie && WrittenAs(t.tid, out.group)) ++unverified;
      } else if (plan.managed && have_cookie && t.actual == want) {
        ++tagged;
      }
    }
    e.set_threads_found(found);
    if (!plan.managed) continue;
    const int wrong = found - tagged - untaggable - unverified;
    e.set_threads_tagged(tagged);
    e.set_threads_untaggable(untaggable);
    e.set_threads_wrong(wrong);
    if (unverified > 0) {
      stats.threads_unverified += unverified;
      e.set_last_error(e.last_error().empty()
                           ? BlindReadbackMessage(unverified)
                           : absl::StrCat(BlindReadbackMessage(unverified), "; ",
                                          e.last_error()));
    }
    e.set_applied_trust_group(out.assigned ? out.group : "");
    if (!have_cookie && e.last_error().empty()) {
      e.set_last_error("no cookie could be made for the group yet");
    }
    if (found > 0 && tagged == found) {
      e.set_state(out.assigned ? v1::ENFORCEMENT_STATE_ENFORCED
                               : v1::ENFORCEMENT_STATE_FAIL_CLOSED);
    } else if (found == 0) {
      e.set_state(v1::ENFORCEMENT_STATE_PENDING);
      if (e.last_error().empty()) e.set_last_error("no threads found");
    } else if (unverified > 0 && wrong == 0 && untaggable == 0) {
      // Set, as far as the kernel let the agent do it, not yet seen.
      e.set_state(v1::ENFORCEMENT_STATE_PENDING);
    } else {
      e.set_state(tagged > 0 ? v1::ENFORCEMENT_STATE_PARTIAL
                             : v1::ENFORCEMENT_STATE_FAILED);
    }
  }
}

}  // namespace cosched::agent
