// csd's /metrics: RPC counts by code through the interceptor, accepted
// Reports feeding the fleet gauges and sharing counters, store writes, and
// connected agents, on a real csd with an ephemeral metrics port.
#include "server/api/csd_metrics.h"

#include <chrono>
#include <optional>
#include <thread>

#include "absl/time/clock.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/metrics_scrape.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/trusted_plaintext.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;
using cosched::testing::HttpGet;
using cosched::testing::SampleValue;
using cosched::testing::ScrapeText;
using Labels = std::map<std::string, std::string>;
using namespace std::chrono_literals;

constexpr int64_t kMs = 1000000;

// The `index`-th of one-second windows that start ten seconds ago (csd
// takes windows in order, not overlapping, and not from the future).
v1::StatsWindow Window(int index, int64_t run_ms, int64_t same_ms, int64_t foreign_ms,
                       int64_t longest_foreign_ns) {
  static const int64_t base = absl::ToUnixNanos(absl::Now()) - 10'000'000'000;
  v1::StatsWindow window;
  window.set_start_unix_ns(base + index * 1'000'000'000LL);
  window.set_end_unix_ns(window.start_unix_ns() + 1'000'000'000LL);
  v1::VMStats* vm = window.add_vms();
  vm->set_vm_id("vm-1");
  v1::SiblingShare* share = vm->mutable_share();
  share->set_run_ns(run_ms * kMs);
  share->set_same_ns(same_ms * kMs);
  share->set_foreign_ns(foreign_ms * kMs);
  share->set_idle_ns((run_ms - same_ms - foreign_ms) * kMs);
  if (foreign_ms > 0) {
    share->set_foreign_intervals(4);
    share->set_longest_foreign_ns(longest_foreign_ns);
  }
  share->set_forced_idle_ns(5 * kMs);
  share->set_forced_idle_known(true);
  return window;
}

v1::VMObservation Observed(const std::string& vm_id, v1::EnforcementState state) {
  v1::VMObservation o;
  o.set_vm_id(vm_id);
  o.mutable_enforcement()->set_state(state);
  return o;
}

class CsdMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = dir_.Sub("data");
    testing::TrustPlaintextCallers(options.authz);
    options.metrics_listen = "127.0.0.1:0";
    auto csd = CsdServer::Start(options);
    ASSERT_OK(csd);
    csd_ = std::move(*csd);
    ASSERT_GT(csd_->metrics_port(), 0);
    channel_ = grpc::CreateChannel(csd_->address(), grpc::InsecureChannelCredentials());
    control_ = v1::ControlPlane::NewStub(channel_);
    agent_ = v1::AgentService::NewStub(channel_);
  }

  grpc::Status Tag(const std::string& vm_id) {
    grpc::ClientContext context;
    v1::TagVMRequest request;
    request.set_vm_id(vm_id);
    request.set_tenant_id("acme");
    v1::TagVMResponse response;
    return control_->TagVM(&context, request, &response);
  }

  grpc::Status Report(const v1::ReportRequest& request) {
    grpc::ClientContext context;
    v1::ReportResponse response;
    return agent_->Report(&context, request, &response);
  }

  std::string Scrape() { return HttpGet(csd_->metrics_port(), "/metrics"); }

  bool ScrapeUntil(const std::function<bool(const std::string&)>& done,
                   std::string* last) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      *last = Scrape();
      if (done(*last)) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  cosched::testing::TempDir dir_;
  std::unique_ptr<CsdServer> csd_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ControlPlane::Stub> control_;
  std::unique_ptr<v1::AgentService::Stub> agent_;
};

