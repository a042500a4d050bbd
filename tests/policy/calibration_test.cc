// The simulator against docs/scenarios.md, with the default (global)
// parameters and the shipped scenarios: directions and rough sizes as
// issue 5 asks. Deterministic (fixed seeds); runs shortened to 8 s. The
// figures each run gives are in docs/scenarios.md, "Calibration".
#include <fstream>
#include <map>
#include <sstream>

#include "gtest/gtest.h"
#include "policy/scenario.h"
#include "policy/tradeoff.h"
#include "tests/testing/status_matchers.h"

namespace cosched::policy {
namespace {

constexpr double kTestDurationS = 8;

Scenario Load(const std::string& name) {
  std::ifstream in(std::string(COSCHED_SCENARIO_DIR) + "/" + name + ".yaml");
  std::stringstream text;
  text << in.rdbuf();
  auto s = ParseScenarioYaml(text.str());
  EXPECT_TRUE(s.ok()) << name << ": " << s.status();
  if (!s.ok()) return Scenario();
  s->duration_s = std::min(s->duration_s, kTestDurationS);
  return *s;
}

// Measured throughput of each mode relative to smt.
std::map<Mode, double> Relative(const Scenario& s, std::vector<Mode> modes) {
  std::map<Mode, double> out;
  auto smt = RunMode(s, Mode::kSmt);
  EXPECT_OK(smt);
  for (Mode m : modes) {
    auto r = RunMode(s, m);
    EXPECT_OK(r);
    out[m] = r->result.measured_throughput / smt->result.measured_throughput;
  }
  return out;
}

TEST(Calibration, A3FullNodeCoreSchedCostsNothingNoSmtALot) {
  auto rel = Relative(Load("a3-linpack-full"), {Mode::kVm, Mode::kNoSmt});
  EXPECT_GT(rel[Mode::kVm], 0.97);
  EXPECT_LT(rel[Mode::kVm], 1.03);
  EXPECT_LE(rel[Mode::kNoSmt], 0.85);
}

TEST(Calibration, A2HalfNodeCoreSchedAndNoSmtBothCost5To20Percent) {
  auto rel = Relative(Load("a2-linpack-half"), {Mode::kVm, Mode::kNoSmt});
  for (Mode m : {Mode::kVm, Mode::kNoSmt}) {
    SCOPED_TRACE(ModeName(m));
    EXPECT_LE(rel[m], 0.95);
    EXPECT_GE(rel[m], 0.80);
  }
}

TEST(Calibration, A1BusyVmAmongSmallOnesCoreSchedBetweenNoSmtLosesAThird) {
  auto rel = Relative(Load("a1-mysql"), {Mode::kVm, Mode::kNoSmt});
  EXPECT_LT(rel[Mode::kVm], 1.0);
  EXPECT_GT(rel[Mode::kVm], rel[Mode::kNoSmt]);
  EXPECT_LE(rel[Mode::kNoSmt], 0.70);
}

// B: coresched at or above smt for the non-AVX class, nosmt well below
// (published: -5.2% at 32/32, -34.6% at 64/64). The bounds are the
// published losses rounded towards zero, so "well below" means at least
// that much.
TEST(Calibration, BCoreSchedKeepsAvxAwayFromTheNonAvxClassNoSmtCostsALot) {
  const std::map<std::string, double> nosmt_at_most = {{"b-avx-32", 0.96},
                                                       {"b-avx-64", 0.70}};
  for (const auto& [name, bound] : nosmt_at_most) {
    SCOPED_TRACE(name);
    auto rel = Relative(Load(name), {Mode::kVm, Mode::kNoSmt});
    EXPECT_GE(rel[Mode::kVm], 1.0);
    EXPECT_LE(rel[Mode::kNoSmt], bound);
  }
}

TEST(Calibration, BBelowSaturationAllModesAreEqual) {
  auto rel = Relative(Load("b-avx-16"), {Mode::kVm, Mode::kNoSmt});
  EXPECT_NEAR(rel[Mode::kVm], 1.0, 0.01);
  EXPECT_NEAR(rel[Mode::kNoSmt], 1.0, 0.01);
}

// Issue 5, "done when": in A1, where one cookie per VM costs the busy VM,
// the policy recovers at least half of the gap between vm and smt (by
// pinning it to whole cores away from the small VMs).
TEST(Calibration, A1PolicyRecoversAtLeastHalfOfWhatVmLoses) {
  Scenario s = Load("a1-mysql");
  auto smt = RunMode(s, Mode::kSmt);
  auto vm = RunMode(s, Mode::kVm);
  auto policy = RunMode(s, Mode::kPolicy);
  ASSERT_TRUE(smt.ok() && vm.ok() && policy.ok());
  const double s_tp = smt->result.measured_throughput;
  const double v_tp = vm->result.measured_throughput;
  const double p_tp = policy->result.measured_throughput;
  ASSERT_LT(v_tp, s_tp);
  EXPECT_GE(p_tp - v_tp, 0.5 * (s_tp - v_tp)) << "policy chose " << policy->plan->chosen;
}

// Issue 5, "done when": in every shipped scenario the policy mode keeps
// cross-tenant sibling time at 0 and loses no more throughput than the
// better of vm and nosmt.
class PolicyMode : public ::testing::TestWithParam<const char*> {};

TEST_P(PolicyMode, IsolatesTenantsAndLosesNoMoreThanVmOrNoSmt) {
  Scenario s = Load(GetParam());
  auto policy = RunMode(s, Mode::kPolicy);
  auto vm = RunMode(s, Mode::kVm);
  auto nosmt = RunMode(s, Mode::kNoSmt);
  ASSERT_TRUE(policy.ok() && vm.ok() && nosmt.ok()) << policy.status();
  EXPECT_EQ(policy->result.cross_tenant_pct, 0);
  double better = std::max(vm->result.total_throughput, nosmt->result.total_throughput);
  EXPECT_GE(policy->result.total_throughput, better)
      << "policy chose " << policy->plan->chosen;
}

INSTANTIATE_TEST_SUITE_P(Shipped, PolicyMode,
                         ::testing::Values("a1-mysql", "a2-linpack-half",
                                           "a3-linpack-full", "b-avx-16",
                                           "b-avx-32", "b-avx-64", "b-avx-128"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace cosched::policy
