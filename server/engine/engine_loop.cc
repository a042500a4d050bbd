#include "server/engine/engine_loop.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <future>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/log_every.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "common/validation.h"
#include "glog/logging.h"
#include "google/protobuf/util/time_util.h"
#include "policy/layout_rules.h"
#include "policy/tradeoff.h"
#include "policy/trust_group.h"
#include "server/engine/engine_history.h"
#include "server/engine/layout_changes.h"
#include "server/engine/plan_report.h"
#include "server/state/host_enablement.h"
#include "server/state/write_support.h"

namespace cosched::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A write that lost a race is re-planned from a fresh read this many times
// before the host waits for its next trigger or pass.
constexpr int kWriteAttempts = 3;

// A host's last predictions stand while its VMs' loads stay near the
// loads they were predicted at (EngineLoop::Predict), within
// EngineOptions' reuse bounds: no VM's load per vCPU moved more than
// reuse_vm_load_move (0.1), and all of them together (the sum of each
// VM's vCPUs times its move) by at most reuse_host_load_share (2%) of the
// host's CPUs. Measured loads wander from one minute's window to the
// next: with a bound on each VM alone (it was 0.02), a host of 20 VMs
// whose loads wander by 0.05 a window was predicted again every pass,
// which cost csd a fleet-wide re-plan every replan_interval
// (docs/benchmarks.md, --noise). The anchor is the memo's loads, so a
// slow drift is predicted again once it adds up.
bool LoadsNear(const policy::Scenario& scenario, const std::vector<double>& loads,
               const std::vector<double>& memo, const EngineOptions& options) {
  if (loads.size() != memo.size() || loads.size() != scenario.vms.size()) return false;
  double moved_cpus = 0;
  for (size_t v = 0; v < loads.size(); ++v) {
    const double move = std::abs(loads[v] - memo[v]);
    if (move > options.reuse_vm_load_move) return false;
    moved_cpus += move * scenario.vms[v].vcpus * scenario.vms[v].count;
  }
  return moved_cpus <= options.reuse_host_load_share * scenario.cpus();
}

// Memos a host keeps (EngineLoop::Predict): one per move it has, and a few
// more for layouts it just left.
constexpr size_t kMaxMemos = 12;

bool EngineManaged(const v1::VM& vm, const v1::TenantPolicy& policy, bool dry_run) {
  return policy::IsAuto(policy) && vm.requested_isolation() == v1::ISOLATION_LEVEL_UNSPECIFIED &&
         (dry_run || policy::Applies(policy));
}

// Runs fn(0) to fn(n - 1) on up to `threads` threads (this one among them),
// each index once.
void ParallelFor(size_t n, int threads, const std::function<void(size_t)>& fn) {
  const size_t workers = std::min<size_t>(n, std::max(1, threads));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> helpers;
  for (size_t w = 1; w < workers; ++w) {
    helpers.push_back(NamedThread("cs-engine-pass", [&] { work(); }));
  }
  work();
  for (std::thread& t : helpers) t.join();
}

}  // namespace

EngineLoop::EngineLoop(store::Store& store, Layouts& layouts, const StatsSource& stats,
                       const StateSettings& settings,
                       std::vector<std::pair<std::string, std::string>> conflicts,
                       EngineOptions options, Hooks hooks, Observers observers)
    : store_(store),
      layouts_(layouts),
      stats_(stats),
      settings_(settings),
      conflicts_(std::move(conflicts)),
      options_(std::move(options)),
      hooks_(std::move(hooks)),
      observers_(std::move(observers)) {}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::Start() { thread_ = NamedThread("cs-engine", [this] { Loop(); }); }

void EngineLoop::Trigger(const std::string& host_id) {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    if (stopping_) return;
    triggered_.insert(host_id);
  }
  wake_.notify_all();
}

std::chrono::seconds EngineLoop::ReplanInterval() const {
  std::lock_guard<std::mutex> lock(options_mu_);
  return options_.replan_interval;
}

