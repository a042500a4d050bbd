// csd's staged rollouts of enforcement (`csctl rollout`, issue #17 part
// 4): the RPCs that start and steer one, and the leader's job that soaks
// each stage, moves to the next, enrols hosts that register later and
// halts the rollout when a host it enabled regresses.
//
// A rollout is one durable record (v1::Rollout, Transaction::PutRollout),
// written and audited in one transaction per change; the RolloutView
// (rollout_view.h) holds it for the Register and Report answers
// (HostEnablement NOT_ENABLED for a host it has not enabled).
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
#include "server/state/rollout_view.h"
#include "server/state/write_support.h"
#include "store/store.h"

namespace cosched::server {

// The audit trail's `who` of the job's changes.
inline constexpr char kRolloutActor[] = "csd:rollout";

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

  // Writes the rollout to `store` and keeps `rollout` (the view Register
  // and Report answer from) at what it wrote; `hosts` says which hosts went
  // silent. `clock` nullptr: absl::Now.
  RolloutControl(store::Store& store, RolloutView& rollout, const HostStatus& hosts,
                 RolloutOptions options, Clock clock = nullptr, Observer observer = nullptr);
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
  // while a rollout is running, paused or halted. The first stage's hosts
  // are enabled at once.
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

  // One check, when this csd leads: halt on a regression, else enrol
  // hosts that register late and move to the next stage once the current
  // one soaked. Writes only when something changed.
  absl::Status RunPass();

 private:
  void Loop();
  // Why the host regressed, naming it; empty when it did not.
  std::string Regression(const v1::Host& host) const;
  // After a committed change: the view, the log, the observer.
  void Committed(const v1::Rollout& rollout, const v1::AuditRecord& audit);
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
