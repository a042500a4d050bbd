// "Same answer both ways" (issue #15): every shipped scenario, put into csd
// as records (a host of its topology, its tenants in mode auto, its VMs
// tagged without a level and reported with their vCPUs and declared load)
// and decided by csd's engine loop, gets the levels, trust groups and
// pinning that `csctl simulate --modes policy` decides for it
// (policy::PlanHost, which RunMode(kPolicy) calls). csd's engine tries one
// move per host and pass, so it runs passes until a whole round of them
// changes nothing; PlanHost takes the same moves in the same order.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/scenario.h"
#include "policy/tradeoff.h"
#include "policy/trust_group.h"
#include "server/engine/engine_loop.h"
#include "store/sqlite_store.h"
#include "tests/server/state_testing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

const Actor kTester{"spiffe://test/tester", "admin"};
constexpr char kHost[] = "hv-1";

using testing::Wait;

// One VM's decision, as both sides state it. The host's CPU c is the
// scenario's CPU c (core c % cores, as the simulator numbers them).
struct Decided {
  v1::IsolationLevel isolation;
  std::string trust_group;
  std::vector<int> pin_cpus;
  bool operator==(const Decided&) const = default;
};

std::ostream& operator<<(std::ostream& out, const Decided& d) {
  return out << v1::IsolationLevel_Name(d.isolation) << " '" << d.trust_group << "' pinned to ["
             << absl::StrJoin(d.pin_cpus, ",") << "]";
}

// More passes than any shipped scenario's moves (a groups move and at most
// five pinnings) need to settle.
constexpr int kMaxPasses = 24;

// The scenario through csd: records, one stats window, one engine pass.
// Returns each instance's assignment by name.
absl::StatusOr<std::map<std::string, Decided>> DecideInCsd(const policy::Scenario& scenario,
                                                           const std::string& data_dir) {
  store::SqliteStoreOptions store_options;
  store_options.data_dir = data_dir;
  ASSIGN_OR_RETURN(std::unique_ptr<store::Store> store, store::SqliteStore::Open(store_options));
  policy::PlacementOptions placement;
  placement.conflicts = scenario.conflicts;
  TestState state(*store, nullptr, placement);
  RETURN_IF_ERROR(state.Load());

  v1::RegisterRequest reg;
  reg.set_host_id(kHost);
  for (int c = 0; c < scenario.cores; ++c) {
    v1::Core* core = reg.mutable_topology()->add_cores();
    core->add_cpus(c);
    core->add_cpus(c + scenario.cores);
  }
  RETURN_IF_ERROR(Wait<v1::RegisterResponse>([&](auto done) {
                    state.hosts.RegisterHost(reg, kTester, std::move(done));
                  }).status());

  const std::vector<policy::VmInstance> vms = policy::ExpandInstances(scenario);
  std::map<std::string, v1::TenantPolicy> policies;
  for (const policy::TenantSpec& t : scenario.tenants) policies[t.policy.tenant_id()] = t.policy;
  for (const policy::VmInstance& vm : vms) {
    if (policies.count(vm.tenant) == 0) {
      policies[vm.tenant] = policy::DefaultTenantPolicy(vm.tenant);
    }
  }
  for (auto& [tenant, p] : policies) {
    v1::SetTenantPolicyRequest request;
    *request.mutable_policy() = p;
    request.mutable_policy()->set_mode(v1::POLICY_MODE_AUTO);
    RETURN_IF_ERROR(Wait<v1::TenantPolicy>([&](auto done) {
                      state.policies.SetTenantPolicy(request, kTester, std::move(done));
                    }).status());
  }

  v1::ReportRequest report;
  report.set_host_id(kHost);
  const int64_t end = absl::ToUnixNanos(absl::Now());
  const int64_t span = 10'000'000'000;
  v1::StatsWindow* window = report.add_stats();
  window->set_start_unix_ns(end - span);
  window->set_end_unix_ns(end);
  for (const policy::VmInstance& vm : vms) {
    v1::TagVMRequest tag;
    tag.set_vm_id(vm.name);
    tag.set_tenant_id(vm.tenant);
    for (const std::string& c : vm.classes) tag.add_interference_classes(c);
    RETURN_IF_ERROR(Wait<v1::TagVMResponse>([&](auto done) {
                      state.vms.TagVm(tag, kTester, std::move(done));
                    }).status());
    v1::VMObservation* observed = report.add_vms();
    observed->set_vm_id(vm.name);
    observed->mutable_enforcement()->set_vcpus(vm.vcpus);
    // The load csd measures is the one the scenario declares.
    v1::VMStats* stats = window->add_vms();
    stats->set_vm_id(vm.name);
    const auto run = static_cast<int64_t>(vm.workload.DeclaredLoad() * vm.vcpus * span);
    stats->mutable_share()->set_run_ns(run);
    stats->mutable_share()->set_unknown_ns(run);
  }
  RETURN_IF_ERROR(Wait<v1::ReportResponse>([&](auto done) {
                    state.reports.ApplyReport(report, std::move(done));
                  }).status());

  // The defaults but the time between changes: PlanHost has no clock.
  EngineOptions options;
  options.hysteresis.min_dwell = std::chrono::seconds(0);
  options.hysteresis.max_changes_per_hour = 60;
  std::unique_ptr<EngineLoop> engine = state.MakeEngine(options);
  int quiet = 0;
  for (int pass = 0; pass < kMaxPasses && quiet < 8; ++pass) {
    quiet = engine->RunPass(true) > 0 ? 0 : quiet + 1;
  }
  if (quiet < 8) return absl::DeadlineExceededError("csd's engine did not settle");
  std::map<std::string, Decided> decided;
  for (const policy::VmInstance& vm : vms) {
    v1::GetVMRequest get;
    get.set_vm_id(vm.name);
    ASSIGN_OR_RETURN(v1::VM got, state.vms.GetVm(get));
    decided[vm.name] = {got.assignment().isolation(), got.assignment().trust_group(),
                        std::vector<int>(got.assignment().pin().cpus().begin(),
                                         got.assignment().pin().cpus().end())};
  }
  return decided;
}