void EngineLoop::SetOptions(const EngineOptions& options) {
  {
    std::lock_guard<std::mutex> pass(pass_mu_);
    std::lock_guard<std::mutex> controls(controls_mu_);
    std::lock_guard<std::mutex> lock(options_mu_);
    const bool interval = options.replan_interval != options_.replan_interval;
    options_ = options;
    for (auto& [host_id, control] : hosts_) {
      control.gate.SetOptions(options.hysteresis);
      control.watch.SetOptions(options.budget);
      // Made with the old predict_s and screen_s; and a move the old
      // bounds refused may pass the new ones: tried afresh from the first.
      control.memos.clear();
      control.next_move = 0;
    }
    if (!interval) return;
  }
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    interval_changed_ = true;
  }
  wake_.notify_all();
}

void EngineLoop::Loop() {
  auto next_pass = SteadyClock::now() + ReplanInterval();
  std::unique_lock<std::mutex> lock(wake_mu_);
  while (!stopping_) {
    wake_.wait_until(lock, next_pass,
                     [this] { return stopping_ || !triggered_.empty() || interval_changed_; });
    if (stopping_) break;
    if (interval_changed_) {
      interval_changed_ = false;
      next_pass = SteadyClock::now() + ReplanInterval();
      if (triggered_.empty()) continue;
    }
    std::set<std::string> hosts = std::move(triggered_);
    triggered_.clear();
    const bool interval = SteadyClock::now() >= next_pass;
    lock.unlock();
    // With replicas sharing a store, only the leader decides (its writes
    // are fenced on its leadership as well: see ApplyLayout).
    const bool leads = store_.Leads();
    if (leads != leading_) {
      std::lock_guard<std::mutex> pass(pass_mu_);
      std::lock_guard<std::mutex> controls(controls_mu_);
      leading_ = leads;
      // What it held of each host may be stale by now: it is read again
      // from the store (the dwell from decisions, the hourly count from
      // the audit trail), as after a restart.
      hosts_.clear();
      restored_changes_.reset();
      LOG(INFO) << "policy engine: " << (leads ? "this replica decides" : "another replica decides");
    }
    if (!leads) {
      if (interval) next_pass = SteadyClock::now() + ReplanInterval();
    } else if (interval) {
      RunPass(true);
      next_pass = SteadyClock::now() + ReplanInterval();
    } else if (hosts.count("") != 0) {
      RunPass(false);
    } else {
      for (const std::string& host : hosts) ReplanHost(host);
    }
    lock.lock();
  }
}

absl::StatusOr<std::set<std::string>> EngineLoop::ManagedHosts(bool dry_run,
                                                               const std::string& tenant) {
  std::set<std::string> hosts;
  std::set<std::string> of_tenant;
  RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
    hosts.clear();
    of_tenant.clear();
    store::Page page;
    page.limit = internal::kMaxPageSize;
    while (true) {
      ASSIGN_OR_RETURN(auto policies, txn.ListTenantPolicies(page));
      for (const v1::TenantPolicy& p : policies) {
        if (!policy::IsAuto(p) || !(dry_run || policy::Applies(p))) continue;
        store::VmFilter filter;
        filter.tenant_id = p.tenant_id();
        ASSIGN_OR_RETURN(auto vms, store::ListAllVms(txn, filter));
        for (const v1::VM& vm : vms) {
          if (!vm.host_id().empty() && EngineManaged(vm, p, dry_run)) hosts.insert(vm.host_id());
        }
      }
      if (static_cast<int>(policies.size()) < page.limit) break;
      page.after = policies.back().tenant_id();
    }
    if (!dry_run) {
      // A flagged host is visited until the flag clears, also once it runs
      // no VM the engine manages.
      store::Page hosts_page;
      hosts_page.limit = internal::kMaxPageSize;
      while (true) {
        ASSIGN_OR_RETURN(auto listed, txn.ListHosts(hosts_page));
        for (const v1::Host& h : listed) {
          if (!h.budget_unmet().empty()) hosts.insert(h.host_id());
        }
        if (static_cast<int>(listed.size()) < hosts_page.limit) break;
        hosts_page.after = listed.back().host_id();
      }
    }
    if (tenant.empty()) return absl::OkStatus();
    store::VmFilter filter;
    filter.tenant_id = tenant;
    ASSIGN_OR_RETURN(auto vms, store::ListAllVms(txn, filter));
    for (const v1::VM& vm : vms) of_tenant.insert(vm.host_id());
    return absl::OkStatus();
  }));
  if (tenant.empty()) return hosts;
  std::set<std::string> both;
  std::set_intersection(hosts.begin(), hosts.end(), of_tenant.begin(), of_tenant.end(),
                        std::inserter(both, both.end()));
  return both;
}

