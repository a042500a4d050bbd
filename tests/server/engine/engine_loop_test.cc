// The policy engine's control loop: what it regroups and leaves alone, on
// one thread or several, dry runs, races with TagVM, and its hysteresis
// (min_dwell, the hourly cap across a restart). Predictions, min_gain, the
// screen and budgets are in engine_loop_predictions_test.cc.
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

TEST_F(EngineLoopTest, RegroupsAnAutoTenantsVmsAndLeavesFixedAndOperatorVmsAlone) {
  AcmeAndGlobex();
  MakeEngine();
  ASSERT_EQ(engine_->RunPass(true), 1);
  for (const char* id : {"a-1", "a-2", "a-3", "a-4"}) {
    v1::VM vm = Vm(id);
    EXPECT_EQ(vm.assignment().isolation(), v1::ISOLATION_LEVEL_TENANT) << id;
    EXPECT_EQ(vm.assignment().trust_group(), "acme/tenant") << id;
    EXPECT_EQ(vm.decision().decided_by(), v1::DECIDED_BY_ENGINE) << id;
    EXPECT_TRUE(vm.decision().has_decided_at()) << id;
    EXPECT_GE(vm.decision().predicted().gain(), options_.hysteresis.min_gain) << id;
    EXPECT_GT(vm.decision().predicted().throughput(), 0) << id;
    EXPECT_THAT(vm.decision().reasons(0), HasSubstr("allows `tenant`")) << id;
  }
  EXPECT_EQ(Vm("a-op").assignment().trust_group(), "acme/vm/a-op");
  EXPECT_EQ(Vm("a-op").decision().decided_by(), v1::DECIDED_BY_OPERATOR);
  EXPECT_EQ(Vm("g-1").assignment().trust_group(), "globex/vm/g-1");
  EXPECT_EQ(Vm("g-1").decision().decided_by(), v1::DECIDED_BY_OPERATOR);

  // Audited like any change, with the decision in the record.
  v1::ListAuditRecordsRequest audit;
  audit.set_subject("a-1");
  auto records = state_->audit.ListAuditRecords(audit);
  ASSERT_OK(records);
  ASSERT_GE(records->records_size(), 1);
  EXPECT_EQ(records->records(0).method(), "EngineDecision");
  EXPECT_EQ(records->records(0).who(), kEngineActor);
  EXPECT_THAT(records->records(0).after(), HasSubstr("DECIDED_BY_ENGINE"));

  // Nothing more to do: the next passes write nothing.
  const int64_t revision = state_->store.CurrentRevision();
  now_ += std::chrono::hours(1);
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(state_->store.CurrentRevision(), revision);

  // Retagging a VM the engine manages keeps the engine's level.
  ASSERT_OK(Tag("a-2", "acme"));
  EXPECT_EQ(Vm("a-2").assignment().trust_group(), "acme/tenant");
  EXPECT_EQ(Vm("a-2").decision().decided_by(), v1::DECIDED_BY_ENGINE);
}

