// The simulator against CALIBRATION.md, with the default (global)
// parameters and the shipped scenarios: directions and rough sizes as
// issue 5 asks. Deterministic (fixed seeds); runs shortened to 8 s.
// Targets the model does not reproduce yet (A1, A2's coresched cost, B's
// nosmt at 32/32) are listed with the figures it gives in
// docs/scenarios.md, "Calibration", until the model reproduces them.
#include <fstream>
#include <map>
#include <sstream>

#include "gtest/gtest.h"
#include "policy/scenario.h"
#include "policy/tradeoff.h"

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
  EXPECT_TRUE(smt.ok());
  for (Mode m : modes) {
    auto r = RunMode(s, m);
    EXPECT_TRUE(r.ok()) << r.status();
    out[m] = r->result.measured_throughput / smt->result.measured_throughput;
  }
  return out;
}

TEST(Calibration, A3FullNodeCoreSchedCostsNothingNoSmtALot) {
  auto rel = Relative(Load("a3-linpack-full"), {Mode::kVm, Mode::kNoSmt});
  EXPECT_GT(rel[Mode::kVm], 0.97);
  EXPECT_LT(rel[Mode::kVm], 1.03);
  EXPECT_LT(rel[Mode::kNoSmt], 0.85);
}

TEST(Calibration, A2HalfNodeNoSmtCosts5To20Percent) {
  auto rel = Relative(Load("a2-linpack-half"), {Mode::kNoSmt});
  EXPECT_LT(rel[Mode::kNoSmt], 0.95);
  EXPECT_GT(rel[Mode::kNoSmt], 0.80);
}

TEST(Calibration, BCoreSchedKeepsAvxAwayFromTheNonAvxClass) {
  for (const char* name : {"b-avx-32", "b-avx-64"}) {
    SCOPED_TRACE(name);
    auto rel = Relative(Load(name), {Mode::kVm, Mode::kNoSmt});
    EXPECT_GE(rel[Mode::kVm], 1.0);
    EXPECT_LT(rel[Mode::kNoSmt], rel[Mode::kVm]);
  }
  auto rel = Relative(Load("b-avx-64"), {Mode::kNoSmt});
  EXPECT_LT(rel[Mode::kNoSmt], 0.93);
}

TEST(Calibration, BBelowSaturationAllModesAreEqual) {
  auto rel = Relative(Load("b-avx-16"), {Mode::kVm, Mode::kNoSmt});
  EXPECT_NEAR(rel[Mode::kVm], 1.0, 0.01);
  EXPECT_NEAR(rel[Mode::kNoSmt], 1.0, 0.01);
}

// Issue 5, "done when": in every shipped scenario the policy mode keeps
// cross-tenant sibling time at 0 and loses no more throughput than the
// better of vm and nosmt (1% tolerance: the plan is predicted with another
// seed and a shorter run than the one that measures it).
class PolicyMode : public ::testing::TestWithParam<const char*> {};

TEST_P(PolicyMode, IsolatesTenantsAndLosesNoMoreThanVmOrNoSmt) {
  Scenario s = Load(GetParam());
  auto policy = RunMode(s, Mode::kPolicy);
  auto vm = RunMode(s, Mode::kVm);
  auto nosmt = RunMode(s, Mode::kNoSmt);
  ASSERT_TRUE(policy.ok() && vm.ok() && nosmt.ok()) << policy.status();
  EXPECT_EQ(policy->result.cross_tenant_pct, 0);
  double better = std::max(vm->result.total_throughput, nosmt->result.total_throughput);
  EXPECT_GE(policy->result.total_throughput, better * 0.99)
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