HostControl& EngineLoop::ControlOf(const HostState& state,
                                               SteadyClock::time_point now) {
  std::lock_guard<std::mutex> lock(controls_mu_);
  auto [it, inserted] = hosts_.try_emplace(state.host.host_id(), options_);
  if (inserted) {
    // Its changes of the last hour before csd started count toward
    // max_changes_per_hour (engine_history.h), read once for every host.
    if (!restored_changes_) {
      auto changes = LayoutChangesSince(store_, absl::Now() - absl::Hours(1));
      LOG_IF(WARNING, !changes.ok())
          << "policy engine: reading its changes of the last hour from the audit trail: "
          << changes.status() << "; the hourly counts start afresh";
      restored_changes_ = changes.ok() ? *std::move(changes) : ChangesByHost();
    }
    if (auto restored = restored_changes_->find(state.host.host_id());
        restored != restored_changes_->end()) {
      for (absl::Time at : restored->second) {
        const absl::Duration age = std::max(absl::ZeroDuration(), absl::Now() - at);
        it->second.gate.RestoreChange(now - absl::ToChronoSeconds(age));
      }
    }
    // A csd that restarts holds the layout its predecessor wrote: the
    // layout's dwell counts from the newest engine decision on the host.
    std::optional<absl::Time> newest;
    for (const v1::VM& vm : state.vms) {
      if (vm.decision().decided_by() != v1::DECIDED_BY_ENGINE) continue;
      absl::Time at = absl::FromUnixNanos(
          google::protobuf::util::TimeUtil::TimestampToNanoseconds(vm.decision().decided_at()));
      newest = std::max(newest.value_or(at), at);
    }
    if (newest) {
      const absl::Duration age = std::max(absl::ZeroDuration(), absl::Now() - *newest);
      it->second.gate.HeldSince(now - absl::ToChronoSeconds(age));
    }
  }
  return it->second;
}

policy::PlanOptions EngineLoop::PlanOptions() const {
  policy::PlanOptions options;
  options.predict_s = options_.predict_s;
  options.screen_s = options_.screen_s;
  // The screen settles a prediction only when its gain is clear of what
  // the gate will ask for.
  options.level_min_gain = options_.hysteresis.min_gain;
  return options;
}

