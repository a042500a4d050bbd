// csd's placement view is kept current write by write; these tests check it
// against a view loaded from scratch from the same store (what csd builds at
// its next start) after random sequences of registrations, tags, reports,
// moves, untags and policy changes.
#include "server/state/placement_view.h"

#include <random>

#include "absl/strings/match.h"
#include "common/config_loader.h"
#include "gtest/gtest.h"
#include "server/daemon/csd_server.h"
#include "store/sqlite_store.h"
#include "tests/server/state_testing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

const Actor kTester{"spiffe://test/tester", "admin"};

using testing::Wait;

policy::PlacementOptions Options() {
  policy::PlacementOptions options;
  options.conflicts = {{"avx512", "latency-critical"}};
  return options;
}

class PlacementViewTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    store::SqliteStoreOptions options;
    options.data_dir = dir_.Sub("data");
    auto store = store::SqliteStore::Open(options);
    ASSERT_OK(store);
    store_ = std::move(*store);
    state_ = std::make_unique<TestState>(*store_, nullptr, Options());
    ASSERT_OK(state_->Load());
  }

  // The answers of `view` to a fixed set of requests, cores left out: a
  // view built in another order may pin dedicated VMs to other (equally
  // many) cores.
  static std::vector<std::string> Answers(const PlacementView& view) {
    std::vector<std::string> out;
    for (int vcpus : {1, 2, 5, 8}) {
      for (auto level : {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT,
                         v1::ISOLATION_LEVEL_DEDICATED}) {
        for (bool pin : {true, false}) {
          policy::PlacementRequest r;
          r.vm_id = "probe";
          r.tenant = "t1";
          r.vcpus = vcpus;
          r.isolation = level;
          r.pinning = pin;
          r.classes = {vcpus % 2 ? "latency-critical" : "web"};
          auto a = view.Place(r);
          std::string line = a.ok() ? a->decision.host_id : a.status().ToString();
          if (a.ok()) {
            for (const auto& c : a->decision.ranked) {
              line += " " + c.host_id + ":" + std::to_string(c.predicted_cost);
            }
          }
          out.push_back(line);
        }
      }
    }
    return out;
  }

  void ExpectViewMatchesStore() {
    PlacementView fresh(Options());
    ASSERT_OK(fresh.Load(*store_));
    EXPECT_EQ(state_->placement.VmsByHost(), fresh.VmsByHost());
    EXPECT_EQ(state_->placement.host_count(), fresh.host_count());
    EXPECT_EQ(Answers(state_->placement), Answers(fresh));
  }

  cosched::testing::TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<TestState> state_;
};

