#include "agent/agent_metrics.h"

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "agent/agent.h"
#include "common/version.h"
#include "discovery/testing/static_vm_discovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/testing/core_sched_fake.h"
#include "host/testing/fake_host.h"
#include "host/testing/pseudo_fs_fake.h"
#include "tests/agent/agent_fixture.h"
#include "tests/agent/fake_csd.h"
#include "tests/testing/metrics_scrape.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace cosched::agent {
namespace {

using ::testing::HasSubstr;
using cosched::testing::HttpGet;
using cosched::testing::SampleValue;
using namespace std::chrono_literals;
using cosched::testing::ScrapeText;
using Labels = std::map<std::string, std::string>;

constexpr int64_t kMs = 1000000;

v1::VMStats* AddVm(v1::StatsWindow& window, const std::string& vm_id,
                   int64_t run_ms, int64_t same_ms, int64_t idle_ms,
                   int64_t foreign_ms, int64_t unknown_ms) {
  v1::VMStats* vm = window.add_vms();
  vm->set_vm_id(vm_id);
  v1::SiblingShare* s = vm->mutable_share();
  s->set_run_ns(run_ms * kMs);
  s->set_same_ns(same_ms * kMs);
  s->set_idle_ns(idle_ms * kMs);
  s->set_foreign_ns(foreign_ms * kMs);
  s->set_unknown_ns(unknown_ms * kMs);
  return vm;
}

VmOutcome Outcome(const std::string& vm_id, v1::EnforcementState state,
                  int found, int tagged, int wrong, int untaggable) {
  VmOutcome vm;
  vm.vm_id = vm_id;
  vm.enforcement.set_state(state);
  vm.enforcement.set_threads_found(found);
  vm.enforcement.set_threads_tagged(tagged);
  vm.enforcement.set_threads_wrong(wrong);
  vm.enforcement.set_threads_untaggable(untaggable);
  return vm;
}

std::string GroupOf(const std::string& vm_id) {
  return vm_id == "vm-a" ? "tenant-x" : "vm-b";
}

// Issue #33: which build runs where, for an upgrade's progress.
TEST(AgentMetrics, BuildInfoNamesTheRunningBuild) {
  AgentMetrics metrics;
  const std::string text = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(text, "cosched_build_info",
                        {{"version", CoschedVersion()}, {"commit", CoschedCommit()}}),
            1.0)
      << text;
}

TEST(AgentMetrics, StatsWindowsAccumulatePerVmInSeconds) {
  AgentMetrics metrics;
  v1::StatsWindow w1;
  v1::VMStats* a = AddVm(w1, "vm-a", 1000, 600, 300, 100, 0);
  a->mutable_share()->set_foreign_intervals(7);
  a->mutable_share()->set_longest_foreign_ns(25000);  // 25 us
  a->mutable_share()->set_forced_idle_ns(40 * kMs);
  a->mutable_share()->set_forced_idle_known(true);
  AddVm(w1, "vm-b", 500, 0, 500, 0, 0);
  v1::CoreShare* core = w1.add_cores();
  core->set_core(1);
  core->set_both_busy_ns(700 * kMs);
  core->set_one_idle_ns(200 * kMs);
  core->set_both_idle_ns(100 * kMs);
  w1.set_events(1000);
  w1.set_lost_events(3);
  metrics.RecordStatsWindow(w1, GroupOf);

  v1::StatsWindow w2;  // vm-a runs again; vm-b does not
  v1::VMStats* a2 = AddVm(w2, "vm-a", 1000, 1000, 0, 0, 0);
  a2->mutable_share()->set_forced_idle_ns(10 * kMs);
  a2->mutable_share()->set_forced_idle_known(true);
  metrics.RecordStatsWindow(w2, GroupOf);

  const std::string text = ScrapeText(metrics.collectables());
  const Labels a_labels = {{"vm", "vm-a"}, {"trust_group", "tenant-x"}};
  const Labels b_labels = {{"vm", "vm-b"}, {"trust_group", "vm-b"}};
  auto sharing = [](Labels l, const char* kind) {
    l["sharing"] = kind;
    return l;
  };
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_vm_run_seconds_total", a_labels), 2.0);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_vm_sibling_seconds_total",
                                sharing(a_labels, "same")), 1.6);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_vm_sibling_seconds_total",
                                sharing(a_labels, "idle")), 0.3);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_vm_sibling_seconds_total",
                                sharing(a_labels, "foreign")), 0.1);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_vm_sibling_seconds_total",
                                sharing(a_labels, "unknown")), 0);
  EXPECT_EQ(SampleValue(text, "cosched_vm_foreign_intervals_total", a_labels), 7);
  // The last window had no foreign interval.
  EXPECT_EQ(SampleValue(text, "cosched_vm_longest_foreign_interval_seconds", a_labels), 0);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_vm_forced_idle_seconds_total", a_labels), 0.05);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_vm_run_seconds_total", b_labels), 0.5);
  // Forced idle was never known for vm-b: no series rather than a false 0.
  EXPECT_EQ(SampleValue(text, "cosched_vm_forced_idle_seconds_total", b_labels), std::nullopt);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_core_seconds_total",
                                {{"core", "1"}, {"state", "both_busy"}}), 0.7);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_core_seconds_total",
                                {{"core", "1"}, {"state", "one_idle"}}), 0.2);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_core_seconds_total",
                                {{"core", "1"}, {"state", "both_idle"}}), 0.1);
  EXPECT_EQ(SampleValue(text, "cosched_agent_stats_windows_total"), 2);
  EXPECT_EQ(SampleValue(text, "cosched_agent_sched_switch_events_total"), 1000);
  EXPECT_EQ(SampleValue(text, "cosched_agent_sched_switch_lost_events_total"), 3);

  v1::StatsWindow w3;
  AddVm(w3, "vm-a", 10, 0, 0, 10, 0)->mutable_share()->set_longest_foreign_ns(3 * kMs);
  metrics.RecordStatsWindow(w3, GroupOf);
  EXPECT_DOUBLE_EQ(*SampleValue(ScrapeText(metrics.collectables()),
                                "cosched_vm_longest_foreign_interval_seconds", a_labels),
                   0.003);
}