absl::Status EngineLoop::Predict(const policy::Scenario& scenario,
                                 const std::vector<policy::VmDecision>& current,
                                 policy::LayoutProposal& proposal, HostControl& control) {
  std::string inputs =
      absl::StrCat(scenario.cores, "/", options_.predict_s, "/", options_.screen_s);
  std::vector<double> loads;
  for (size_t v = 0; v < scenario.vms.size(); ++v) {
    const policy::VmSpec& vm = scenario.vms[v];
    const policy::VmDecision& from = current[v];
    const policy::VmDecision& to = proposal.planned[v];
    absl::StrAppend(&inputs, ";", vm.name, ",", vm.tenant, ",", vm.vcpus, ",",
                    absl::StrJoin(vm.classes, "+"), ",", absl::StrJoin(vm.pin_cpus, " "), ",",
                    from.isolation, ",", from.trust_group, ",", absl::StrJoin(from.pin_cpus, " "),
                    ",", to.isolation, ",", to.trust_group, ",", absl::StrJoin(to.pin_cpus, " "));
    loads.push_back(vm.workload.util);
  }
  for (const policy::TenantSpec& t : scenario.tenants) {
    absl::StrAppend(&inputs, ";", t.policy.tenant_id(), "=",
                    t.forced_idle_budget_pct.value_or(-1));
  }
  const uint64_t key = std::hash<std::string>()(inputs);
  const uint64_t at = ++control.predicts;
  if (auto it = control.memos.find(key); it != control.memos.end()) {
    PredictionMemo& memo = it->second;
    if (LoadsNear(scenario, loads, memo.loads, options_)) {
      ++reused_;
      memo.used_at = at;
      proposal.now = memo.now;
      proposal.next = memo.next;
      proposal.gain = memo.gain;
      proposal.screened = memo.screened;
      return policy::PinLayout(scenario, proposal.planned);
    }
  }
  ++predictions_;
  RETURN_IF_ERROR(
      policy::PredictProposal(scenario, current, proposal, policy::SimParams(), PlanOptions()));
  if (proposal.screened) ++screened_;
  if (control.memos.size() >= kMaxMemos && control.memos.count(key) == 0) {
    auto oldest = std::min_element(
        control.memos.begin(), control.memos.end(),
        [](const auto& a, const auto& b) { return a.second.used_at < b.second.used_at; });
    control.memos.erase(oldest);
  }
  control.memos[key] = PredictionMemo{std::move(loads), proposal.now, proposal.next,
                                      proposal.gain, proposal.screened, at};
  return absl::OkStatus();
}

absl::StatusOr<std::optional<EngineLoop::Proposal>> EngineLoop::Propose(
    const HostState& state, HostControl& control, bool dry_run,
    SteadyClock::time_point now) {
  std::vector<bool> managed;
  bool any = false;
  for (const v1::VM& vm : state.vms) {
    managed.push_back(EngineManaged(vm, state.policies.at(vm.tenant_id()), dry_run));
    any = any || managed.back();
  }
  if (!any) return std::nullopt;
  // Its agent sets no cookies (the operator waived cookies on it):
  // there is no isolation to trade for throughput.
  if (EnablementOf(state.host.capabilities().preflight(), settings_.enforce_policy()).state() ==
      v1::HostEnablement::STATE_WAIVED) {
    return std::nullopt;
  }

  ASSIGN_OR_RETURN(policy::Scenario scenario,
                   HostScenario(state, conflicts_, stats_,
                                options_.predict_s));
  std::vector<policy::VmDecision> current = CurrentLayout(state);
  // Where the agent runs each VM's vCPUs.
  RETURN_IF_ERROR(policy::PinLayout(scenario, current));
  ASSIGN_OR_RETURN(std::vector<policy::LayoutProposal> moves,
                   policy::EngineMoves(scenario, current, managed));
  const bool breached = control.watch.breached();
  // One move per re-plan, in turn; over budget, every move, for the best
  // one predicted within it.
  policy::LayoutProposal* chosen = nullptr;
  if (breached) {
    for (policy::LayoutProposal& move : moves) {
      RETURN_IF_ERROR(Predict(scenario, current, move, control));
      if (move.next.within_budget &&
          (chosen == nullptr ||
           move.next.predicted_throughput > chosen->next.predicted_throughput)) {
        chosen = &move;
      }
    }
  } else if (!moves.empty()) {
    chosen = &moves[control.next_move % moves.size()];
    RETURN_IF_ERROR(Predict(scenario, current, *chosen, control));
  }

  Proposal proposal;
  proposal.plan.set_host_id(state.host.host_id());
  if (chosen == nullptr && !breached) {
    proposal.plan.add_reasons("the host already has the engine's layout: no move changes it");
    return proposal;
  }
  if (chosen == nullptr) {
    // Over budget and nothing allowed does better. Flagged (logged, and in
    // the plan's reasons); csd never migrates VMs.
    RETURN_IF_ERROR(FlagUnmetBudget(state, scenario, current, control, PlanOptions(), proposal));
    return proposal;
  }
  RETURN_IF_ERROR(ProposeMove(state, scenario, current, *chosen, control, now, proposal));
  return proposal;
}