TEST_F(CsdMetricsTest, RpcCountsByCodeAndLatency) {
  ASSERT_OK(Tag("vm-1"));
  ASSERT_OK(Tag("vm-2"));
  grpc::Status bad = Tag("not a valid id!");
  ASSERT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  const std::string text = Scrape();
  const Labels tag = {{"service", "cosched.v1.ControlPlane"}, {"method", "TagVM"}};
  auto with_code = [&](const char* code) {
    Labels l = tag;
    l["code"] = code;
    return l;
  };
  EXPECT_EQ(SampleValue(text, "cosched_grpc_server_handled_total", with_code("OK")), 2) << text;
  EXPECT_EQ(SampleValue(text, "cosched_grpc_server_handled_total",
                        with_code("INVALID_ARGUMENT")), 1);
  EXPECT_EQ(SampleValue(text, "cosched_grpc_server_started_total", tag), 3);
  EXPECT_EQ(SampleValue(text, "cosched_grpc_server_handling_seconds_count", tag), 3);
  // Two tags were written durably, each timed.
  EXPECT_GE(*SampleValue(text, "cosched_store_writes_total", {{"code", "OK"}}), 2);
  EXPECT_GE(*SampleValue(text, "cosched_store_write_duration_seconds_count"), 2);
  EXPECT_GE(*SampleValue(text, "cosched_store_revision"), 2);
  EXPECT_EQ(SampleValue(text, "cosched_store_cache_keys"), 0);  // SQLite keeps no copy
}

TEST_F(CsdMetricsTest, AcceptedReportsFeedFleetMetricsRefusedOnesDoNot) {
  {
    grpc::ClientContext context;
    v1::RegisterRequest request;
    request.set_host_id("hv-1");
    v1::RegisterResponse response;
    ASSERT_OK(agent_->Register(&context, request, &response));
  }
  v1::ReportRequest report;
  report.set_host_id("hv-1");
  *report.add_vms() = Observed("vm-1", v1::ENFORCEMENT_STATE_ENFORCED);
  *report.add_vms() = Observed("vm-2", v1::ENFORCEMENT_STATE_ENFORCED);
  *report.add_vms() = Observed("vm-3", v1::ENFORCEMENT_STATE_PARTIAL);
  *report.add_stats() = Window(0, 1000, 900, 10, 15000);
  *report.add_stats() = Window(1, 1000, 1000, 0, 0);
  report.set_dropped_windows(2);
  ASSERT_OK(Report(report));

  // An unregistered host is refused: nothing of it counts.
  v1::ReportRequest stranger = report;
  stranger.set_host_id("hv-unknown");
  EXPECT_EQ(Report(stranger).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  const std::string text = Scrape();
  EXPECT_EQ(SampleValue(text, "cosched_csd_reporting_hosts"), 1) << text;
  EXPECT_EQ(SampleValue(text, "cosched_csd_vms", {{"state", "enforced"}}), 2);
  EXPECT_EQ(SampleValue(text, "cosched_csd_vms", {{"state", "partial"}}), 1);
  EXPECT_EQ(SampleValue(text, "cosched_csd_vms", {{"state", "failed"}}), 0);
  EXPECT_EQ(SampleValue(text, "cosched_csd_stats_windows_total"), 2);
  EXPECT_EQ(SampleValue(text, "cosched_csd_stats_windows_dropped_total"), 2);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_fleet_vm_run_seconds_total"), 2.0);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_fleet_vm_sibling_seconds_total",
                                {{"sharing", "same"}}), 1.9);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_fleet_vm_sibling_seconds_total",
                                {{"sharing", "foreign"}}), 0.01);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_fleet_vm_sibling_seconds_total",
                                {{"sharing", "idle"}}), 0.09);
  EXPECT_EQ(SampleValue(text, "cosched_fleet_vm_foreign_intervals_total"), 4);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_fleet_vm_forced_idle_seconds_total"), 0.01);
  // One VM window had foreign intervals; its longest was 15 us.
  EXPECT_EQ(SampleValue(text, "cosched_fleet_vm_longest_foreign_interval_seconds_count"), 1);
  EXPECT_EQ(SampleValue(text, "cosched_fleet_vm_longest_foreign_interval_seconds_bucket",
                        {{"le", "1e-05"}}), 0);
  EXPECT_EQ(SampleValue(text, "cosched_fleet_vm_longest_foreign_interval_seconds_bucket",
                        {{"le", "2e-05"}}), 1);
  EXPECT_EQ(SampleValue(text, "cosched_grpc_server_handled_total",
                        {{"service", "cosched.v1.AgentService"},
                         {"method", "Report"},
                         {"code", "FAILED_PRECONDITION"}}), 1);
  // Memory: vm-1's one series holds a minute and an hour bucket at least
  // (its two windows may straddle a minute), and the heap is read.
  EXPECT_EQ(SampleValue(text, "cosched_csd_stats_series", {{"of", "agents"}}), 1);
  const double bucket_bytes =
      SampleValue(text, "cosched_csd_stats_bucket_bytes", {{"of", "agents"}}).value_or(0);
  // Packed, each ring with a little room to grow (stats_buckets.h).
  EXPECT_GT(bucket_bytes, 0);
  EXPECT_LE(bucket_bytes, 2 * (2 * StatsAggregator::kMaxVmBucketBytes + 64));
  EXPECT_EQ(SampleValue(text, "cosched_csd_stats_bucket_bytes", {{"of", "forwarded"}}), 0);
  EXPECT_GT(SampleValue(text, "cosched_csd_heap_bytes").value_or(0), bucket_bytes);
  // No label names a VM or a host.
  EXPECT_EQ(text.find("hv-1"), std::string::npos);
  EXPECT_EQ(text.find("vm-1"), std::string::npos);

  // A new report of the host replaces its last one.
  v1::ReportRequest later;
  later.set_host_id("hv-1");
  *later.add_vms() = Observed("vm-1", v1::ENFORCEMENT_STATE_FAILED);
  ASSERT_OK(Report(later));
  const std::string again = Scrape();
  EXPECT_EQ(SampleValue(again, "cosched_csd_vms", {{"state", "enforced"}}), 0);
  EXPECT_EQ(SampleValue(again, "cosched_csd_vms", {{"state", "failed"}}), 1);
  EXPECT_EQ(SampleValue(again, "cosched_csd_held_report_hosts"), 0);
  // Only what the agent applied changes: held in memory, not written.
  *later.mutable_vms(0) = Observed("vm-1", v1::ENFORCEMENT_STATE_ENFORCED);
  ASSERT_OK(Report(later));
  EXPECT_EQ(SampleValue(Scrape(), "cosched_csd_held_report_hosts"), 1);

  // An agent holding its stream counts as connected.
  EXPECT_EQ(SampleValue(again, "cosched_csd_connected_agents"), 0);
  grpc::ClientContext watch_context;
  v1::WatchAssignmentsRequest watch;
  watch.set_host_id("hv-1");
  auto reader = agent_->WatchAssignments(&watch_context, watch);
  v1::WatchAssignmentsResponse first;
  ASSERT_TRUE(reader->Read(&first));
  std::string text_watching;
  EXPECT_TRUE(ScrapeUntil([](const std::string& t) {
    return SampleValue(t, "cosched_csd_connected_agents") == 1;
  }, &text_watching)) << text_watching;
  watch_context.TryCancel();
  while (reader->Read(&first)) {
  }
  reader->Finish();
}

