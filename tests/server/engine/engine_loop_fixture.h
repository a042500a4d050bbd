// The fixture of the policy engine's control-loop tests
// (engine_loop_test.cc, engine_loop_predictions_test.cc): the desired state on a
// fresh SQLite store, one host, and an EngineLoop run pass by pass with the
// test's own clock, so hysteresis needs no sleeps.
#ifndef COSCHED_TESTS_SERVER_ENGINE_ENGINE_LOOP_FIXTURE_H_
#define COSCHED_TESTS_SERVER_ENGINE_ENGINE_LOOP_FIXTURE_H_

#include "server/engine/engine_loop.h"

#include <cmath>
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
#include "tests/server/state_testing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server::engine_testing {

using SteadyClock = std::chrono::steady_clock;

inline const Actor kTester{"spiffe://test/tester", "admin"};
inline constexpr char kHost[] = "hv-1";

using testing::Wait;

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
    state_ = std::make_unique<TestState>(*store_, [this] { return absl::ToUnixNanos(absl::Now() + stats_ahead_); });
    ASSERT_OK(state_->Load());
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
        [&](auto done) { state_->hosts.RegisterHost(reg, kTester, std::move(done)); }));
  }

  void MakeEngine(EngineLoop::Hooks hooks = {}, EngineLoop::Observers observers = {}) {
    if (!hooks.clock) hooks.clock = [this] { return now_; };
    engine_ = state_->MakeEngine(options_, std::move(hooks), std::move(observers));
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
             state_->policies.SetTenantPolicy(request, kTester, std::move(done));
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
             state_->vms.TagVm(request, kTester, std::move(done));
           }).status();
  }

  // The host reports `vms` (1 vCPU each unless vcpus_ says otherwise), with
  // one stats window of up to `window_s` ending now in which each vCPU ran
  // `load` of the time (unless loads_ says otherwise) and each VM forced
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
      o->mutable_enforcement()->set_vcpus(VcpusOf(id));
      if (auto pinned = pinned_by_others_.find(id); pinned != pinned_by_others_.end()) {
        for (int cpu : pinned->second) o->mutable_enforcement()->add_vcpu_affinity(cpu);
      }
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
        const auto it = loads_.find(id);
        const auto run = static_cast<int64_t>((it != loads_.end() ? it->second : load) *
                                              VcpusOf(id) * span);
        const auto same = static_cast<int64_t>(paired * run);
        s->mutable_share()->set_run_ns(run);
        s->mutable_share()->set_same_ns(same);
        s->mutable_share()->set_idle_ns(run - same);
        s->mutable_share()->set_forced_idle_ns(static_cast<int64_t>(forced_idle * span));
        s->mutable_share()->set_forced_idle_known(true);
      }
    }
    return Wait<v1::ReportResponse>([&](auto done) {
             state_->reports.ApplyReport(request, std::move(done));
           }).status();
  }

  v1::VM Vm(const std::string& id) {
    v1::GetVMRequest request;
    request.set_vm_id(id);
    auto vm = state_->vms.GetVm(request);
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
  std::unique_ptr<TestState> state_;
  EngineOptions options_;
  std::unique_ptr<EngineLoop> engine_;
  SteadyClock::time_point now_ = SteadyClock::time_point() + std::chrono::hours(100);
  absl::Duration stats_ahead_ = absl::ZeroDuration();
  int64_t last_window_end_ = 0;
  // The host that Report and ReportWindow report for.
  std::string report_host_ = kHost;
  // VMs whose vCPUs the agent reports pinned by others (libvirt), and where.
  std::map<std::string, std::vector<int>> pinned_by_others_;
  // VMs of more than 1 vCPU, and VMs whose vCPUs run another load than the
  // one Report is given.
  std::map<std::string, int> vcpus_;
  std::map<std::string, double> loads_;

  int VcpusOf(const std::string& vm) const {
    auto it = vcpus_.find(vm);
    return it != vcpus_.end() ? it->second : 1;
  }
};

}  // namespace cosched::server::engine_testing

#endif  // COSCHED_TESTS_SERVER_ENGINE_ENGINE_LOOP_FIXTURE_H_
