// csd's policy engine as a control loop (issue #15): it re-plans every host
// that runs VMs the engine manages (VMs of tenants in mode auto, tagged
// without a level) every replan_interval and whenever the desired state says
// something changed there, and writes what it decides through
// Layouts::ApplyLayout (server/state/layouts.h) like any other change.
//
// One re-plan of a host: csd's records of it and the agents' recent stats
// make a policy::Scenario; each engine-managed VM gets the most relaxed
// level its tenant allows (policy::ChooseGroups), every other VM keeps its
// assignment; CheckLayout judges the layout, PredictLayout predicts it and
// the current one; the host's ReplanGate (min_gain, min_dwell,
// max_changes_per_hour; after a restart its dwell and hourly count are
// restored from the VMs' decided_at and the audit trail) says whether it
// may replace the current one, and
// its BudgetWatch whether measured forced idle has been over the least
// budget of its tenants for budget_windows re-plan intervals in a row, in
// which case a layout predicted within budget needs no gain and no dwell;
// when none is, the host is flagged (Host.budget_unmet, audited). After a
// plan, what it predicted is compared with what the agents measured since
// (plan_report.h; Observers, Plan's report). A tenant with apply: false is planned and shown
// (Plan) but never written.
//
// Thread-safe. The loop runs on its own thread once Start() is called;
// tests call RunPass() instead, with their own clock. A pass plans its hosts
// on options.planner_threads threads at once, each host on one of them.
#ifndef COSCHED_SERVER_ENGINE_ENGINE_LOOP_H_
#define COSCHED_SERVER_ENGINE_ENGINE_LOOP_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosched/v1/control_plane.pb.h"
#include "policy/budget_watch.h"
#include "policy/replan_gate.h"
#include "policy/tradeoff.h"
#include "server/engine/engine_options.h"
#include "server/engine/host_control.h"
#include "server/engine/host_scenario.h"
#include "server/state/layouts.h"
#include "server/state/state_settings.h"
#include "server/stats/stats_source.h"
#include "store/store.h"

namespace cosched::server {

class EngineLoop {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  struct Hooks {
    // The engine's time for hysteresis; nullptr: steady_clock.
    Clock clock;
    // Runs after a host's plan is decided and before it is written: tests
    // race a TagVM into that gap.
    std::function<void(const std::string& host_id)> before_write;
  };

  // What the loop reports as it goes (csd's metrics); unset ones are not
  // called.
  struct Observers {
    // A host's layout changed; `budget`: to restore a measured budget.
    std::function<void(bool budget)> changed;
    // After each interval pass: per host measured, measured - predicted
    // forced idle of its newest plan over the windows since it
    // (plan_report.h).
    std::function<void(const std::map<std::string, double>& error_pct_by_host)>
        prediction_errors;
    // After each interval pass: hosts over budget that no allowed layout
    // is predicted to bring within it.
    std::function<void(int hosts)> budget_unmet;
  };

  // Reads hosts and VMs from `store` and the agents' stats from `stats`,
  // writes its decisions through `layouts`; `settings` says which hosts
  // enforce, `conflicts` which interference classes must not share a core
  // (csd.yaml class_conflicts).
  EngineLoop(store::Store& store, Layouts& layouts, const StatsSource& stats,
             const StateSettings& settings,
             std::vector<std::pair<std::string, std::string>> conflicts, EngineOptions options,
             Hooks hooks = {}, Observers observers = {});
  // Stop()s.
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Starts the loop's thread: a pass over every host each replan_interval,
  // and a re-plan of a host as soon as it is Triggered.
  void Start();
  // Ends the thread (after the re-plan it is in); Trigger does nothing
  // from then on. Idempotent.
  void Stop();
  // Something changed on `host_id` (empty: every host). Only takes note.
  void Trigger(const std::string& host_id);

  // One pass over every host that runs engine-managed VMs. `interval`: the
  // pass of a replan_interval, whose measured forced idle counts as one
  // window of each host's BudgetWatch. Returns how many hosts changed.
  int RunPass(bool interval);
  // Re-plans one host now, as a trigger does. Whether its layout changed.
  bool ReplanHost(const std::string& host_id);

  // New options (a reload of csd.yaml's engine block), from the next
  // re-plan on: after the pass in progress, each host's gate and watch
  // keep what they counted (dwell, changes of the last hour, windows over
  // budget) under the new bounds, predictions are made afresh and moves
  // tried from the first again, and the
  // next interval pass is a new replan_interval from now.
  void SetOptions(const EngineOptions& options);

  // ControlPlane.Plan: what each host would change now, written or not;
  // with request.report, each host's newest applied plan against what was
  // measured since (plan_report.h). INVALID_ARGUMENT for a bad tenant_id.
  absl::StatusOr<v1::PlanResponse> Plan(const v1::PlanRequest& request);

