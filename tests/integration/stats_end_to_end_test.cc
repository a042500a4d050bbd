// Sibling-sharing stats over the real wire: a fake agent reports windows
// for two VMs of two tenants through csd's AgentService, and csctl stats
// reads them back per VM, host, tenant and trust group.
#include <chrono>
#include <sstream>

#include "cli/commands.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/mini_cluster.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr int64_t kSec = 1000000000;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

v1::VMStats VmShare(const std::string& id, int64_t run, int64_t same, int64_t idle,
                    int64_t foreign, int64_t longest, int64_t forced_idle = -1) {
  v1::VMStats v;
  v.set_vm_id(id);
  v1::SiblingShare* s = v.mutable_share();
  s->set_run_ns(run);
  s->set_same_ns(same);
  s->set_idle_ns(idle);
  s->set_foreign_ns(foreign);
  s->set_foreign_intervals(foreign > 0 ? 2 : 0);
  s->set_longest_foreign_ns(longest);
  if (forced_idle >= 0) {
    s->set_forced_idle_ns(forced_idle);
    s->set_forced_idle_known(true);
  }
  return v;
}

class StatsEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = testing::MiniCluster::Start();
    ASSERT_OK(cluster);
    cluster_ = std::move(*cluster);
    cli_options_.server = cluster_->csd_address();
  }

  // Runs `csctl stats` with `args`; returns the exit code, output in out_.
  int Stats(cli::StatsArgs args, cli::OutputFormat format = cli::OutputFormat::kJson) {
    cli::CommandOptions options = cli_options_;
    options.format = format;
    out_.str("");
    err_.str("");
    return cli::RunStats(cluster_->control(), args, options, out_, err_);
  }

  json StatsJson(cli::StatsArgs args) {
    EXPECT_EQ(Stats(std::move(args)), cli::kExitOk) << err_.str();
    return json::parse(out_.str());
  }

  std::string TrustGroupOf(const std::string& vm, const std::string& tenant) {
    std::ostringstream out, err;
    cli::CommandOptions options = cli_options_;
    options.format = cli::OutputFormat::kJson;
    EXPECT_EQ(cli::RunTag(cluster_->control(), {.vm_id = vm, .tenant_id = tenant}, options, out, err),
              cli::kExitOk)
        << err.str();
    return json::parse(out.str())["trust_group"];
  }

  grpc::Status Register(const std::string& host) {
    grpc::ClientContext context;
    v1::RegisterRequest request;
    request.set_host_id(host);
    for (int c = 0; c < 2; ++c) {
      v1::Core* core = request.mutable_topology()->add_cores();
      core->add_cpus(2 * c);
      core->add_cpus(2 * c + 1);
    }
    v1::RegisterResponse response;
    return cluster_->agent_service().Register(&context, request, &response);
  }

  grpc::Status Report(const v1::ReportRequest& request) {
    grpc::ClientContext context;
    v1::ReportResponse response;
    return cluster_->agent_service().Report(&context, request, &response);
  }

  std::unique_ptr<testing::MiniCluster> cluster_;
  cli::CommandOptions cli_options_;
  std::ostringstream out_, err_;
};