absl::Status EngineLoop::FlagUnmetBudget(const HostState& state,
                                         const policy::Scenario& scenario,
                                         std::vector<policy::VmDecision>& current,
                                         const HostControl& control,
                                         const policy::PlanOptions& options,
                                         Proposal& proposal) {
  v1::HostLayoutPlan& plan = proposal.plan;
  ASSIGN_OR_RETURN(policy::CandidateScore held,
                   policy::PredictLayout(scenario, current, policy::SimParams(), options));
  *plan.mutable_current() = Predicted(held, 0);
  plan.add_reasons(absl::StrFormat(
      "measured forced idle over the budget for %d re-plan intervals and no allowed "
      "layout is predicted within it: move VMs to another host (csctl place)",
      control.watch.consecutive_over()));
  COSCHED_LOG_EVERY_T(WARNING, 60) << "policy engine: host " << state.host.host_id() << ": "
                                   << plan.reasons(plan.reasons_size() - 1);
  proposal.budget_unmet = true;
  proposal.budget_reason = absl::StrFormat(
      "measured forced idle over the least budget of its tenants (%.1f%%) and no allowed "
      "layout is predicted within it: move VMs to another host",
      LeastBudget(state).value_or(100));
  return absl::OkStatus();
}

absl::Status EngineLoop::ProposeMove(const HostState& state, const policy::Scenario& scenario,
                                     const std::vector<policy::VmDecision>& current,
                                     policy::LayoutProposal& chosen, HostControl& control,
                                     SteadyClock::time_point now, Proposal& proposal) {
  v1::HostLayoutPlan& plan = proposal.plan;
  const bool breached = control.watch.breached();
  const std::vector<policy::VmDecision>& planned = chosen.planned;
  ASSIGN_OR_RETURN(const EnginePins pins,
                   EnginePins::Make(scenario, state.host.topology(), planned));
  const std::vector<size_t> changed = AddChanges(state, current, planned, pins, plan);
  const policy::CandidateScore& now_score = chosen.now;
  const policy::CandidateScore& new_score = chosen.next;
  const double gain = chosen.gain;
  *plan.mutable_current() = Predicted(now_score, 0);
  *plan.mutable_planned() = Predicted(new_score, gain);
  const std::string summary = MoveSummary(chosen);
  plan.add_reasons(summary);
  if (absl::Status rules = policy::CheckLayout(scenario, planned); !rules.ok()) {
    plan.add_reasons(absl::StrCat("refused by the layout rules: ", rules.message()));
    proposal.next_move = true;
    return absl::OkStatus();
  }
  proposal.kind = breached ? policy::ChangeKind::kBudget : policy::ChangeKind::kGain;
  policy::GateVerdict verdict;
  if (!breached && now_score.within_budget && !new_score.within_budget) {
    verdict.reason =
        "refused: predicted over the forced-idle budget, the layout it would replace within it";
  } else {
    verdict = control.gate.Consider(now, proposal.kind, gain);
    if (verdict.allowed && !breached && !(gain > 0)) {
      // With min_gain 0, layouts predicted alike would otherwise take turns.
      verdict = {false, absl::StrFormat("refused: predicted gain %+.1f%% is none", 100 * gain)};
    }
  }
  plan.add_reasons(verdict.reason);
  bool applies = verdict.allowed;
  // The baseline of the plan's measured gain (plan_report.h), recorded with
  // it: csd keeps no stats across a restart.
  const v1::MeasuredLayout before =
      MeasuredOnHost(stats_, state.host.host_id(), scenario.cpus(), kLoadWindowSeconds);
  for (size_t v : changed) {
    const v1::TenantPolicy& p = state.policies.at(state.vms[v].tenant_id());
    if (!policy::Applies(p)) {
      applies = false;
      continue;
    }
    LayoutChange write;
    write.vm_id = state.vms[v].vm_id();
    write.expected_revision = state.vms[v].assignment().revision();
    write.isolation = planned[v].isolation;
    write.trust_group = planned[v].trust_group;
    write.pin_cpus = pins.Of(planned, v);
    for (const std::string& r : planned[v].reasons) write.decision.add_reasons(r);
    write.decision.add_reasons(summary);
    write.decision.add_reasons(verdict.reason);
    *write.decision.mutable_predicted() = plan.planned();
    *write.decision.mutable_measured_before() = before;
    proposal.writes.push_back(std::move(write));
  }
  if (applies != verdict.allowed) plan.add_reasons("dry run: a tenant has apply: false");
  plan.set_would_apply(applies);
  if (!verdict.allowed) proposal.writes.clear();
  // A move that does not pay gives way to the next; one that pays waits
  // for the gate (min_dwell, the hourly cap) or a tenant's apply.
  const bool pays = verdict.allowed || (!breached && gain >= options_.hysteresis.min_gain &&
                                        gain > 0 &&
                                        !(now_score.within_budget && !new_score.within_budget));
  proposal.next_move = !breached && (!pays || applies);
  return absl::OkStatus();
}