TEST_F(EngineLoopTest, APassPlansHostsOnSeveralThreadsAsItWouldOneByOne) {
  ASSERT_OK(SetPolicy("acme", v1::POLICY_MODE_AUTO,
                      {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}));
  // Eight hosts, four VMs of acme each, each host at another load.
  constexpr int kHosts = 8;
  std::vector<std::vector<std::string>> vms(kHosts);
  for (int h = 0; h < kHosts; ++h) {
    report_host_ = absl::StrCat("hv-p", h);
    ASSERT_NO_FATAL_FAILURE(Register(report_host_));
    for (int v = 0; v < 4; ++v) {
      vms[h].push_back(absl::StrCat("p", h, "-", v));
      ASSERT_OK(Tag(vms[h].back(), "acme"));
    }
    last_window_end_ = 0;
    ASSERT_OK(Report(vms[h], 60, 0.55 + 0.06 * h));
  }
  options_.planner_threads = 4;
  MakeEngine();
  // What one thread decides for each host (Plan goes host by host).
  auto plan = engine_->Plan(v1::PlanRequest());
  ASSERT_OK(plan);
  std::map<std::string, v1::HostLayoutPlan> planned;
  for (const v1::HostLayoutPlan& host : plan->hosts()) planned[host.host_id()] = host;
  int applying = 0;
  std::set<double> gains;
  for (int h = 0; h < kHosts; ++h) {
    const std::string host = absl::StrCat("hv-p", h);
    ASSERT_EQ(planned.count(host), 1u) << host;
    ASSERT_EQ(planned[host].changes_size(), 4) << host;
    applying += planned[host].would_apply();
    gains.insert(planned[host].planned().gain());
  }
  ASSERT_GE(applying, kHosts / 2) << "most hosts gain enough to change";
  ASSERT_GE(gains.size(), 3u) << "the hosts' loads make different predictions";

  EXPECT_EQ(engine_->RunPass(true), applying);
  for (int h = 0; h < kHosts; ++h) {
    const v1::HostLayoutPlan& host = planned[absl::StrCat("hv-p", h)];
    for (const std::string& id : vms[h]) {
      const v1::VM vm = Vm(id);
      if (!host.would_apply()) {
        EXPECT_EQ(vm.assignment().trust_group(), "acme/vm/" + id);
        continue;
      }
      EXPECT_EQ(vm.assignment().trust_group(), "acme/tenant") << id;
      EXPECT_EQ(vm.decision().decided_by(), v1::DECIDED_BY_ENGINE) << id;
      // The same prediction as the plan made alone.
      EXPECT_EQ(vm.decision().predicted().gain(), host.planned().gain()) << id;
      EXPECT_EQ(vm.decision().predicted().throughput(), host.planned().throughput()) << id;
    }
  }
  v1::ListAuditRecordsRequest audit;
  audit.set_who(kEngineActor);
  audit.set_page_size(1000);
  auto records = state_->audit.ListAuditRecords(audit);
  ASSERT_OK(records);
  int decisions = 0;
  for (const v1::AuditRecord& r : records->records()) decisions += r.method() == "EngineDecision";
  EXPECT_EQ(decisions, 4 * applying) << "one record per VM changed";
}

// Issue #33 item 5: new options (a reload of csd.yaml) hold from the next
// pass on, without a new engine.
TEST_F(EngineLoopTest, NewOptionsHoldFromTheNextPass) {
  AcmeAndGlobex();
  options_.hysteresis.min_gain = 0.99;  // no layout gains that much
  MakeEngine();
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(Vm("a-1").assignment().trust_group(), "acme/vm/a-1");
  EngineOptions next = options_;
  next.hysteresis.min_gain = 0.03;
  engine_->SetOptions(next);
  now_ += std::chrono::hours(1);
  EXPECT_EQ(engine_->RunPass(true), 1);
  EXPECT_EQ(Vm("a-1").assignment().trust_group(), "acme/tenant");
}

TEST_F(EngineLoopTest, SwitchingBackToFixedKeepsTheEnginesLayoutUntilRetagged) {
  AcmeAndGlobex();
  MakeEngine();
  ASSERT_EQ(engine_->RunPass(true), 1);
  ASSERT_OK(SetPolicy("acme", v1::POLICY_MODE_FIXED,
                      {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}));
  EXPECT_EQ(Vm("a-1").assignment().trust_group(), "acme/tenant");
  ASSERT_OK(Tag("a-1", "acme"));
  EXPECT_EQ(Vm("a-1").assignment().trust_group(), "acme/vm/a-1");
  EXPECT_EQ(Vm("a-1").decision().decided_by(), v1::DECIDED_BY_OPERATOR);
  EXPECT_THAT(Vm("a-1").decision().reasons(0), HasSubstr("mode fixed"));
  EXPECT_EQ(Vm("a-2").assignment().trust_group(), "acme/tenant");
  EXPECT_EQ(engine_->RunPass(true), 0) << "a fixed tenant's VMs are not the engine's";
  EXPECT_EQ(Vm("a-1").assignment().trust_group(), "acme/vm/a-1");
}

