// The policy engine's predictions: reused while their inputs hold, min_gain,
// the screen, measured forced idle over budget, and plans compared with what
// was measured after them.
#include "tests/server/engine/engine_loop_fixture.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cosched::server {
namespace {

using engine_testing::EngineLoopTest;
using engine_testing::kHost;
using engine_testing::kTester;
using engine_testing::SteadyClock;
using engine_testing::Wait;
using ::testing::HasSubstr;
using ::testing::Not;

// As below: two busy VMs of acme and one of globex on two cores, so
// min_gain refuses acme's shared cookie pass after pass; the stats come a
// window a minute, all inside the engine's load window (csd's stats clock
// runs a minute ahead).
class EngineReuseTest : public EngineLoopTest {
 protected:
  // Tags the three VMs and reports their first minute, all busy.
  void SetUpBusyHost() {
    ASSERT_OK(SetPolicy("acme", v1::POLICY_MODE_AUTO,
                        {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}));
    for (const char* vm : {"a-1", "a-2"}) ASSERT_OK(Tag(vm, "acme"));
    ASSERT_OK(Tag("g-1", "globex"));
    stats_ahead_ = absl::Minutes(1);
    ASSERT_OK(Minute(-4, 1.0));
  }
  // The window of minute `from` (from the test's start), every VM at
  // `load` but those loads_ sets.
  absl::Status Minute(int from, double load) {
    return ReportWindow({"a-1", "a-2", "g-1"}, absl::ToUnixNanos(start_ + absl::Minutes(from)),
                        absl::ToUnixNanos(start_ + absl::Minutes(from + 1)), load, 0);
  }