TEST(AgentMetrics, SeriesOfVmsThatLeftOrChangedGroupAreRemoved) {
  AgentMetrics metrics;
  v1::StatsWindow window;
  AddVm(window, "vm-a", 100, 100, 0, 0, 0);
  AddVm(window, "vm-b", 100, 0, 100, 0, 0);
  metrics.RecordStatsWindow(window, GroupOf);

  // vm-b left the host: the next pass no longer finds it.
  ReconcileResult result;
  result.vms.push_back(Outcome("vm-a", v1::ENFORCEMENT_STATE_ENFORCED, 3, 3, 0, 0));
  PassRecord pass;
  pass.result = &result;
  metrics.RecordReconcilePass(pass);
  std::string text = ScrapeText(metrics.collectables());
  EXPECT_TRUE(SampleValue(text, "cosched_vm_run_seconds_total",
                          {{"vm", "vm-a"}, {"trust_group", "tenant-x"}}));
  EXPECT_EQ(text.find("vm=\"vm-b\""), std::string::npos) << text;

  // vm-a moved to another trust group: only the new series remain.
  metrics.RecordStatsWindow(window, [](const std::string&) { return "merged"; });
  text = ScrapeText(metrics.collectables());
  EXPECT_EQ(text.find("trust_group=\"tenant-x\""), std::string::npos) << text;
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_vm_run_seconds_total",
                                {{"vm", "vm-a"}, {"trust_group", "merged"}}), 0.1);

  // A failed discovery says nothing about which VMs left.
  PassRecord failed;
  failed.discovery = absl::UnavailableError("libvirt is down");
  metrics.RecordReconcilePass(failed);
  text = ScrapeText(metrics.collectables());
  EXPECT_TRUE(SampleValue(text, "cosched_vm_run_seconds_total",
                          {{"vm", "vm-a"}, {"trust_group", "merged"}}));
  EXPECT_EQ(SampleValue(text, "cosched_agent_discovery_failures_total"), 1);
}

TEST(AgentMetrics, ConnectionGaugesAreReadAtScrapeTime) {
  bool connected = false;
  bool refused = true;
  AgentMetrics metrics([&] { return connected; }, [&] { return refused; });
  std::string text = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(text, "cosched_agent_csd_connected"), 0);
  EXPECT_EQ(SampleValue(text, "cosched_agent_csd_refused"), 1);
  connected = true;
  refused = false;
  text = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(text, "cosched_agent_csd_connected"), 1);
  EXPECT_EQ(SampleValue(text, "cosched_agent_csd_refused"), 0);
}

