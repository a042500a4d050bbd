#include "policy/replan_gate.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cosched::policy {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHour = std::chrono::hours(1);

int64_t Seconds(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

}  // namespace

absl::Status ValidateHysteresis(const HysteresisOptions& options, const std::string& prefix) {
  if (!(options.min_gain >= 0 && options.min_gain <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ".min_gain must be between 0 and 1 (a fraction of predicted throughput)"));
  }
  if (options.min_dwell < std::chrono::seconds(0) || options.min_dwell > std::chrono::hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".min_dwell must be between 0s and 24h"));
  }
  if (options.max_changes_per_hour < 1 || options.max_changes_per_hour > 60) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".max_changes_per_hour must be between 1 and 60"));
  }
  return absl::OkStatus();
}

int ReplanGate::ChangesInLastHour(Clock::time_point now) const {
  while (!changes_.empty() && now - changes_.front() >= kHour) changes_.pop_front();
  return static_cast<int>(changes_.size());
}

GateVerdict ReplanGate::Consider(Clock::time_point now, ChangeKind kind,
                                 double predicted_gain) const {
  const int changes = ChangesInLastHour(now);
  if (changes >= options_.max_changes_per_hour) {
    return {false, absl::StrCat("the host changed layout ", changes,
                                " times in the last hour (at most ",
                                options_.max_changes_per_hour, ")")};
  }
  if (kind == ChangeKind::kBudget) {
    return {true, "restores a forced-idle budget measured over its limit"};
  }
  if (!(predicted_gain >= options_.min_gain)) {
    return {false, absl::StrFormat("predicted gain %.1f%% is below min_gain %.1f%%",
                                   100 * predicted_gain, 100 * options_.min_gain)};
  }
  if (held_since_ && now - *held_since_ < options_.min_dwell) {
    return {false, absl::StrCat("the current layout has held ", Seconds(now - *held_since_),
                                " s of min_dwell ", options_.min_dwell.count(), " s")};
  }
  return {true, absl::StrFormat("predicted gain %.1f%% (min_gain %.1f%%)",
                                100 * predicted_gain, 100 * options_.min_gain)};
}

void ReplanGate::Changed(Clock::time_point now) {
  held_since_ = now;
  changes_.push_back(now);
  ChangesInLastHour(now);
}

void ReplanGate::HeldSince(Clock::time_point since) { held_since_ = since; }

void ReplanGate::RestoreChange(Clock::time_point at) {
  changes_.insert(std::upper_bound(changes_.begin(), changes_.end(), at), at);
  held_since_ = std::max(held_since_.value_or(at), at);
}

}  // namespace cosched::policy