absl::StatusOr<EngineLoop::Outcome> EngineLoop::ReplanAndApply(const std::string& host_id,
                                                               bool interval) {
  for (int attempt = 1;; ++attempt) {
    HostState state;
    // What the pass's Read of the fleet saw, or newer: a write of the
    // engine compares what it read (layouts.cc), so a host a replica
    // changed meanwhile is read again, not overwritten.
    absl::Status read = store_.ReadRecent([&](store::Transaction& txn) -> absl::Status {
      ASSIGN_OR_RETURN(state, ReadHostState(txn, host_id));
      return absl::OkStatus();
    });
    // A host removed since it was named has nothing to plan.
    if (read.code() == absl::StatusCode::kFailedPrecondition) return Outcome();
    RETURN_IF_ERROR(read);
    const SteadyClock::time_point now = hooks_.clock ? hooks_.clock() : SteadyClock::now();
    HostControl& control = ControlOf(state, now);
    // A trigger (a VM came, left or was retagged, a policy changed) starts
    // the host's moves over: its groups first.
    if (!interval && attempt == 1) control.next_move = 0;
    if (interval && attempt == 1) {
      const v1::MeasuredLayout measured =
          MeasuredOnHost(stats_, host_id, 2 * state.host.topology().cores_size(),
                         options_.replan_interval.count());
      control.watch.Observe(measured.has_forced_idle_pct() ? measured.forced_idle_pct()
                                                           : std::nan(""),
                            LeastBudget(state));
    }
    ASSIGN_OR_RETURN(std::optional<Proposal> proposal, Propose(state, control, false, now));
    // The move was judged; applied moves count once written.
    if (proposal && proposal->next_move && proposal->writes.empty()) ++control.next_move;
    Outcome outcome;
    if (interval && attempt == 1) {
      if (auto report = ReportHost(state, stats_);
          report && report->has_forced_idle_error_pct()) {
        outcome.forced_idle_error_pct = report->forced_idle_error_pct();
      }
    }
    outcome.budget_unmet = proposal && proposal->budget_unmet;
    // Judged on measurements, so only an interval pass sets or clears it.
    if (interval && attempt == 1) {
      FlagBudget(state, outcome.budget_unmet ? proposal->budget_reason : "");
    }
    if (!proposal || proposal->writes.empty()) return outcome;
    if (hooks_.before_write) hooks_.before_write(host_id);
    std::promise<absl::StatusOr<int64_t>> written;
    layouts_.ApplyLayout(host_id, proposal->writes,
                        [&](absl::StatusOr<int64_t> r) { written.set_value(std::move(r)); });
    absl::StatusOr<int64_t> revision = written.get_future().get();
    if (revision.ok()) {
      const bool budget = proposal->kind == policy::ChangeKind::kBudget;
      control.gate.Changed(now);
      if (budget) control.watch.Reset();
      ++control.next_move;
      if (observers_.changed) observers_.changed(budget);
      LOG(INFO) << "policy engine: host " << host_id << " changed "
                << proposal->writes.size() << " VM(s) at revision " << *revision << ": "
                << proposal->plan.reasons(0);
      outcome.changed = true;
      return outcome;
    }
    if (revision.status().code() != absl::StatusCode::kAborted || attempt == kWriteAttempts) {
      return revision.status();
    }
    VLOG(1) << "policy engine: host " << host_id << ": " << revision.status()
            << "; re-planning";
  }
}