TEST_F(EngineLoopTest, ADryRunPlansAndShowsButWritesNothing) {
  AcmeAndGlobex(/*acme_applies=*/false);
  MakeEngine();
  const int64_t revision = state_->store.CurrentRevision();
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(engine_->ReplanHost(kHost), false);
  EXPECT_EQ(state_->store.CurrentRevision(), revision);
  EXPECT_EQ(Vm("a-1").assignment().trust_group(), "acme/vm/a-1");

  auto plan = engine_->Plan(v1::PlanRequest());
  ASSERT_OK(plan);
  ASSERT_EQ(plan->hosts_size(), 1);
  const v1::HostLayoutPlan& host = plan->hosts(0);
  EXPECT_EQ(host.host_id(), kHost);
  EXPECT_FALSE(host.would_apply());
  ASSERT_EQ(host.changes_size(), 4);
  EXPECT_EQ(host.changes(0).vm_id(), "a-1");
  EXPECT_EQ(host.changes(0).from_trust_group(), "acme/vm/a-1");
  EXPECT_EQ(host.changes(0).to_trust_group(), "acme/tenant");
  EXPECT_GT(host.planned().gain(), 0.03);
  EXPECT_THAT(host.reasons(host.reasons_size() - 1), HasSubstr("apply: false"));
  EXPECT_EQ(state_->store.CurrentRevision(), revision) << "Plan writes nothing either";

  v1::PlanRequest of_globex;
  of_globex.set_tenant_id("globex");
  ASSERT_EQ(engine_->Plan(of_globex)->hosts_size(), 1) << "globex runs on the same host";
  v1::PlanRequest of_nobody;
  of_nobody.set_tenant_id("initech");
  EXPECT_EQ(engine_->Plan(of_nobody)->hosts_size(), 0);
  v1::PlanRequest bad;
  bad.set_tenant_id("bad tenant!");
  EXPECT_EQ(engine_->Plan(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineLoopTest, ATagVmThatRacesAReplanIsNotLost) {
  AcmeAndGlobex();
  int races = 0;
  EngineLoop::Hooks hooks;
  hooks.before_write = [&](const std::string&) {
    // Between the engine's read and its write, an operator retags a-3
    // with a class: the engine's write must not undo it.
    if (races++ == 0) {
      ASSERT_OK(Tag("a-3", "acme", v1::ISOLATION_LEVEL_UNSPECIFIED, {"avx512"}));
    }
  };
  MakeEngine(std::move(hooks));
  ASSERT_EQ(engine_->RunPass(true), 1);
  EXPECT_EQ(races, 2) << "the first write lost the race and the engine re-planned";
  v1::VM a3 = Vm("a-3");
  ASSERT_EQ(a3.interference_classes_size(), 1);
  EXPECT_EQ(a3.interference_classes(0), "avx512");
  EXPECT_EQ(a3.assignment().trust_group(), "acme/tenant/avx512");
  EXPECT_EQ(a3.decision().decided_by(), v1::DECIDED_BY_ENGINE);
  EXPECT_EQ(Vm("a-1").assignment().trust_group(), "acme/tenant");
}

TEST_F(EngineLoopTest, ACompareAndSetOnAStaleRevisionWritesNothing) {
  AcmeAndGlobex();
  v1::VM before = Vm("a-1");
  LayoutChange change;
  change.vm_id = "a-1";
  change.expected_revision = before.assignment().revision() - 1;
  change.isolation = v1::ISOLATION_LEVEL_TENANT;
  change.trust_group = "acme/tenant";
  auto stale = Wait<int64_t>(
      [&](auto done) { state_->layouts.ApplyLayout(kHost, {change}, std::move(done)); });
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Vm("a-1").assignment().trust_group(), "acme/vm/a-1");

  change.expected_revision = before.assignment().revision();
  change.trust_group = "acme/tenant/other";
  auto wrong_group = Wait<int64_t>(
      [&](auto done) { state_->layouts.ApplyLayout(kHost, {change}, std::move(done)); });
  EXPECT_EQ(wrong_group.status().code(), absl::StatusCode::kFailedPrecondition);

  change.vm_id = "a-op";
  change.expected_revision = Vm("a-op").assignment().revision();
  change.trust_group = "acme/tenant";
  auto operators = Wait<int64_t>(
      [&](auto done) { state_->layouts.ApplyLayout(kHost, {change}, std::move(done)); });
  EXPECT_EQ(operators.status().code(), absl::StatusCode::kAborted) << "tagged with a level";
  change.vm_id = "g-1";
  change.expected_revision = Vm("g-1").assignment().revision();
  change.trust_group = "globex/tenant";
  auto fixed = Wait<int64_t>(
      [&](auto done) { state_->layouts.ApplyLayout(kHost, {change}, std::move(done)); });
  EXPECT_EQ(fixed.status().code(), absl::StatusCode::kAborted) << "globex is fixed";
}

TEST_F(EngineLoopTest, ALayoutHoldsForMinDwellBeforeTheEngineReplacesIt) {
  options_.hysteresis.min_dwell = std::chrono::minutes(10);
  ASSERT_OK(SetPolicy("acme", v1::POLICY_MODE_AUTO,
                      {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}));
  for (const char* vm : {"a-1", "a-2", "a-3", "a-4"}) ASSERT_OK(Tag(vm, "acme"));
  ASSERT_OK(Report({"a-1", "a-2", "a-3", "a-4"}));
  MakeEngine();
  ASSERT_EQ(engine_->RunPass(true), 1);
  ASSERT_EQ(Vm("a-1").assignment().trust_group(), "acme/tenant");
  // Three more VMs of acme arrive a minute later: the layout has held 60 s.
  for (const char* vm : {"a-5", "a-6", "a-7"}) ASSERT_OK(Tag(vm, "acme"));
  ASSERT_OK(Report({"a-1", "a-2", "a-3", "a-4", "a-5", "a-6", "a-7"}));
  now_ += std::chrono::minutes(1);
  EXPECT_FALSE(engine_->ReplanHost(kHost));
  EXPECT_EQ(Vm("a-5").assignment().trust_group(), "acme/vm/a-5");
  auto plan = engine_->Plan(v1::PlanRequest());
  ASSERT_OK(plan);
  ASSERT_EQ(plan->hosts_size(), 1);
  EXPECT_FALSE(plan->hosts(0).would_apply());
  EXPECT_EQ(plan->hosts(0).changes_size(), 3);
  EXPECT_THAT(plan->hosts(0).reasons(plan->hosts(0).reasons_size() - 1),
              HasSubstr("of min_dwell 600 s"));
  now_ += std::chrono::minutes(10);
  EXPECT_TRUE(engine_->ReplanHost(kHost));
  EXPECT_EQ(Vm("a-5").assignment().trust_group(), "acme/tenant");
  EXPECT_EQ(Vm("a-7").assignment().trust_group(), "acme/tenant");
}

TEST_F(EngineLoopTest, TheHourlyChangeCountSurvivesARestart) {
  options_.hysteresis.max_changes_per_hour = 2;
  ASSERT_OK(SetPolicy("acme", v1::POLICY_MODE_AUTO,
                      {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}));
  std::vector<std::string> vms = {"a-1", "a-2", "a-3", "a-4"};
  for (const std::string& vm : vms) ASSERT_OK(Tag(vm, "acme"));
  ASSERT_OK(Report(vms));
  MakeEngine();
  ASSERT_TRUE(engine_->ReplanHost(kHost));
  // Three more VMs of acme: a second change.
  auto arrive = [&](std::vector<std::string> more) {
    for (const std::string& vm : more) {
      ASSERT_OK(Tag(vm, "acme"));
      vms.push_back(vm);
    }
    ASSERT_OK(Report(vms));
  };
  ASSERT_NO_FATAL_FAILURE(arrive({"a-5", "a-6", "a-7"}));
  now_ += std::chrono::minutes(1);
  ASSERT_TRUE(engine_->ReplanHost(kHost));

  // csd restarts (a new engine over the same store, its clock elsewhere):
  // the two changes of the last hour still count.
  now_ += std::chrono::hours(5);
  MakeEngine();
  ASSERT_NO_FATAL_FAILURE(arrive({"a-8", "a-9", "a-10"}));
  EXPECT_FALSE(engine_->ReplanHost(kHost));
  EXPECT_EQ(Vm("a-8").assignment().trust_group(), "acme/vm/a-8");
  auto plan = engine_->Plan(v1::PlanRequest());
  ASSERT_OK(plan);
  ASSERT_EQ(plan->hosts_size(), 1);
  EXPECT_EQ(plan->hosts(0).changes_size(), 3);
  EXPECT_THAT(plan->hosts(0).reasons(plan->hosts(0).reasons_size() - 1),
              HasSubstr("changed layout 2 times in the last hour (at most 2)"));
  // An hour after the first change, one is allowed again.
  now_ += std::chrono::minutes(61);
  EXPECT_TRUE(engine_->ReplanHost(kHost));
  EXPECT_EQ(Vm("a-8").assignment().trust_group(), "acme/tenant");
}


}  // namespace
}  // namespace cosched::server