TEST(CsdMetricsUnit, HostsThatStopReportingLeaveTheFleetGauges) {
  auto now = std::chrono::steady_clock::time_point() + 1h;
  CsdMetricsOptions options;
  options.report_staleness = 300s;
  options.now = [&now] { return now; };
  CsdMetrics metrics(options);
  v1::ReportRequest report;
  report.set_host_id("hv-1");
  *report.add_vms() = Observed("vm-1", v1::ENFORCEMENT_STATE_ENFORCED);
  metrics.RecordAcceptedReport(SummarizeReport(report));
  report.set_host_id("hv-2");
  now += 200s;
  metrics.RecordAcceptedReport(SummarizeReport(report));

  std::string text = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(text, "cosched_csd_reporting_hosts"), 2);
  EXPECT_EQ(SampleValue(text, "cosched_csd_vms", {{"state", "enforced"}}), 2);
  now += 150s;  // hv-1 last reported 350 s ago
  text = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(text, "cosched_csd_reporting_hosts"), 1);
  EXPECT_EQ(SampleValue(text, "cosched_csd_vms", {{"state", "enforced"}}), 1);
}

TEST(CsdMetricsUnit, TheRolloutsStageHostsAndStateAreGauges) {
  std::optional<v1::Rollout> rollout;
  CsdMetricsOptions options;
  options.rollout = [&rollout] { return rollout; };
  // The counts come with the record only where asked for (they go over
  // every host): the enabled gauge reads them.
  options.rollout_counts = [&rollout] {
    std::optional<v1::Rollout> counted = rollout;
    if (counted) counted->set_enabled_count(2);
    return counted;
  };
  CsdMetrics metrics(options);
  std::string text = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(text, "cosched_csd_rollout_stage"), 0);
  EXPECT_EQ(SampleValue(text, "cosched_csd_rollout_enabled_hosts"), 0);
  EXPECT_EQ(text.find("cosched_csd_rollout_state{"), std::string::npos) << text;

  rollout.emplace();
  rollout->set_rollout_id("r-3");
  rollout->set_state(v1::Rollout::STATE_HALTED);
  rollout->set_stage(1);
  text = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(text, "cosched_csd_rollout_stage"), 2);
  EXPECT_EQ(SampleValue(text, "cosched_csd_rollout_enabled_hosts"), 2);
  EXPECT_EQ(SampleValue(text, "cosched_csd_rollout_state", {{"state", "halted"}}), 1);
  EXPECT_EQ(SampleValue(text, "cosched_csd_rollout_state", {{"state", "running"}}), 0);
}

