// csd's staged rollouts of enforcement (`csctl rollout`, issue #17 part
// 4): the RPCs that start and steer one, and the leader's job that soaks
// each stage, moves to the next, enrols hosts that register later and
// halts the rollout when a host it enabled regresses.
//
// A rollout is one small durable record (v1::Rollout, Transaction::
// PutRollout), written and audited in one transaction per change; the
// RolloutView (rollout_view.h) holds it for the Register and Report answers
// (HostEnablement NOT_ENABLED for a host it has not enabled). The hosts it
// enables are each marked on their own host record (Host.enabled_by_rollout),
// in commits of at most kEnableChunk hosts after the record's
// (rollout_enrolment.h): a stage of any size fits etcd's limits, and a
// mark is never taken back, so commits cut short by a crash or a lost
// leadership leave the fleet as a shorter enrolment would, and the
// leader's next check enables the rest.
//
// Thread-safe. The job runs on its own thread once Start() is called, and
// does anything only while this csd leads the store's writers; its writes
// are fenced on that leadership. Tests call RunPass() instead.
#ifndef COSCHED_SERVER_STATE_ROLLOUT_CONTROL_H_
#define COSCHED_SERVER_STATE_ROLLOUT_CONTROL_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cosched/v1/config.pb.h"
#include "cosched/v1/control_plane.pb.h"
#include "server/state/host_status.h"
#include "server/state/placement_view.h"
#include "server/state/rollout_enrolment.h"
#include "server/state/rollout_view.h"
#include "server/state/write_support.h"
#include "store/store.h"

namespace cosched::server {

// The audit trail's `who` of the job's changes.
inline constexpr char kRolloutActor[] = "csd:rollout";

// Fills `rollout`'s counts (RolloutCounter) from the hosts `hosts` holds.
void AddRolloutCounts(const PlacementView& hosts, v1::Rollout& rollout);

// csd.yaml's `rollout:` block.
struct RolloutOptions {
  // How often the leader checks the current rollout.
  std::chrono::seconds check_interval{10};
  // A host this rollout enabled whose agent has been silent this long
  // halts it.
  std::chrono::seconds no_report_halt{120};
  // The shortest soak StartRollout accepts.
  int64_t min_soak_s = 60;
  bool operator==(const RolloutOptions&) const = default;
};

// Unset fields keep RolloutOptions' defaults.
RolloutOptions RolloutOptionsFromConfig(const v1::RolloutConfig& config);
// INVALID_ARGUMENT naming rollout.<field> and its rule: check_interval_s 1
// to 3600, no_report_halt_s 1 to 86400, min_soak_s 1 to 604800.
absl::Status ValidateRolloutOptions(const RolloutOptions& options);

class RolloutControl {
 public:
  using Clock = std::function<absl::Time()>;
  // Called after every committed change of the rollout, with it (metrics).
  using Observer = std::function<void(const v1::Rollout&)>;

  // OK when every csd on the store reads a rollout whose hosts are on
  // their host records (store record_format 1); else FAILED_PRECONDITION
  // naming a replica that does not (a rolling upgrade under way).
  using ReplicaCheck = std::function<absl::Status()>;

  // Writes the rollout to `store` and keeps `rollout` (the view Register
  // and Report answer from) at what it wrote, and `placement` at the host
  // records it marks; `hosts` says which hosts went silent. `clock`
  // nullptr: absl::Now. `replicas` nullptr: one csd (SQLite).
  RolloutControl(store::Store& store, RolloutView& rollout, const HostStatus& hosts,
                 PlacementView& placement, RolloutOptions options, Clock clock = nullptr,
                 Observer observer = nullptr, ReplicaCheck replicas = nullptr);
  ~RolloutControl();
  RolloutControl(const RolloutControl&) = delete;
  RolloutControl& operator=(const RolloutControl&) = delete;

  void Start();
  void Stop();
  // New options (a reload of csd.yaml's rollout block): the next check
  // comes a new check_interval from now; min_soak_s holds for the next
  // StartRollout, no_report_halt_s from the next check on.
  void SetOptions(const RolloutOptions& options);

  // INVALID_ARGUMENT naming stage_percents, soak_seconds or selector and
  // the rule (a selector must match a registered host); FAILED_PRECONDITION
  // while a rollout is running, paused or halted, or while a replica of an
  // older csd shares the store (its answers would lose the hosts the
  // rollout before enabled). The first stage's hosts are enabled before
  // the answer (the leader's next check enables any a failure left out).
  void StartRollout(const v1::StartRolloutRequest& request, const Actor& actor,
                    Done<v1::Rollout> done);
  enum class Change { kPause, kResume, kAbort };
  // NOT_FOUND without a rollout; FAILED_PRECONDITION for another
  // rollout_id or a state the change does not apply to. Pausing a paused
  // rollout answers it unchanged.
  void ChangeRollout(Change change, const v1::ChangeRolloutRequest& request, const Actor& actor,
                     Done<v1::Rollout> done);
  // NOT_FOUND when none was ever started and new_hosts was never set.
  absl::StatusOr<v1::Rollout> GetRollout() const;
  // The fleet's new_hosts setting; changes no registered host.
  // INVALID_ARGUMENT for a value other than enforce or wait-for-rollout,
  // or a reason over 1024 characters. Setting the value it has answers the
  // record unchanged, with nothing written.
  void SetNewHosts(const v1::SetNewHostsRequest& request, const Actor& actor,
                   Done<v1::Rollout> done);
  // The fleet's off switch (SetHostEnforcement with `all`): kept in the
  // rollout record, so that it holds for hosts that register later too.
  // Audited with its reason; setting the value it has writes nothing.
  void SetFleetEnforcement(const v1::SetHostEnforcementRequest& request, const Actor& actor,
                           Done<v1::SetHostEnforcementResponse> done);

  // One check, when this csd leads: halt on a regression, else move to
  // the next stage once the current one soaked, and enable the stage's
  // hosts that are not yet (those that registered late, those a cut-short
  // enrolment left) and, whatever the state, the hosts an older csd's
  // record lists; while a replica of an older csd shares the store (the
  // ReplicaCheck), only the latter. Writes only when something changed.
  absl::Status RunPass();

 private:
  void Loop();
  // Why the host regressed, naming it; empty when it did not.
  std::string Regression(const v1::Host& host) const;
  // After a committed change: the view, the log, the observer.
  void Committed(const v1::Rollout& rollout, const v1::AuditRecord& audit);
  // `record` with its counts, for an answer.
  v1::Rollout Answer(v1::Rollout record) const;
  // A fleet setting in the rollout record: `change` edits the record read
  // in the write and says whether it changed anything; only then is it
  // written and audited as `method` on `subject`. Answers the record.
  void ChangeSetting(absl::string_view method, absl::string_view subject,
                     const std::string& reason, const Actor& actor,
                     std::function<bool(v1::Rollout&)> change,
                     Done<v1::Rollout> done);

  RolloutOptions options() const;

  store::Store& store_;
  RolloutView& rollout_;
  const HostStatus& hosts_;
  PlacementView& placement_;
  const ReplicaCheck replicas_;
  mutable std::mutex options_mu_;
  RolloutOptions options_;  // guarded by options_mu_
  const Clock clock_;
  const Observer observer_;
  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool options_changed_ = false;  // SetOptions; guarded by wake_mu_
  std::thread thread_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_ROLLOUT_CONTROL_H_
