#include "policy/replan_gate.h"

#include <cmath>
#include <deque>
#include <numeric>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::policy {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(ReplanGateTest, ValidateNamesTheFieldAndTheRule) {
  EXPECT_OK(ValidateHysteresis(HysteresisOptions()));
  HysteresisOptions o;
  o.min_gain = 1.5;
  EXPECT_THAT(ValidateHysteresis(o).message(), HasSubstr("engine.min_gain must be between 0 and 1"));
  o = HysteresisOptions();
  o.min_gain = std::nan("");
  EXPECT_EQ(ValidateHysteresis(o).code(), absl::StatusCode::kInvalidArgument);
  o = HysteresisOptions();
  o.min_dwell = -1s;
  EXPECT_THAT(ValidateHysteresis(o).message(), HasSubstr("engine.min_dwell must be between 0s and 24h"));
  o = HysteresisOptions();
  o.max_changes_per_hour = 0;
  EXPECT_THAT(ValidateHysteresis(o, "policy_engine").message(),
              HasSubstr("policy_engine.max_changes_per_hour must be between 1 and 60"));
}

TEST(ReplanGateTest, NeedsTheGainAndTheDwell) {
  ReplanGate gate({.min_gain = 0.05, .min_dwell = 600s, .max_changes_per_hour = 4});
  const Clock::time_point t0 = Clock::now();
  // A host that never changed may change at once, given the gain.
  EXPECT_FALSE(gate.Consider(t0, ChangeKind::kGain, 0.049).allowed);
  EXPECT_THAT(gate.Consider(t0, ChangeKind::kGain, 0.049).reason,
              HasSubstr("predicted gain 4.9% is below min_gain 5.0%"));
  EXPECT_TRUE(gate.Consider(t0, ChangeKind::kGain, 0.05).allowed);
  gate.Changed(t0);
  // Then the new layout holds for min_dwell, however good the next one.
  GateVerdict early = gate.Consider(t0 + 599s, ChangeKind::kGain, 0.5);
  EXPECT_FALSE(early.allowed);
  EXPECT_THAT(early.reason, HasSubstr("has held 599 s of min_dwell 600 s"));
  EXPECT_TRUE(gate.Consider(t0 + 600s, ChangeKind::kGain, 0.05).allowed);
}

TEST(ReplanGateTest, CapsChangesPerHourEvenForBudgets) {
  ReplanGate gate({.min_gain = 0.05, .min_dwell = 0s, .max_changes_per_hour = 2});
  const Clock::time_point t0 = Clock::now();
  // A breached budget needs neither gain nor dwell...
  EXPECT_TRUE(gate.Consider(t0, ChangeKind::kBudget, 0).allowed);
  gate.Changed(t0);
  EXPECT_TRUE(gate.Consider(t0 + 1s, ChangeKind::kBudget, -0.2).allowed);
  gate.Changed(t0 + 1s);
  // ...but counts toward the hour's cap.
  GateVerdict capped = gate.Consider(t0 + 2s, ChangeKind::kBudget, 0);
  EXPECT_FALSE(capped.allowed);
  EXPECT_THAT(capped.reason, HasSubstr("changed layout 2 times in the last hour (at most 2)"));
  EXPECT_EQ(gate.ChangesInLastHour(t0 + 3599s), 2);
  // An hour after the first change, one slot is free again.
  EXPECT_EQ(gate.ChangesInLastHour(t0 + 3600s), 1);
  EXPECT_TRUE(gate.Consider(t0 + 3600s, ChangeKind::kGain, 0.05).allowed);
}

TEST(ReplanGateTest, ChangesRestoredAfterARestartCountTowardTheCapAndTheDwell) {
  ReplanGate gate({.min_gain = 0.05, .min_dwell = 600s, .max_changes_per_hour = 2});
  const Clock::time_point t0 = Clock::now();
  // A restarted csd reads back two changes, 50 and 20 minutes old, in any
  // order.
  gate.RestoreChange(t0 - 20min);
  gate.RestoreChange(t0 - 50min);
  EXPECT_EQ(gate.ChangesInLastHour(t0), 2);
  GateVerdict capped = gate.Consider(t0, ChangeKind::kBudget, 0);
  EXPECT_FALSE(capped.allowed);
  EXPECT_THAT(capped.reason, HasSubstr("changed layout 2 times in the last hour"));
  // The older one leaves the hour 10 minutes on; the newest set the dwell.
  EXPECT_TRUE(gate.Consider(t0 + 10min, ChangeKind::kGain, 0.05).allowed);
  ReplanGate fresh({.min_gain = 0.05, .min_dwell = 600s, .max_changes_per_hour = 4});
  fresh.RestoreChange(t0 - 5min);
  EXPECT_THAT(fresh.Consider(t0, ChangeKind::kGain, 0.5).reason,
              HasSubstr("has held 300 s of min_dwell 600 s"));
}

// An hour of replans every 30 s while a host's measured load is noisy
// around the point where layout B starts to beat layout A: B's predicted
// gain over A is 0.2 x (load - 0.5), load ~ N(0.5, 0.1) per window. The
// engine reads load as the mean over the last 5 minutes of windows (its
// input), and the gate decides. The naive rule (take whichever layout is
// better now) flips dozens of times; the engine changes at most once.
TEST(ReplanGateTest, NoisyLoadAroundTheThresholdForAnHourChangesAtMostOnce) {
  std::mt19937_64 rng(42);
  std::normal_distribution<double> load_noise(0.5, 0.1);
  const HysteresisOptions options;  // the shipped defaults
  ReplanGate gate(options);
  const Clock::time_point t0 = Clock::now();
  std::deque<double> recent;  // the last 5 minutes of windows
  bool on_b = false, naive_on_b = false;
  int changes = 0, naive_changes = 0;
  for (int step = 0; step < 120; ++step) {
    const Clock::time_point now = t0 + step * 30s;
    const double load = load_noise(rng);
    recent.push_back(load);
    if (recent.size() > 10) recent.pop_front();
    const double mean = std::accumulate(recent.begin(), recent.end(), 0.0) / recent.size();
    auto gain_of_b = [](double l) { return 0.2 * (l - 0.5); };

    if ((gain_of_b(load) > 0) != naive_on_b) {
      naive_on_b = !naive_on_b;
      ++naive_changes;
    }
    const double gain = on_b ? -gain_of_b(mean) : gain_of_b(mean);
    if (gate.Consider(now, ChangeKind::kGain, gain).allowed) {
      gate.Changed(now);
      on_b = !on_b;
      ++changes;
    }
  }
  EXPECT_GE(naive_changes, 30) << "the input is not noisy around the threshold";
  EXPECT_LE(changes, 1);
}

// Without the smoothing of its input, the gate alone still bounds the
// flapping: never more than max_changes_per_hour.
TEST(ReplanGateTest, UnsmoothedNoiseStaysWithinTheHourlyCap) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> gain_noise(0.0, 0.05);
  HysteresisOptions options;
  options.min_dwell = 0s;
  ReplanGate gate(options);
  const Clock::time_point t0 = Clock::now();
  int changes = 0;
  for (int step = 0; step < 120; ++step) {
    const Clock::time_point now = t0 + step * 30s;
    if (gate.Consider(now, ChangeKind::kGain, gain_noise(rng)).allowed) {
      gate.Changed(now);
      ++changes;
    }
  }
  EXPECT_GT(changes, 0);
  EXPECT_LE(changes, options.max_changes_per_hour);
}

}  // namespace
}  // namespace cosched::policy
