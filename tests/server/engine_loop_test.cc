// The policy engine's control loop over DesiredState, without threads: the
// test runs each pass with its own clock, so hysteresis needs no sleeps.
#include "server/engine_loop.h"

#include <cmath>
#include <future>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/simulator.h"
#include "store/sqlite_store.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using SteadyClock = std::chrono::steady_clock;

const Actor kTester{"spiffe://test/tester", "admin"};
constexpr char kHost[] = "hv-1";

template <typename T>
absl::StatusOr<T> Wait(std::function<void(DesiredState::Done<T>)> call) {
  std::promise<absl::StatusOr<T>> promise;
  call([&](absl::StatusOr<T> r) { promise.set_value(std::move(r)); });
  return promise.get_future().get();
}

class EngineLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::SqliteStoreOptions options;
    options.data_dir = dir_.Sub("data");
    auto store = store::SqliteStore::Open(options);
    ASSERT_OK(store);
    store_ = std::move(*store);
    // The stats' clock runs stats_ahead_ ahead of the system's, so that a
    // test can report windows wholly after a plan csd dated with the latter.
    state_ = std::make_unique<DesiredState>(
        store_.get(), [this] { return absl::ToUnixNanos(absl::Now() + stats_ahead_); });
    ASSERT_OK(state_->LoadPlacement());
    options_.hysteresis.min_dwell = std::chrono::seconds(0);
    ASSERT_NO_FATAL_FAILURE(Register(kHost));
  }

  void Register(const std::string& host_id) {
    v1::RegisterRequest reg;
    reg.set_host_id(host_id);
    for (int c = 0; c < 2; ++c) {
      auto* core = reg.mutable_topology()->add_cores();
      core->add_cpus(2 * c);
      core->add_cpus(2 * c + 1);
    }
    ASSERT_OK(Wait<v1::RegisterResponse>(
        [&](auto done) { state_->RegisterHost(reg, kTester, std::move(done)); }));
  }

  void MakeEngine(EngineLoop::Hooks hooks = {}, EngineLoop::Observers observers = {}) {
    if (!hooks.clock) hooks.clock = [this] { return now_; };
    engine_ = std::make_unique<EngineLoop>(state_.get(), options_, std::move(hooks),
                                           std::move(observers));
  }

  // Two VMs of acme (auto, vm or tenant) and one of globex on the host,
  // reported busy.
  absl::Status TwoOfAcmeOneOfGlobex() {
    RETURN_IF_ERROR(SetPolicy("acme", v1::POLICY_MODE_AUTO,
                              {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}));
    for (const char* vm : {"a-1", "a-2"}) RETURN_IF_ERROR(Tag(vm, "acme"));
    RETURN_IF_ERROR(Tag("g-1", "globex"));
    return Report({"a-1", "a-2", "g-1"});
  }

  absl::Status SetPolicy(const std::string& tenant, v1::PolicyMode mode,
                         std::vector<v1::IsolationLevel> allowed, bool apply = true,
                         std::optional<double> budget = std::nullopt) {
    v1::SetTenantPolicyRequest request;
    v1::TenantPolicy* p = request.mutable_policy();
    p->set_tenant_id(tenant);
    p->set_default_isolation(v1::ISOLATION_LEVEL_VM);
    for (auto level : allowed) p->add_allowed_isolation(level);
    p->set_mode(mode);
    if (!apply) p->set_apply(false);
    if (budget) p->set_forced_idle_budget_pct(*budget);
    return Wait<v1::TenantPolicy>([&](auto done) {
             state_->SetTenantPolicy(request, kTester, std::move(done));
           }).status();
  }

  absl::Status Tag(const std::string& vm, const std::string& tenant,
                   v1::IsolationLevel level = v1::ISOLATION_LEVEL_UNSPECIFIED,
                   std::vector<std::string> classes = {}) {
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id(tenant);
    request.set_isolation(level);
    for (auto& c : classes) request.add_interference_classes(c);
    return Wait<v1::TagVMResponse>([&](auto done) {
             state_->TagVm(request, kTester, std::move(done));
           }).status();
  }

  // The host reports `vms` (1 vCPU each), with one stats window of up to
  // `window_s` ending now in which each ran `load` of the time and forced
  // `forced_idle` of a CPU idle, when window_s > 0.
  absl::Status Report(const std::vector<std::string>& vms, int window_s = 0,
                      double load = 1, double forced_idle = 0) {
    if (window_s == 0) return ReportWindow(vms, 0, 0, load, forced_idle);
    const int64_t end = absl::ToUnixNanos(absl::Now());
    // Windows never overlap: one after the last is as long as the time
    // since it ended.
    return ReportWindow(vms, std::max(end - int64_t{window_s} * 1000000000, last_window_end_),
                        end, load, forced_idle);
  }

  // The host reports `vms` with one window from start_ns to end_ns (none
  // when end_ns is 0) in which each ran `load` of the time, `paired` of that
  // beside a sibling of its group (else beside an idle one), and forced
  // `forced_idle` of a CPU idle.
  absl::Status ReportWindow(const std::vector<std::string>& vms, int64_t start_ns,
                            int64_t end_ns, double load, double forced_idle,
                            double paired = 0) {
    v1::ReportRequest request;
    request.set_host_id(report_host_);
    for (const std::string& id : vms) {
      auto* o = request.add_vms();
      o->set_vm_id(id);
      o->mutable_enforcement()->set_vcpus(1);
    }
    if (end_ns > 0) {
      const int64_t span = end_ns - start_ns;
      v1::StatsWindow* w = request.add_stats();
      w->set_start_unix_ns(start_ns);
      w->set_end_unix_ns(end_ns);
      last_window_end_ = end_ns;
      for (const std::string& id : vms) {
        v1::VMStats* s = w->add_vms();
        s->set_vm_id(id);
        const auto run = static_cast<int64_t>(load * span);
        const auto same = static_cast<int64_t>(paired * run);
        s->mutable_share()->set_run_ns(run);
        s->mutable_share()->set_same_ns(same);
        s->mutable_share()->set_idle_ns(run - same);
        s->mutable_share()->set_forced_idle_ns(static_cast<int64_t>(forced_idle * span));
        s->mutable_share()->set_forced_idle_known(true);
      }
    }
    return Wait<v1::ReportResponse>([&](auto done) {
             state_->ApplyReport(request, std::move(done));
           }).status();
  }

  v1::VM Vm(const std::string& id) {
    v1::GetVMRequest request;
    request.set_vm_id(id);
    auto vm = state_->GetVm(request);
    EXPECT_OK(vm);
    return vm.value_or(v1::VM());
  }

  // acme (auto, vm or tenant): four VMs the engine manages and one tagged
  // with --isolation vm; globex (fixed): one VM. All busy on 2 cores.
  void AcmeAndGlobex(bool acme_applies = true) {
    ASSERT_OK(SetPolicy("acme", v1::POLICY_MODE_AUTO,
                        {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}, acme_applies));
    ASSERT_OK(SetPolicy("globex", v1::POLICY_MODE_FIXED,
                        {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}));
    for (const char* vm : {"a-1", "a-2", "a-3", "a-4"}) ASSERT_OK(Tag(vm, "acme"));
    ASSERT_OK(Tag("a-op", "acme", v1::ISOLATION_LEVEL_VM));
    ASSERT_OK(Tag("g-1", "globex"));
    ASSERT_OK(Report({"a-1", "a-2", "a-3", "a-4", "a-op", "g-1"}));
  }

  cosched::testing::TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<DesiredState> state_;
  EngineOptions options_;
  std::unique_ptr<EngineLoop> engine_;
  SteadyClock::time_point now_ = SteadyClock::time_point() + std::chrono::hours(100);
  absl::Duration stats_ahead_ = absl::ZeroDuration();
  int64_t last_window_end_ = 0;
  // The host that Report and ReportWindow report for.
  std::string report_host_ = kHost;
};

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
  auto records = state_->ListAuditRecords(audit);
  ASSERT_OK(records);
  ASSERT_GE(records->records_size(), 1);
  EXPECT_EQ(records->records(0).method(), "EngineDecision");
  EXPECT_EQ(records->records(0).who(), kEngineActor);
  EXPECT_THAT(records->records(0).after(), HasSubstr("DECIDED_BY_ENGINE"));

  // Nothing more to do: the next passes write nothing.
  const int64_t revision = state_->CurrentRevision();
  now_ += std::chrono::hours(1);
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(state_->CurrentRevision(), revision);

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
  auto records = state_->ListAuditRecords(audit);
  ASSERT_OK(records);
  int decisions = 0;
  for (const v1::AuditRecord& r : records->records()) decisions += r.method() == "EngineDecision";
  EXPECT_EQ(decisions, 4 * applying) << "one record per VM changed";
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
  const int64_t revision = state_->CurrentRevision();
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(engine_->ReplanHost(kHost), false);
  EXPECT_EQ(state_->CurrentRevision(), revision);
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
  EXPECT_EQ(state_->CurrentRevision(), revision) << "Plan writes nothing either";

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
      [&](auto done) { state_->ApplyLayout(kHost, {change}, std::move(done)); });
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Vm("a-1").assignment().trust_group(), "acme/vm/a-1");

  change.expected_revision = before.assignment().revision();
  change.trust_group = "acme/tenant/other";
  auto wrong_group = Wait<int64_t>(
      [&](auto done) { state_->ApplyLayout(kHost, {change}, std::move(done)); });
  EXPECT_EQ(wrong_group.status().code(), absl::StatusCode::kFailedPrecondition);

  change.vm_id = "a-op";
  change.expected_revision = Vm("a-op").assignment().revision();
  change.trust_group = "acme/tenant";
  auto operators = Wait<int64_t>(
      [&](auto done) { state_->ApplyLayout(kHost, {change}, std::move(done)); });
  EXPECT_EQ(operators.status().code(), absl::StatusCode::kAborted) << "tagged with a level";
  change.vm_id = "g-1";
  change.expected_revision = Vm("g-1").assignment().revision();
  change.trust_group = "globex/tenant";
  auto fixed = Wait<int64_t>(
      [&](auto done) { state_->ApplyLayout(kHost, {change}, std::move(done)); });
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