 private:
  // The plan of a host and the writes it takes (of tenants that apply).
  struct Proposal {
    v1::HostLayoutPlan plan;
    std::vector<LayoutChange> writes;
    // The host's next re-plan tries its next move: this one was applied or
    // does not gain min_gain. A move that would gain but waits for
    // min_dwell, the hourly cap or a tenant's apply: false is tried again.
    bool next_move = false;
    policy::ChangeKind kind = policy::ChangeKind::kGain;
    // Measured over budget, and no allowed layout predicted within it.
    bool budget_unmet = false;
    // Why, for Host.budget_unmet.
    std::string budget_reason;
  };

  // What one re-plan of a host did.
  struct Outcome {
    bool changed = false;
    bool budget_unmet = false;
    // On an interval pass: measured - predicted forced idle of the host's
    // newest plan, when measured since it.
    std::optional<double> forced_idle_error_pct;
  };
  // Sets or clears Host.budget_unmet where it differs from `reason`.
  void FlagBudget(const HostState& state, const std::string& reason);

  // Hosts running engine-managed VMs (of tenants that apply, unless
  // `dry_run`), and with `tenant` set only those running its VMs.
  absl::StatusOr<std::set<std::string>> ManagedHosts(bool dry_run, const std::string& tenant);
  // Plans `state`'s host against `control` (its gate and watch read, not
  // changed; its prediction memo used and renewed). nullopt: the host runs
  // no VM the engine manages.
  absl::StatusOr<std::optional<Proposal>> Propose(const HostState& state, HostControl& control,
                                                  bool dry_run,
                                                  std::chrono::steady_clock::time_point now);
  // PredictProposal's options: engine.predict_s, engine.screen_s, and
  // engine.min_gain as the gain the screen must be clear of.
  policy::PlanOptions PlanOptions() const;
  // Propose's ends: a host over budget that no allowed layout brings
  // within it, and the plan of the move `chosen`.
  static absl::Status FlagUnmetBudget(const HostState& state, const policy::Scenario& scenario,
                                      std::vector<policy::VmDecision>& current,
                                      const HostControl& control,
                                      const policy::PlanOptions& options, Proposal& proposal);
  absl::Status ProposeMove(const HostState& state, const policy::Scenario& scenario,
                           const std::vector<policy::VmDecision>& current,
                           policy::LayoutProposal& chosen, HostControl& control,
                           std::chrono::steady_clock::time_point now, Proposal& proposal);
  // The prediction of `proposal` (PredictProposal), or the memo's when it
  // still holds; counts predictions_ and reused_.
  absl::Status Predict(const policy::Scenario& scenario,
                       const std::vector<policy::VmDecision>& current,
                       policy::LayoutProposal& proposal, HostControl& control);
  // Re-plans and, where allowed, writes; re-reads and re-decides when a
  // write lost a race. Whether the layout changed.
  absl::StatusOr<Outcome> ReplanAndApply(const std::string& host_id, bool interval);
  // Plan's report: hosts where a VM of `tenant` (empty: any) runs and the
  // engine decided a layout.
  absl::StatusOr<v1::PlanResponse> Report(const std::string& tenant);
  HostControl& ControlOf(const HostState& state, std::chrono::steady_clock::time_point now);
  void Loop();

  // The interval between passes, as set now (the loop's thread reads it
  // without pass_mu_).
  std::chrono::seconds ReplanInterval() const;

  store::Store& store_;
  Layouts& layouts_;
  const StatsSource& stats_;
  const StateSettings& settings_;
  const std::vector<std::pair<std::string, std::string>> conflicts_;
  // Written by SetOptions under pass_mu_ and options_mu_, so read under
  // either: passes, re-plans and Plan hold pass_mu_.
  EngineOptions options_;
  mutable std::mutex options_mu_;
  const Hooks hooks_;
  const Observers observers_;

  // Serialises passes and re-plans; within a pass each host is planned by
  // one thread, so one host's control is never used by two at once.
  std::mutex pass_mu_;
  // Guards hosts_ (its nodes stay where they are: a control is used
  // outside the lock) and restored_changes_, which the threads of a pass
  // share.
  std::mutex controls_mu_;
  std::map<std::string, HostControl> hosts_;
  // The engine's changes per host in the hour before this csd started,
  // read from the audit trail when the first host is planned.
  using ChangesByHost = std::map<std::string, std::vector<absl::Time>>;
  std::optional<ChangesByHost> restored_changes_;
 public:
  // Hosts predicted, those of them the screen settled, and hosts whose
  // predictions a memo gave, since start.
  int64_t predictions() const { return predictions_; }
  int64_t screened_predictions() const { return screened_; }
  int64_t reused_predictions() const { return reused_; }

 private:
  std::atomic<int64_t> predictions_{0};
  std::atomic<int64_t> screened_{0};
  std::atomic<int64_t> reused_{0};
  // Whether this replica led the store at the loop's last wake (the
  // loop's own): passes run only while it does.
  bool leading_ = true;

  std::mutex wake_mu_;
  std::condition_variable wake_;
  std::set<std::string> triggered_;  // guarded by wake_mu_; "" = every host
  bool stopping_ = false;            // guarded by wake_mu_
  // SetOptions changed replan_interval: the loop counts it afresh.
  bool interval_changed_ = false;    // guarded by wake_mu_
  std::thread thread_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_ENGINE_ENGINE_LOOP_H_