TEST_P(PlacementViewTest, IncrementalViewEqualsViewLoadedFromStore) {
  std::mt19937 rng(GetParam());
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  const std::vector<std::string> hosts = {"h0", "h1", "h2", "h3"};
  const std::vector<std::string> tenants = {"t0", "t1", "t2"};
  const std::vector<std::string> classes = {"avx512", "latency-critical", "web"};
  const std::vector<v1::IsolationLevel> levels = {
      v1::ISOLATION_LEVEL_UNSPECIFIED, v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT,
      v1::ISOLATION_LEVEL_NONE, v1::ISOLATION_LEVEL_DEDICATED};
  std::vector<std::string> vms;
  for (int i = 0; i < 24; ++i) vms.push_back("vm-" + std::to_string(i));
  // The tenant each VM was first tagged for (a VM keeps its tenant).
  std::map<std::string, std::string> tenant_of;

  for (int step = 0; step < 150; ++step) {
    switch (pick(6)) {
      case 0: {  // (re)register, sometimes with another core count or none
        v1::RegisterRequest r;
        r.set_host_id(hosts[pick(hosts.size())]);
        const int cores = pick(5) == 0 ? 0 : 2 + 2 * pick(4);
        for (int c = 0; c < cores; ++c) {
          auto* core = r.mutable_topology()->add_cores();
          core->add_cpus(c);
          core->add_cpus(c + cores);
        }
        ASSERT_TRUE(Wait<v1::RegisterResponse>([&](auto done) {
                      state_->hosts.RegisterHost(r, kTester, std::move(done));
                    }).ok());
        break;
      }
      case 1:
      case 2: {  // tag or retag
        v1::TagVMRequest r;
        r.set_vm_id(vms[pick(vms.size())]);
        auto known = tenant_of.find(r.vm_id());
        r.set_tenant_id(known != tenant_of.end() ? known->second
                                                 : tenants[pick(tenants.size())]);
        r.set_isolation(levels[pick(levels.size())]);
        if (pick(2)) r.add_interference_classes(classes[pick(classes.size())]);
        auto tagged = Wait<v1::TagVMResponse>(
            [&](auto done) { state_->vms.TagVm(r, kTester, std::move(done)); });
        // A tenant's policy may forbid the level: that changes nothing.
        if (tagged.ok()) tenant_of[r.vm_id()] = r.tenant_id();
        break;
      }
      case 3: {  // a host reports a random subset, with vCPU counts
        const std::string& host = hosts[pick(hosts.size())];
        v1::ReportRequest r;
        r.set_host_id(host);
        for (const std::string& vm : vms) {
          if (pick(5) != 0) continue;
          auto* o = r.add_vms();
          o->set_vm_id(vm);
          o->mutable_enforcement()->set_vcpus(pick(7));
        }
        // An unregistered host is refused: nothing changes.
        (void)Wait<v1::ReportResponse>(
            [&](auto done) { state_->reports.ApplyReport(r, std::move(done)); });
        break;
      }
      case 4: {  // untag
        v1::UntagVMRequest r;
        r.set_vm_id(vms[pick(vms.size())]);
        auto untagged = Wait<v1::UntagVMResponse>(
            [&](auto done) { state_->vms.UntagVm(r, kTester, std::move(done)); });
        if (untagged.ok()) tenant_of.erase(r.vm_id());
        break;
      }
      case 5: {  // a tenant's default level changes (re-assigns its VMs)
        v1::SetTenantPolicyRequest r;
        r.mutable_policy()->set_tenant_id(tenants[pick(tenants.size())]);
        r.mutable_policy()->set_default_isolation(levels[1 + pick(levels.size() - 1)]);
        if (pick(2)) r.mutable_policy()->set_forced_idle_budget_pct(pick(50));
        (void)Wait<v1::TenantPolicy>(
            [&](auto done) { state_->policies.SetTenantPolicy(r, kTester, std::move(done)); });
        break;
      }
    }
    if (step % 25 == 24) {
      SCOPED_TRACE("step " + std::to_string(step));
      ExpectViewMatchesStore();
    }
  }
  // Something was placed, so that the comparison meant something.
  size_t placed = 0;
  for (const auto& [host, ids] : state_->placement.VmsByHost()) placed += ids.size();
  EXPECT_GT(placed, 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, PlacementViewTest, ::testing::Values(1, 2, 3, 4));

TEST(PlacementView, VmReportedBeforeItsHostHasATopologyIsPlacedLater) {
  cosched::testing::TempDir dir;
  store::SqliteStoreOptions options;
  options.data_dir = dir.Sub("data");
  auto store = store::SqliteStore::Open(options);
  ASSERT_OK(store);
  TestState state(*store->get(), nullptr, Options());
  ASSERT_OK(state.Load());

  v1::RegisterRequest reg;
  reg.set_host_id("h");
  ASSERT_TRUE(Wait<v1::RegisterResponse>([&](auto done) {
                state.hosts.RegisterHost(reg, kTester, std::move(done));
              }).ok());
  v1::TagVMRequest tag;
  tag.set_vm_id("big");
  tag.set_isolation(v1::ISOLATION_LEVEL_DEDICATED);
  ASSERT_TRUE(Wait<v1::TagVMResponse>(
                  [&](auto done) { state.vms.TagVm(tag, kTester, std::move(done)); })
                  .ok());
  v1::ReportRequest report;
  report.set_host_id("h");
  auto* o = report.add_vms();
  o->set_vm_id("big");
  o->mutable_enforcement()->set_vcpus(6);
  ASSERT_TRUE(Wait<v1::ReportResponse>(
                  [&](auto done) { state.reports.ApplyReport(report, std::move(done)); })
                  .ok());
  policy::PlacementRequest r;
  r.vm_id = "probe";
  r.tenant = "t";
  r.vcpus = 2;
  EXPECT_EQ(state.placement.Place(r).status().code(),
            absl::StatusCode::kResourceExhausted);  // no topology: not placeable

  for (int c = 0; c < 4; ++c) {
    auto* core = reg.mutable_topology()->add_cores();
    core->add_cpus(2 * c);
    core->add_cpus(2 * c + 1);
  }
  ASSERT_TRUE(Wait<v1::RegisterResponse>([&](auto done) {
                state.hosts.RegisterHost(reg, kTester, std::move(done));
              }).ok());
  // The dedicated VM took 3 of the 4 cores: the last one stays shared, as
  // the agent's planner keeps it, so only an unpinned VM fits.
  auto pinned = state.placement.Place(r);
  EXPECT_EQ(pinned.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(pinned.status().message(), "stays shared"))
      << pinned.status();
  r.pinning = false;
  auto a = state.placement.Place(r);
  ASSERT_OK(a);
  EXPECT_EQ(a->decision.host_id, "h");
  EXPECT_TRUE(a->decision.cores.empty());
}

// Another replica's Report changes a placed VM's vCPUs: the view counts
// the new number (a dedicated VM's cores).
TEST(PlacementView, ReportedVcpusOfAnotherReplicaChangeTheCoresAVmTakes) {
  PlacementView view(Options());
  PlacementDelta delta;
  v1::Host host;
  host.set_host_id("h");
  for (int c = 0; c < 4; ++c) {
    auto* core = host.mutable_topology()->add_cores();
    core->add_cpus(2 * c);
    core->add_cpus(2 * c + 1);
  }
  delta.hosts.push_back(host);
  PlacedVm big{.vm_id = "big", .tenant_id = "t", .host_id = "h",
               .isolation = v1::ISOLATION_LEVEL_DEDICATED, .classes = {}, .vcpus = 2,
               .vcpu_affinity = {}};
  delta.vms.push_back(big);
  view.Apply(delta);
  policy::PlacementRequest r;
  r.vm_id = "probe";
  r.tenant = "t2";
  r.vcpus = 2;
  r.pinning = true;
  ASSERT_OK(view.Place(r));  // one core taken, two pinnable, one shared

  v1::VMObservation reported;
  reported.set_vm_id("other-name");
  reported.set_uuid("big");  // tagged by UUID
  reported.mutable_enforcement()->set_vcpus(6);
  view.ApplyReportedVcpus("h", {reported});
  // Three cores taken: the last one stays shared.
  EXPECT_EQ(view.Place(r).status().code(), absl::StatusCode::kResourceExhausted);
  view.ApplyReportedVcpus("elsewhere", {reported});  // another host: nothing
  EXPECT_EQ(view.Place(r).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(CsdOptions, ClassConflictsComeFromTheConfig) {
  v1::CsdConfig config;
  absl::Status loaded = LoadYamlConfigFile(
      std::string(COSCHED_DEPLOY_CONFIG_DIR) + "/csd.yaml", &config);
  ASSERT_OK(loaded);
  CsdOptions options = CsdOptionsFromConfig(config);
  EXPECT_EQ(options.class_conflicts,
            (std::vector<std::pair<std::string, std::string>>{{"avx512", "latency-critical"}}));
}

TEST(CsdOptions, BadClassConflictIsRefusedAtStart) {
  cosched::testing::TempDir dir;
  CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = dir.Sub("data");
  options.metrics_listen = "";
  options.class_conflicts = {{"avx512", "no spaces"}};
  auto csd = CsdServer::Start(options);
  ASSERT_EQ(csd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(csd.status().message().find("class_conflicts[0].b"), std::string::npos)
      << csd.status();
}

}  // namespace
}  // namespace cosched::server