TEST(AgentMetrics, ReconcilePassesSetEnforcementGauges) {
  AgentMetrics metrics;
  ReconcileResult result;
  result.vms = {Outcome("vm-a", v1::ENFORCEMENT_STATE_ENFORCED, 4, 4, 0, 0),
                Outcome("vm-b", v1::ENFORCEMENT_STATE_ENFORCED, 2, 2, 0, 0),
                Outcome("vm-c", v1::ENFORCEMENT_STATE_PARTIAL, 5, 3, 1, 1),
                Outcome("vm-d", v1::ENFORCEMENT_STATE_FAIL_CLOSED, 1, 1, 0, 0)};
  result.stats.cookie_writes = 6;
  result.stats.cookie_reads = 12;
  result.stats.threads_changed = 4;
  PassRecord pass;
  pass.trigger = PassTrigger::kStart;
  pass.duration = std::chrono::milliseconds(3);
  pass.result = &result;
  metrics.RecordReconcilePass(pass);
  result.vms.resize(1);  // three VMs left
  result.stats = {};
  pass.trigger = PassTrigger::kRescan;
  pass.duration = std::chrono::microseconds(200);
  metrics.RecordReconcilePass(pass);

  const std::string text = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(text, "cosched_agent_vms", {{"state", "enforced"}}), 1);
  EXPECT_EQ(SampleValue(text, "cosched_agent_vms", {{"state", "partial"}}), 0);
  EXPECT_EQ(SampleValue(text, "cosched_agent_vms", {{"state", "fail-closed"}}), 0);
  EXPECT_EQ(SampleValue(text, "cosched_agent_threads", {{"status", "found"}}), 4);
  EXPECT_EQ(SampleValue(text, "cosched_agent_threads", {{"status", "untaggable"}}), 0);
  EXPECT_EQ(SampleValue(text, "cosched_agent_prctl_writes_total"), 6);
  EXPECT_EQ(SampleValue(text, "cosched_agent_prctl_reads_total"), 12);
  EXPECT_EQ(SampleValue(text, "cosched_agent_threads_moved_total"), 4);
  EXPECT_EQ(SampleValue(text, "cosched_agent_reconcile_passes_total", {{"trigger", "start"}}), 1);
  EXPECT_EQ(SampleValue(text, "cosched_agent_reconcile_passes_total", {{"trigger", "rescan"}}), 1);
  EXPECT_EQ(SampleValue(text, "cosched_agent_reconcile_duration_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_agent_reconcile_duration_seconds_sum"), 0.0032);
  EXPECT_EQ(SampleValue(text, "cosched_agent_reconcile_duration_seconds_bucket",
                        {{"le", "0.00025"}}), 1);
  EXPECT_EQ(SampleValue(text, "cosched_agent_csd_connected"), 0);
  EXPECT_EQ(SampleValue(text, "cosched_agent_csd_refused"), 0);

  ReconcileResult first;
  first.vms = {Outcome("vm-c", v1::ENFORCEMENT_STATE_PARTIAL, 5, 3, 1, 1)};
  pass.result = &first;
  metrics.RecordReconcilePass(pass);
  const std::string again = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(again, "cosched_agent_vms", {{"state", "partial"}}), 1);
  EXPECT_EQ(SampleValue(again, "cosched_agent_vms", {{"state", "enforced"}}), 0);
  EXPECT_EQ(SampleValue(again, "cosched_agent_threads", {{"status", "wrong"}}), 1);
  EXPECT_EQ(SampleValue(again, "cosched_agent_threads", {{"status", "untaggable"}}), 1);
  EXPECT_EQ(SampleValue(again, "cosched_agent_cookie_readback_blind"), 0);
  EXPECT_EQ(SampleValue(again, "cosched_agent_threads", {{"status", "unverified"}}), 0);

  // The kernel reads cookies back as 0 (6.1 before its hash key is ready).
  ReconcileResult blind;
  blind.vms = {Outcome("vm-c", v1::ENFORCEMENT_STATE_PENDING, 5, 0, 0, 0)};
  blind.stats.readback_blind = true;
  blind.stats.threads_unverified = 5;
  pass.result = &blind;
  metrics.RecordReconcilePass(pass);
  const std::string unverified = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(unverified, "cosched_agent_cookie_readback_blind"), 1);
  EXPECT_EQ(SampleValue(unverified, "cosched_agent_threads", {{"status", "unverified"}}), 5);
  EXPECT_EQ(SampleValue(unverified, "cosched_agent_vms", {{"state", "pending"}}), 1);
  blind.stats = {};
  metrics.RecordReconcilePass(pass);
  EXPECT_EQ(SampleValue(ScrapeText(metrics.collectables()), "cosched_agent_cookie_readback_blind"), 0);
}

// A host of two cores with two CPUs each, SMT on.
std::shared_ptr<host::FakePseudoFs> SmtHost() {
  return host::MakeFakeHost({.schedstats = false});
}

// Scrapes /metrics until `done` holds for the text; false after 10 s.
bool ScrapeUntil(int port, const std::function<bool(const std::string&)>& done,
                 std::string* last) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    *last = HttpGet(port, "/metrics");
    if (done(*last)) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// The agent of agent_fixture.h on a host without schedstats, serving