TEST(CsdMetricsUnit, StatsForwardedToTheLeaderByOutcomeOnEtcdReplicasOnly) {
  CsdMetricsOptions options;
  std::optional<std::pair<int64_t, int64_t>> counts;
  options.forwarded_stats = [&counts] { return counts; };
  CsdMetrics metrics(options);
  std::string text = ScrapeText(metrics.collectables());
  EXPECT_EQ(text.find("cosched_csd_forwarded_stats_reports{"), std::string::npos) << text;
  counts = std::pair<int64_t, int64_t>{12, 3};
  text = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(text, "cosched_csd_forwarded_stats_reports", {{"outcome", "forwarded"}}),
            12);
  EXPECT_EQ(SampleValue(text, "cosched_csd_forwarded_stats_reports", {{"outcome", "dropped"}}), 3);
}

TEST(CsdMetricsUnit, ThePredictionErrorIsAGaugePerHostOfTheEnginesLastPass) {
  CsdMetrics metrics({});
  metrics.SetPredictionErrors({{"hv-1", 1.5}, {"hv-2", -0.25}});
  std::string text = ScrapeText(metrics.collectables());
  EXPECT_EQ(SampleValue(text, "cosched_csd_engine_host_forced_idle_error_pct", {{"host", "hv-1"}}),
            1.5);
  EXPECT_EQ(SampleValue(text, "cosched_csd_engine_host_forced_idle_error_pct", {{"host", "hv-2"}}),
            -0.25);
  EXPECT_EQ(SampleValue(text, "cosched_csd_engine_forced_idle_error_pct_count"), 2);
  // The next pass measured hv-2 only: hv-1's series goes.
  metrics.SetPredictionErrors({{"hv-2", 0.5}});
  text = ScrapeText(metrics.collectables());
  EXPECT_EQ(text.find("host=\"hv-1\""), std::string::npos) << text;
  EXPECT_EQ(SampleValue(text, "cosched_csd_engine_host_forced_idle_error_pct", {{"host", "hv-2"}}),
            0.5);
  EXPECT_EQ(SampleValue(text, "cosched_csd_engine_forced_idle_error_pct_count"), 3);
}

TEST(CsdMetricsServer, BusyMetricsAddressFailsStartNamingIt) {
  cosched::testing::TempDir dir;
  CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = dir.Sub("a");
  options.metrics_listen = "127.0.0.1:0";
  auto first = CsdServer::Start(options);
  ASSERT_OK(first);
  options.data_dir = dir.Sub("b");
  options.metrics_listen = "127.0.0.1:" + std::to_string((*first)->metrics_port());
  auto second = CsdServer::Start(options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(options.metrics_listen));
}

TEST(CsdMetricsServer, ConfigDefaultsOnAndOffTurnsItOff) {
  v1::CsdConfig config;
  EXPECT_EQ(CsdOptionsFromConfig(config).metrics_listen, "127.0.0.1:9465");
  config.set_metrics_listen("off");
  EXPECT_EQ(CsdOptionsFromConfig(config).metrics_listen, "");
  config.set_metrics_listen("[::1]:9100");
  EXPECT_EQ(CsdOptionsFromConfig(config).metrics_listen, "[::1]:9100");
  EXPECT_EQ(CsdOptions().metrics_listen, "");
}

}  // namespace
}  // namespace cosched::server