void EngineLoop::FlagBudget(const HostState& state, const std::string& reason) {
  if (state.host.budget_unmet().empty() == reason.empty()) return;
  std::promise<absl::StatusOr<bool>> written;
  layouts_.SetBudgetFlag(state.host.host_id(), reason,
                        [&](absl::StatusOr<bool> r) { written.set_value(std::move(r)); });
  absl::StatusOr<bool> flagged = written.get_future().get();
  LOG_IF_EVERY_N(WARNING, !flagged.ok(), 100)
      << "policy engine: flagging host " << state.host.host_id() << ": " << flagged.status()
      << " (logged every 100th time)";
}

bool EngineLoop::ReplanHost(const std::string& host_id) {
  std::lock_guard<std::mutex> lock(pass_mu_);
  absl::StatusOr<Outcome> outcome = ReplanAndApply(host_id, false);
  LOG_IF_EVERY_N(WARNING, !outcome.ok(), 100)
      << "policy engine: host " << host_id << ": " << outcome.status()
      << " (logged every 100th time)";
  return outcome.ok() && outcome->changed;
}

int EngineLoop::RunPass(bool interval) {
  std::lock_guard<std::mutex> lock(pass_mu_);
  absl::StatusOr<std::set<std::string>> hosts = ManagedHosts(false, "");
  if (!hosts.ok()) {
    LOG_EVERY_N(WARNING, 10) << "policy engine: listing hosts: " << hosts.status();
    return 0;
  }
  // Hosts are planned independently (a host's plan reads its own records
  // and stats, and writes them in commits of its own), so at once.
  const std::vector<std::string> order(hosts->begin(), hosts->end());
  std::vector<absl::StatusOr<Outcome>> outcomes(order.size(), Outcome());
  ParallelFor(order.size(), options_.planner_threads,
              [&](size_t i) { outcomes[i] = ReplanAndApply(order[i], interval); });
  int changed = 0;
  int budget_unmet = 0;
  std::map<std::string, double> errors;
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& host = order[i];
    const absl::StatusOr<Outcome>& outcome = outcomes[i];
    LOG_IF_EVERY_N(WARNING, !outcome.ok(), 100)
        << "policy engine: host " << host << ": " << outcome.status()
        << " (logged every 100th time)";
    if (!outcome.ok()) continue;
    if (outcome->changed) ++changed;
    if (outcome->budget_unmet) ++budget_unmet;
    if (outcome->forced_idle_error_pct) errors[host] = *outcome->forced_idle_error_pct;
  }
  if (interval && observers_.budget_unmet) observers_.budget_unmet(budget_unmet);
  if (interval && observers_.prediction_errors) observers_.prediction_errors(errors);
  return changed;
}

}  // namespace cosched::server