TEST_F(EngineLoopTest, ARefusedProposalIsNotPredictedAgainUntilItsInputsMove) {
  // As below: two busy VMs of acme and one of globex on two cores, so
  // min_gain refuses acme's shared cookie pass after pass.
  ASSERT_OK(SetPolicy("acme", v1::POLICY_MODE_AUTO,
                      {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}));
  for (const char* vm : {"a-1", "a-2"}) ASSERT_OK(Tag(vm, "acme"));
  ASSERT_OK(Tag("g-1", "globex"));
  // Three minutes of windows, one a minute, all inside the engine's load
  // window: csd's stats clock runs a minute ahead.
  stats_ahead_ = absl::Minutes(1);
  const std::vector<std::string> vms = {"a-1", "a-2", "g-1"};
  const absl::Time t = absl::Now();
  auto minute = [&](int from, double load) {
    return ReportWindow(vms, absl::ToUnixNanos(t + absl::Minutes(from)),
                        absl::ToUnixNanos(t + absl::Minutes(from + 1)), load, 0);
  };
  ASSERT_OK(minute(-3, 1.0));
  MakeEngine();
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(engine_->predictions(), 1);
  const double gain = engine_->Plan(v1::PlanRequest())->hosts(0).planned().gain();

  // The same loads, and loads within 0.02 of them: the predictions stand.
  now_ += std::chrono::minutes(1);
  EXPECT_EQ(engine_->RunPass(true), 0);
  ASSERT_OK(minute(-2, 0.99));
  now_ += std::chrono::minutes(1);
  EXPECT_EQ(engine_->RunPass(true), 0);
  EXPECT_EQ(engine_->predictions(), 1);
  EXPECT_EQ(engine_->reused_predictions(), 3) << "two passes and the Plan above";
  EXPECT_EQ(engine_->Plan(v1::PlanRequest())->hosts(0).planned().gain(), gain);

  // A load that moved further is predicted again: 1.0, 0.99, 0.3.
  ASSERT_OK(minute(-1, 0.3));
  now_ += std::chrono::minutes(1);
  engine_->RunPass(true);
  EXPECT_EQ(engine_->predictions(), 2);

  // So is another VM on the host.
  ASSERT_OK(Tag("a-3", "acme"));
  ASSERT_OK(Report({"a-1", "a-2", "a-3", "g-1"}));
  now_ += std::chrono::minutes(1);
  engine_->RunPass(true);
  EXPECT_EQ(engine_->predictions(), 3);
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
  // acme allows only `vm`: its four VMs already have the engine's layout,
  // and nothing allowed forces less idle.
  ASSERT_OK(SetPolicy("acme", v1::POLICY_MODE_AUTO, {v1::ISOLATION_LEVEL_VM}, true, 2.0));
  const std::vector<std::string> vms = {"a-1", "a-2", "a-3", "a-4"};
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
    auto host = state_->GetHost(request);
    EXPECT_OK(host);
    return host->budget_unmet();
  };
  auto flag_records = [&] {
    v1::ListAuditRecordsRequest request;
    request.set_subject(kHost);
    auto records = state_->ListAuditRecords(request);
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
  auto explained = state_->ExplainVm(explain);
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
  auto explained = state_->ExplainVm(explain);
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