  const absl::Time start_ = absl::Now();
};

TEST_F(EngineReuseTest, ARefusedProposalIsNotPredictedAgainUntilItsInputsMove) {
  ASSERT_NO_FATAL_FAILURE(SetUpBusyHost());
  MakeEngine();
  // The host has two moves, acme's shared cookie and acme's VMs on one
  // thread per core, tried one a pass: the first round predicts each once.
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(engine_->predictions(), 2);
  const double gain = engine_->Plan(v1::PlanRequest())->hosts(0).planned().gain();

  // The same loads, and loads near them: the predictions stand.
  now_ += std::chrono::minutes(1);
  EXPECT_EQ(engine_->RunPass(true), 0);
  ASSERT_OK(Minute(-3, 0.99));
  now_ += std::chrono::minutes(1);
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(engine_->predictions(), 2);
  EXPECT_EQ(engine_->reused_predictions(), 3) << "two passes and the Plan above";
  EXPECT_EQ(engine_->Plan(v1::PlanRequest())->hosts(0).planned().gain(), gain);
  // One VM's load moves 0.05 (to the mean of 1.0, 0.99 and 0.85), the
  // others' 0.003: 0.06 CPUs in all, within 2% of the host's 4 CPUs (0.08)
  // and no VM by more than 0.1. Measured loads wander that much; the
  // predictions still stand.
  loads_["g-1"] = 0.85;
  ASSERT_OK(Minute(-2, 0.99));
  loads_.clear();
  now_ += std::chrono::minutes(1);
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(engine_->predictions(), 2);

  // Loads that moved further are predicted again: every VM's by about
  // 0.2 (to the mean of 1.0, 0.99, 0.99 or 0.85, and 0.3).
  ASSERT_OK(Minute(-1, 0.3));
  now_ += std::chrono::minutes(1);
  engine_->RunPass(true);
  EXPECT_EQ(engine_->predictions(), 3);

  // So is another VM on the host.
  ASSERT_OK(Tag("a-3", "acme"));
  ASSERT_OK(Report({"a-1", "a-2", "a-3", "g-1"}));
  now_ += std::chrono::minutes(1);
  engine_->RunPass(true);
  EXPECT_EQ(engine_->predictions(), 4);
}

// engine_pass_bench --compare-fresh plans with no reuse bounds to measure
// what the defaults change: then any load that moved is predicted again.
TEST_F(EngineReuseTest, WithReuseBoundsOfZeroAnyMovedLoadIsPredictedAgain) {
  ASSERT_NO_FATAL_FAILURE(SetUpBusyHost());
  options_.reuse_vm_load_move = 0;
  options_.reuse_host_load_share = 0;
  MakeEngine();
  engine_->RunPass(true);
  engine_->RunPass(true);
  EXPECT_EQ(engine_->predictions(), 2);
  // The same loads: the predictions stand.
  now_ += std::chrono::minutes(1);
  engine_->RunPass(true);
  EXPECT_EQ(engine_->predictions(), 2);
  // Loads 0.003 away, which the default bounds take as the same.
  ASSERT_OK(Minute(-3, 0.99));
  now_ += std::chrono::minutes(1);
  engine_->RunPass(true);
  EXPECT_GT(engine_->predictions(), 2);
}

TEST_F(EngineLoopTest, NoChangeWithoutEnoughPredictedGain) {
  // Two busy VMs of acme and one of globex on two cores: the simulator
  // predicts the same throughput whether acme's share a cookie or not, so
  // the stricter layout stays.
  ASSERT_OK(TwoOfAcmeOneOfGlobex());
  MakeEngine();
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(Vm("a-1").assignment().trust_group(), "acme/vm/a-1");
  auto plan = engine_->Plan(v1::PlanRequest());
  ASSERT_OK(plan);
  ASSERT_EQ(plan->hosts_size(), 1);
  EXPECT_EQ(plan->hosts(0).changes_size(), 2);
  EXPECT_LT(plan->hosts(0).planned().gain(), options_.hysteresis.min_gain);
  EXPECT_THAT(plan->hosts(0).reasons(plan->hosts(0).reasons_size() - 1),
              HasSubstr("below min_gain"));
}

TEST_F(EngineLoopTest, TheScreenSettlesAPredictionWhoseAnswerIsClear) {
  options_.hysteresis.min_gain = 1;  // no gain comes near it
  ASSERT_OK(TwoOfAcmeOneOfGlobex());
  MakeEngine();
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(engine_->predictions(), 1);
  EXPECT_EQ(engine_->screened_predictions(), 1);
  auto plan = engine_->Plan(v1::PlanRequest());
  ASSERT_OK(plan);
  ASSERT_EQ(plan->hosts_size(), 1);
  EXPECT_THAT(absl::StrJoin(plan->hosts(0).reasons(), "\n"),
              HasSubstr("the screen settled it (engine.screen_s)"));

  // Off: the whole prediction, and the plan says nothing of a screen.
  options_.screen_s = 0;
  MakeEngine();
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(engine_->predictions(), 1);
  EXPECT_EQ(engine_->screened_predictions(), 0);
  plan = engine_->Plan(v1::PlanRequest());
  ASSERT_OK(plan);
  EXPECT_THAT(absl::StrJoin(plan->hosts(0).reasons(), "\n"),
              Not(HasSubstr("screen")));
}

TEST_F(EngineLoopTest, MeasuredForcedIdleOverBudgetForKWindowsOverridesMinGain) {
  options_.hysteresis.min_gain = 1;  // no gain is ever enough
  options_.budget.windows = 2;
  ASSERT_OK(SetPolicy("acme", v1::POLICY_MODE_AUTO,
                      {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}, true, 2.0));
  for (const char* vm : {"a-1", "a-2", "a-3", "a-4"}) ASSERT_OK(Tag(vm, "acme"));
  const std::vector<std::string> vms = {"a-1", "a-2", "a-3", "a-4"};
  // Each VM runs 60% of the time and forces 10% of a CPU idle: the host's
  // 4 CPUs are 10% forced idle, over acme's 2% budget.
  ASSERT_OK(Report(vms, 10, 0.6, 0.1));
  std::vector<bool> changes;
  std::vector<double> errors;
  EngineLoop::Observers observers;
  observers.changed = [&](bool budget) { changes.push_back(budget); };
  observers.prediction_errors = [&](const std::map<std::string, double>& by_host) {
    for (const auto& [host, error] : by_host) errors.push_back(error);
  };
  MakeEngine({}, std::move(observers));
  EXPECT_EQ(engine_->RunPass(true), 0) << "one window over budget is noise";
  EXPECT_EQ(Vm("a-1").assignment().trust_group(), "acme/vm/a-1");
  ASSERT_OK(Report(vms, 10, 0.6, 0.1));
  now_ += std::chrono::minutes(1);
  ASSERT_EQ(engine_->RunPass(true), 1);
  v1::VM a1 = Vm("a-1");
  EXPECT_EQ(a1.assignment().trust_group(), "acme/tenant");
  EXPECT_THAT(a1.decision().reasons(a1.decision().reasons_size() - 1),
              HasSubstr("restores a forced-idle budget"));
  EXPECT_LE(a1.decision().predicted().forced_idle_pct(), 2.0);
  EXPECT_EQ(changes, std::vector<bool>{true});
  EXPECT_TRUE(errors.empty()) << "no window since the plan yet";

  // Windows after the plan (its decision dated back an hour, so that every
  // window counts): measured 10% against the prediction.
  std::promise<absl::Status> dated;
  store_->Write(
      [&](store::Transaction& txn) -> absl::Status {
        for (const std::string& id : vms) {
          v1::VM vm = Vm(id);
          vm.mutable_decision()->mutable_decided_at()->set_seconds(
              vm.decision().decided_at().seconds() - 3600);
          if (absl::Status s = txn.PutVm(vm); !s.ok()) return s;
        }
        return absl::OkStatus();
      },
      [&](absl::Status s) { dated.set_value(s); });
  ASSERT_OK(dated.get_future().get());
  ASSERT_OK(Report(vms, 10, 0.6, 0.1));
  now_ += std::chrono::minutes(1);
  EXPECT_EQ(engine_->RunPass(true), 0);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NEAR(errors[0], 10.0 - a1.decision().predicted().forced_idle_pct(), 0.5);
}

TEST_F(EngineLoopTest, AHostOverBudgetThatNoLayoutMeetsIsCountedAndShown) {
  options_.budget.windows = 1;
  // acme allows only `vm` and libvirt pins its VMs two to a core, which the
  // engine never changes: its four VMs already have the engine's layout,
  // and nothing allowed forces less idle.
  ASSERT_OK(SetPolicy("acme", v1::POLICY_MODE_AUTO, {v1::ISOLATION_LEVEL_VM}, true, 2.0));
  const std::vector<std::string> vms = {"a-1", "a-2", "a-3", "a-4"};
  pinned_by_others_ = {{"a-1", {0, 1}}, {"a-2", {0, 1}}, {"a-3", {2, 3}}, {"a-4", {2, 3}}};
  for (const std::string& vm : vms) ASSERT_OK(Tag(vm, "acme"));
  ASSERT_OK(Report(vms, 10, 0.6, 0.1));
  std::vector<int> unmet;
  EngineLoop::Observers observers;
  observers.budget_unmet = [&](int hosts) { unmet.push_back(hosts); };
  MakeEngine({}, std::move(observers));
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(unmet, std::vector<int>{1});
  auto plan = engine_->Plan(v1::PlanRequest());
  ASSERT_OK(plan);
  ASSERT_EQ(plan->hosts_size(), 1);
  EXPECT_EQ(plan->hosts(0).changes_size(), 0);
  EXPECT_THAT(plan->hosts(0).reasons(0), HasSubstr("no allowed layout is predicted within it"));

  // Flagged on the host record, audited once however long it lasts.
  auto flagged = [&] {
    v1::GetHostRequest request;
    request.set_host_id(kHost);
    auto host = state_->hosts.GetHost(request);
    EXPECT_OK(host);
    return host->budget_unmet();
  };
  auto flag_records = [&] {
    v1::ListAuditRecordsRequest request;
    request.set_subject(kHost);
    auto records = state_->audit.ListAuditRecords(request);
    EXPECT_OK(records);
    int n = 0;
    for (const v1::AuditRecord& r : records->records()) n += r.method() == "EngineBudgetFlag";
    return n;
  };
  EXPECT_THAT(flagged(), HasSubstr("least budget of its tenants (2.0%)"));
  // ExplainVM names where Place would put a VM like it: the other host.
  ASSERT_NO_FATAL_FAILURE(Register("hv-2"));
  v1::ExplainVMRequest explain;
  explain.set_vm_id("a-1");
  auto explained = state_->policy.ExplainVm(explain);
  ASSERT_OK(explained);
  EXPECT_EQ(explained->recommended_host(), "hv-2");
  EXPECT_THAT(explained->host_reasons(explained->host_reasons_size() - 1),
              HasSubstr("Place would choose host 'hv-2'"));
  now_ += std::chrono::minutes(1);
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(flag_records(), 1);
  // acme leaves auto: nothing is the engine's on the host, the flag clears.
  ASSERT_OK(SetPolicy("acme", v1::POLICY_MODE_FIXED, {v1::ISOLATION_LEVEL_VM}, true, 2.0));
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(flagged(), "");
  EXPECT_EQ(flag_records(), 2);
  EXPECT_EQ(unmet, (std::vector<int>{1, 1, 0}));
}

TEST_F(EngineLoopTest, EachAppliedPlanIsComparedWithWhatWasMeasuredSinceItPerHost) {
  stats_ahead_ = absl::Minutes(2);
  AcmeAndGlobex();
  const std::vector<std::string> vms = {"a-1", "a-2", "a-3", "a-4", "a-op", "g-1"};
  const absl::Time real_now = absl::Now();
  // Before the plan, within the load window of csd's stats clock: each VM
  // ran 90% of the time alone on its core and forced 10% of a CPU idle.
  ASSERT_OK(ReportWindow(vms, absl::ToUnixNanos(real_now - absl::Minutes(3)),
                         absl::ToUnixNanos(real_now - absl::Minutes(2)), 0.9, 0.1));
  std::vector<std::map<std::string, double>> passes;
  EngineLoop::Observers observers;
  observers.prediction_errors = [&](const std::map<std::string, double>& by_host) {
    passes.push_back(by_host);
  };
  MakeEngine({}, std::move(observers));
  ASSERT_EQ(engine_->RunPass(true), 1);
  ASSERT_EQ(passes.size(), 1u);
  EXPECT_TRUE(passes[0].empty()) << "no plan on the host before this pass";

  v1::PlanRequest request;
  request.set_report(true);
  auto report = engine_->Plan(request);
  ASSERT_OK(report);
  EXPECT_EQ(report->hosts_size(), 0) << "a report is not a plan";
  ASSERT_EQ(report->reports_size(), 1);
  const v1::HostPlanReport& planned = report->reports(0);
  EXPECT_EQ(planned.host_id(), kHost);
  EXPECT_EQ(planned.vms(), 4);
  EXPECT_EQ(planned.predicted().gain(), Vm("a-1").decision().predicted().gain());
  EXPECT_GE(planned.predicted().gain(), options_.hysteresis.min_gain);
  EXPECT_EQ(planned.before().windows(), 1);
  EXPECT_NEAR(planned.before().throughput(), 6 * 0.9, 1e-6);
  EXPECT_NEAR(planned.before().forced_idle_pct(), 6 * 10.0 / 4, 1e-6);
  EXPECT_EQ(planned.since().windows(), 0) << "nothing measured since the plan yet";
  EXPECT_FALSE(planned.has_measured_gain());
  EXPECT_FALSE(planned.has_forced_idle_error_pct());
  EXPECT_EQ(report->summary().hosts(), 1);
  EXPECT_EQ(report->summary().measured_hosts(), 0);

  // After the plan: every VM ran all the time, half of it beside a sibling
  // of its own group, and forced 2% of a CPU idle.
  ASSERT_OK(ReportWindow(vms, absl::ToUnixNanos(absl::Now() + absl::Seconds(1)),
                         absl::ToUnixNanos(absl::Now() + absl::Seconds(61)), 1.0, 0.02, 0.5));
  report = engine_->Plan(request);
  ASSERT_OK(report);
  ASSERT_EQ(report->reports_size(), 1);
  const v1::HostPlanReport& measured = report->reports(0);
  const double throughput = 6 * (1 - 0.5 * (1 - policy::SimParams().smt_share_cpu));
  EXPECT_EQ(measured.since().windows(), 1);
  EXPECT_NEAR(measured.since().throughput(), throughput, 1e-6);
  EXPECT_NEAR(measured.measured_gain(), throughput / (6 * 0.9) - 1, 1e-6);
  EXPECT_NEAR(measured.throughput_error(), throughput / planned.predicted().throughput() - 1,
              1e-6);
  const double forced_idle_error = 6 * 2.0 / 4 - planned.predicted().forced_idle_pct();
  EXPECT_NEAR(measured.forced_idle_error_pct(), forced_idle_error, 1e-6);
  EXPECT_NEAR(measured.foreign_error_pct(), -planned.predicted().foreign_pct(), 1e-6);
  EXPECT_EQ(report->summary().measured_hosts(), 1);
  EXPECT_NEAR(report->summary().mean_abs_forced_idle_error_pct(), std::abs(forced_idle_error),
              1e-6);

  // The engine's next interval pass exports the same error for the host.
  now_ += std::chrono::minutes(1);
  EXPECT_EQ(engine_->RunPass(true), 0);
  ASSERT_EQ(passes.size(), 2u);
  ASSERT_EQ(passes[1].count(kHost), 1u);
  EXPECT_NEAR(passes[1][kHost], forced_idle_error, 1e-6);

  // ExplainVM shows it for any VM of the host.
  v1::ExplainVMRequest explain;
  explain.set_vm_id("g-1");
  auto explained = state_->policy.ExplainVm(explain);
  ASSERT_OK(explained);
  EXPECT_NEAR(explained->host_plan().forced_idle_error_pct(), forced_idle_error, 1e-6);

  // By tenant: hosts running its VMs; a bad tenant id is refused.
  request.set_tenant_id("globex");
  EXPECT_EQ(engine_->Plan(request)->reports_size(), 1);
  request.set_tenant_id("initech");
  EXPECT_EQ(engine_->Plan(request)->reports_size(), 0);
  request.set_tenant_id("bad tenant!");
  EXPECT_EQ(engine_->Plan(request).status().code(), absl::StatusCode::kInvalidArgument);
}


}  // namespace
}  // namespace cosched::server