// Returns how many VMs both pin.
int ExpectSameAnswer(const policy::Scenario& scenario, const std::string& data_dir) {
  auto plan = policy::PlanHost(scenario);
  EXPECT_OK(plan);
  auto csd = DecideInCsd(scenario, data_dir);
  EXPECT_OK(csd);
  if (!plan.ok() || !csd.ok()) return -1;
  EXPECT_EQ(csd->size(), plan->vms.size());
  int pinned = 0;
  for (const policy::VmDecision& d : plan->vms) {
    EXPECT_EQ(csd->at(d.vm), (Decided{d.isolation, d.trust_group, d.pin_cpus}))
        << scenario.name << ": vm " << d.vm << "; simulate's reasons: "
        << absl::StrJoin(d.reasons, "; ");
    pinned += !d.pin_cpus.empty() && csd->at(d.vm) == Decided{d.isolation, d.trust_group, d.pin_cpus};
  }
  return pinned;
}

TEST(EngineScenariosTest, EveryShippedScenarioGetsTheDecisionsOfSimulateModePolicy) {
  cosched::testing::TempDir dir;
  int scenarios = 0;
  std::map<std::string, int> pinned;
  for (const auto& entry : std::filesystem::directory_iterator(COSCHED_SCENARIO_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path());
    std::stringstream yaml;
    yaml << in.rdbuf();
    auto scenario = policy::ParseScenarioYaml(yaml.str());
    ASSERT_OK(scenario) << entry.path();
    SCOPED_TRACE(scenario->name);
    pinned[scenario->name] = ExpectSameAnswer(*scenario, dir.Sub(scenario->name));
    ++scenarios;
  }
  EXPECT_EQ(scenarios, 7) << "the scenarios docs/scenarios.md ships";
  // Where pinning pays, both pin alike: A1's database on whole cores of its
  // own (the move 'busy-whole-cores-x1.00'), the small VMs on the others.
  EXPECT_EQ(pinned["a1-mysql"], 97);
}

// None of the shipped scenarios has two VMs of one tenant and class set, so
// there the relaxed level groups nobody and both keep the default: here
// grouping pays, and both take it.
TEST(EngineScenariosTest, WhereGroupingPaysBothChooseTheTenantsGroup) {
  auto scenario = policy::ParseScenarioYaml(R"(
name: acme-and-globex
seed: 1
duration_s: 2
host: {cores: 2, threads_per_core: 2}
tenants:
  - {name: acme, isolation: vm, allow: [vm, tenant]}
  - {name: globex, isolation: vm, allow: [vm]}
vms:
  - {name: a, count: 4, vcpus: 1, tenant: acme, workload: {kind: cpu, util: 1}}
  - {name: g, vcpus: 1, tenant: globex, workload: {kind: cpu, util: 1}}
)");
  ASSERT_OK(scenario);
  auto plan = policy::PlanHost(*scenario);
  ASSERT_OK(plan);
  EXPECT_EQ(plan->vms[0].trust_group, "acme/tenant");
  cosched::testing::TempDir dir;
  EXPECT_EQ(ExpectSameAnswer(*scenario, dir.Sub("data")), 0) << "both rules take `tenant` here";
}

}  // namespace
}  // namespace cosched::server
