// Hysteresis of the policy engine on one host: whether a better layout may
// replace the one the host has, so that layouts do not flap when measured
// load is noisy around a point where the best layout changes.
//
// A new layout replaces the current one only when
//   - it is predicted to gain at least `min_gain` (a fraction of the host's
//     predicted throughput) over the current one,
//   - the current one has held for at least `min_dwell`, and
//   - the host changed fewer than `max_changes_per_hour` times in the last
//     hour.
// A change that restores a tenant's forced-idle budget (measured over
// budget for several windows) needs no gain and no dwell, but still counts
// toward the hourly cap: a budget that flaps must not churn cookies either.
// Thread-compatible.
#ifndef COSCHED_POLICY_REPLAN_GATE_H_
#define COSCHED_POLICY_REPLAN_GATE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace cosched::policy {

struct HysteresisOptions {
  double min_gain = 0.03;
  std::chrono::seconds min_dwell{std::chrono::minutes(10)};
  int max_changes_per_hour = 4;
  bool operator==(const HysteresisOptions&) const = default;
};

// INVALID_ARGUMENT naming `prefix`.<field> and the rule: min_gain in
// [0, 1], min_dwell 0 s to 24 h, max_changes_per_hour 1 to 60.
absl::Status ValidateHysteresis(const HysteresisOptions& options,
                                const std::string& prefix = "engine");

enum class ChangeKind {
  kGain,     // a layout predicted to do better
  kBudget,   // a layout that restores a breached forced-idle budget
};

struct GateVerdict {
  bool allowed = false;
  // Why, for the audit record and `csctl explain`.
  std::string reason;
};

class ReplanGate {
 public:
  explicit ReplanGate(HysteresisOptions options) : options_(options) {}

  // Whether a change of `kind`, predicted to gain `predicted_gain`, may
  // happen at `now`. Does not record it: call Changed when it is applied.
  GateVerdict Consider(std::chrono::steady_clock::time_point now, ChangeKind kind,
                       double predicted_gain) const;
  // The host's layout changed at `now` (an applied plan).
  // New options (a reload of csd.yaml): the layout's start and the
  // changes of the last hour stay, judged against the new bounds.
  void SetOptions(HysteresisOptions options) { options_ = options; }
  void Changed(std::chrono::steady_clock::time_point now);
  // The layout's start, for a host whose layout csd restored (restart).
  void HeldSince(std::chrono::steady_clock::time_point since);
  // A change applied at `at` before a restart (csd's audit trail): it
  // counts toward the hourly cap, and the layout has held at most since.
  void RestoreChange(std::chrono::steady_clock::time_point at);

  int ChangesInLastHour(std::chrono::steady_clock::time_point now) const;

 private:
  HysteresisOptions options_;
  std::optional<std::chrono::steady_clock::time_point> held_since_;
  // Changes applied within the last hour (older ones are dropped lazily).
  mutable std::deque<std::chrono::steady_clock::time_point> changes_;
};

}  // namespace cosched::policy

#endif  // COSCHED_POLICY_REPLAN_GATE_H_