TEST_F(StatsEndToEndTest, AgentWindowsAreServedPerVmHostTenantAndGroup) {
  const std::string group_a = TrustGroupOf("vm-a", "acme");
  const std::string group_b = TrustGroupOf("vm-b", "globex");
  ASSERT_OK(Register("hv-1"));

  // Three 10 s windows ending 40, 30 and 20 s ago; vm-b runs in the last two.
  const int64_t now = NowNs();
  v1::ReportRequest report;
  report.set_host_id("hv-1");
  report.add_vms()->set_vm_id("vm-a");
  report.add_vms()->set_vm_id("vm-b");
  report.set_dropped_windows(1);
  for (int i = 0; i < 3; ++i) {
    v1::StatsWindow* w = report.add_stats();
    w->set_end_unix_ns(now - (40 - 10 * i) * kSec);
    w->set_start_unix_ns(w->end_unix_ns() - 10 * kSec);
    w->set_events(1000);
    w->set_lost_events(i);
    *w->add_vms() = VmShare("vm-a", 4 * kSec, 2 * kSec, kSec, kSec, 1000 * (i + 1), 5000);
    if (i > 0) *w->add_vms() = VmShare("vm-b", 2 * kSec, 0, 2 * kSec, 0, 0);
    for (int c = 0; c < 2; ++c) {
      v1::CoreShare* core = w->add_cores();
      core->set_core(c);
      core->set_both_busy_ns(3 * kSec);
      core->set_one_idle_ns(4 * kSec);
      core->set_both_idle_ns(3 * kSec);
    }
  }
  ASSERT_OK(Report(report));
  // The agent did not hear the answer and sends the same Report again.
  ASSERT_OK(Report(report));

  json vm = StatsJson({.vm_id = "vm-a"});
  EXPECT_EQ(vm["windows"], 3);
  EXPECT_EQ(vm["lost_events"], 3);
  EXPECT_EQ(vm["dropped_windows"], 1);
  EXPECT_EQ(vm["start_unix_ns"], report.stats(0).start_unix_ns());
  EXPECT_EQ(vm["end_unix_ns"], report.stats(2).end_unix_ns());
  ASSERT_EQ(vm["vms"].size(), 1u);
  json a = vm["vms"][0];
  EXPECT_EQ(a["vm"], "vm-a");
  EXPECT_EQ(a["runtime_ns"], 12 * kSec);
  EXPECT_EQ(a["same_pct"], 50.0);
  EXPECT_EQ(a["idle_pct"], 25.0);
  EXPECT_EQ(a["foreign_pct"], 25.0);
  EXPECT_EQ(a["foreign_intervals"], 6);
  EXPECT_EQ(a["longest_foreign_ns"], 3000);  // a max, not a sum
  EXPECT_EQ(a["forced_idle_ns"], 15000);

  json host = StatsJson({.host_id = "hv-1", .window = "1h"});
  ASSERT_EQ(host["vms"].size(), 2u);
  EXPECT_EQ(host["vms"][1]["vm"], "vm-b");
  EXPECT_EQ(host["vms"][1]["runtime_ns"], 4 * kSec);
  EXPECT_FALSE(host["vms"][1].contains("forced_idle_ns"));
  EXPECT_EQ(host["total"]["runtime_ns"], 16 * kSec);
  EXPECT_EQ(host["total"]["forced_idle_ns"], 15000);
  ASSERT_EQ(host["cores"].size(), 2u);
  EXPECT_EQ(host["cores"][1]["one_idle_ns"], 12 * kSec);

  json acme = StatsJson({.tenant = "acme"});
  ASSERT_EQ(acme["vms"].size(), 1u);
  EXPECT_EQ(acme["vms"][0]["vm"], "vm-a");
  json globex = StatsJson({.tenant = "globex"});
  ASSERT_EQ(globex["vms"].size(), 1u);
  EXPECT_EQ(globex["total"]["runtime_ns"], 4 * kSec);
  EXPECT_EQ(globex["total"]["idle_pct"], 100.0);
  json by_group = StatsJson({.trust_group = group_b});
  ASSERT_EQ(by_group["vms"].size(), 1u);
  EXPECT_EQ(by_group["vms"][0]["vm"], "vm-b");
  EXPECT_NE(group_a, group_b);

  // A person's view of the host: a row per VM and the total.
  ASSERT_EQ(Stats({.host_id = "hv-1"}, cli::OutputFormat::kTable), cli::kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("host hv-1: 3 windows from "));
  EXPECT_THAT(out_.str(), HasSubstr("(last 300 s asked), 3 lost events, agents dropped 1 window(s)\n"));
  EXPECT_THAT(out_.str(), HasSubstr("cores: both busy 30.0%, one idle 40.0%, both idle 30.0%"));
  EXPECT_THAT(out_.str(), HasSubstr("vm-a   12000.000   50.00  25.00   25.00     0.00      6"
                                    "                  3.0                 0.015\n"));
  EXPECT_THAT(out_.str(), HasSubstr("TOTAL  16000.000"));

  // Nothing in the last 10 s, nothing for an unknown tenant: one line each.
  EXPECT_EQ(Stats({.vm_id = "vm-a", .window = "10s"}), cli::kExitRpcError);
  EXPECT_EQ(err_.str(), "csctl: no stats were reported for vm 'vm-a' in the last 10 s\n");
  EXPECT_EQ(Stats({.tenant = "initech"}), cli::kExitRpcError);
  EXPECT_EQ(err_.str(), "csctl: no stats were reported for tenant 'initech' in the last 300 s\n");
}

TEST_F(StatsEndToEndTest, AVmThatMovedIsSummedOverBothHosts) {
  TrustGroupOf("vm-a", "acme");
  ASSERT_OK(Register("hv-1"));
  ASSERT_OK(Register("hv-2"));
  const int64_t now = NowNs();
  for (const char* host : {"hv-1", "hv-2"}) {
    v1::ReportRequest report;
    report.set_host_id(host);
    report.add_vms()->set_vm_id("vm-a");
    v1::StatsWindow* w = report.add_stats();
    w->set_end_unix_ns(now - (host == std::string("hv-1") ? 30 : 10) * kSec);
    w->set_start_unix_ns(w->end_unix_ns() - 10 * kSec);
    *w->add_vms() = VmShare("vm-a", kSec, kSec, 0, 0, 0);
    ASSERT_OK(Report(report));
  }
  json vm = StatsJson({.vm_id = "vm-a"});
  EXPECT_EQ(vm["windows"], 2);
  EXPECT_EQ(vm["vms"][0]["runtime_ns"], 2 * kSec);
  json hv1 = StatsJson({.host_id = "hv-1"});
  EXPECT_EQ(hv1["total"]["runtime_ns"], kSec);
}

}  // namespace
}  // namespace cosched