// /metrics on a free port.
class AgentMetricsServedTest : public agent_testing::AgentTest {
 protected:
  AgentMetricsServedTest() { host_fs_ = SmtHost(); }
  AgentOptions Options(const std::string& server) {
    AgentOptions options = AgentTest::Options(server);
    options.metrics_listen = "127.0.0.1:0";
    return options;
  }
};

TEST_F(AgentMetricsServedTest, EnforcementReconcileAndCallsToCsdOnMetrics) {
  discovery::DiscoveredVm vm;
  vm.vm_id = "vm-1";
  vm.qemu_pid = 100;
  vm.threads = {{100, 100, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator},
                {101, 100, "CPU 0/KVM", discovery::DiscoveredThread::Kind::kVcpu}};
  kernel_->AddTask(100, 100);
  kernel_->AddTask(101, 100);
  discovery_->SetVms({vm});
  testing::FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  csd.service().Push(testing::MakeSnapshot(3, {testing::MakeAssignment("vm-1", "g1", 3)}));

  Agent agent(Options(csd.address()));
  ASSERT_OK(agent.Start());
  const int port = agent.metrics_port();
  ASSERT_GT(port, 0);

  const Labels report_ok = {{"service", "cosched.v1.AgentService"},
                            {"method", "Report"},
                            {"code", "OK"}};
  std::string text;
  ASSERT_TRUE(ScrapeUntil(port, [&](const std::string& t) {
    return SampleValue(t, "cosched_agent_vms", {{"state", "enforced"}}) == 1 &&
           SampleValue(t, "cosched_grpc_client_handled_total", report_ok) >= 1 &&
           SampleValue(t, "cosched_agent_csd_connected") == 1;
  }, &text)) << text;
  EXPECT_THAT(text, HasSubstr("200 OK"));
  EXPECT_EQ(SampleValue(text, "cosched_agent_vms", {{"state", "fail-closed"}}), 0);
  EXPECT_EQ(SampleValue(text, "cosched_agent_threads", {{"status", "tagged"}}), 2);
  EXPECT_GE(*SampleValue(text, "cosched_agent_reconcile_duration_seconds_count"), 1);
  EXPECT_EQ(SampleValue(text, "cosched_agent_reconcile_passes_total", {{"trigger", "start"}}), 1);
  EXPECT_GT(*SampleValue(text, "cosched_agent_prctl_writes_total"), 0);
  EXPECT_GE(*SampleValue(text, "cosched_grpc_client_handled_total",
                         {{"service", "cosched.v1.AgentService"},
                          {"method", "Register"},
                          {"code", "OK"}}), 1);
  EXPECT_GE(*SampleValue(text, "cosched_grpc_client_handling_seconds_count",
                         {{"service", "cosched.v1.AgentService"},
                          {"method", "Report"}}), 1);

  // The collector's windows, as the agent will be handed them.
  v1::StatsWindow window;
  AddVm(window, "vm-1", 200, 150, 50, 0, 0);
  agent.metrics().RecordStatsWindow(window, [](const std::string&) { return "g1"; });
  text = HttpGet(port, "/metrics");
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_vm_sibling_seconds_total",
                                {{"vm", "vm-1"}, {"trust_group", "g1"}, {"sharing", "same"}}),
                   0.15);

  // csd goes away: the connection gauge says so.
  csd.Shutdown();
  ASSERT_TRUE(ScrapeUntil(port, [](const std::string& t) {
    return SampleValue(t, "cosched_agent_csd_connected") == 0;
  }, &text)) << text;
}

TEST_F(AgentMetricsServedTest, BusyMetricsAddressStopsStartNamingIt) {
  auto taken = metrics::MetricsHttpServer::Start("127.0.0.1:0", {});
  ASSERT_OK(taken);
  AgentOptions options = Options("127.0.0.1:1");
  options.metrics_listen = (*taken)->address();
  absl::Status status = Agent(options).Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("serve metrics"));
  EXPECT_THAT(status.message(), HasSubstr((*taken)->address()));
}

TEST(AgentMetricsConfig, ListenDefaultsOnAndOffTurnsItOff) {
  v1::AgentConfig config;
  config.set_host_id("hv-1");
  EXPECT_EQ(AgentOptionsFromConfig(config)->metrics_listen, "127.0.0.1:9464");
  config.set_metrics_listen("off");
  EXPECT_EQ(AgentOptionsFromConfig(config)->metrics_listen, "");
  config.set_metrics_listen("0.0.0.0:9100");
  EXPECT_EQ(AgentOptionsFromConfig(config)->metrics_listen, "0.0.0.0:9100");
  // Options built in code (tests) serve nothing unless asked.
  EXPECT_EQ(AgentOptions().metrics_listen, "");
}

}  // namespace
}  // namespace cosched::agent
