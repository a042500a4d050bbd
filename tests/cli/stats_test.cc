// csctl stats: the window flag, what is sent, the table and the JSON.
#include <algorithm>
#include <sstream>

#include "cli/commands.h"
#include "cli/csctl.h"
#include "cli/stats_output.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cli/fake_control_plane.h"

namespace cosched::cli {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(ParseStatsWindowTest, AcceptsSecondsMinutesHoursAndADay) {
  EXPECT_EQ(*ParseStatsWindow("--window", "5m"), 300);
  EXPECT_EQ(*ParseStatsWindow("--window", "300s"), 300);
  EXPECT_EQ(*ParseStatsWindow("--window", "300"), 300);
  EXPECT_EQ(*ParseStatsWindow("--window", "1h"), 3600);
  EXPECT_EQ(*ParseStatsWindow("--window", "24h"), 86400);
  EXPECT_EQ(*ParseStatsWindow("--window", "1d"), 86400);
  EXPECT_EQ(*ParseStatsWindow("--window", "1s"), 1);
}

TEST(ParseStatsWindowTest, RefusesOutsideOneSecondToADay) {
  for (const char* bad : {"", "0", "0s", "25h", "2d", "86401", "5x", "-5m", "m", "1.5h"}) {
    auto r = ParseStatsWindow("--window", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), StartsWith(std::string("--window '") + bad + "'"));
  }
}

v1::SiblingShare Share(int64_t run, int64_t same, int64_t idle, int64_t foreign,
                       int64_t unknown) {
  v1::SiblingShare s;
  s.set_run_ns(run);
  s.set_same_ns(same);
  s.set_idle_ns(idle);
  s.set_foreign_ns(foreign);
  s.set_unknown_ns(unknown);
  return s;
}

// Two VMs of a tenant: one with forced idle measured, one without.
v1::GetStatsResponse TenantStats() {
  v1::GetStatsResponse r;
  r.set_start_unix_ns(1800000000LL * 1000000000LL);
  r.set_end_unix_ns(r.start_unix_ns() + 300LL * 1000000000LL);
  r.set_windows(30);
  r.set_lost_events(4);
  v1::VMStats* a = r.add_vms();
  a->set_vm_id("vm-a");
  *a->mutable_share() = Share(2000000000, 1000000000, 900000000, 100000000, 0);
  a->mutable_share()->set_foreign_intervals(12);
  a->mutable_share()->set_longest_foreign_ns(15000);
  a->mutable_share()->set_forced_idle_ns(3000000);
  a->mutable_share()->set_forced_idle_known(true);
  v1::VMStats* b = r.add_vms();
  b->set_vm_id("vm-b");
  *b->mutable_share() = Share(1000000000, 0, 1000000000, 0, 0);
  *r.mutable_total() = Share(3000000000, 1000000000, 1900000000, 100000000, 0);
  r.mutable_total()->set_foreign_intervals(12);
  r.mutable_total()->set_longest_foreign_ns(15000);
  r.mutable_total()->set_forced_idle_ns(3000000);
  r.mutable_total()->set_forced_idle_known(true);
  return r;
}

class StatsCommandTest : public ::testing::Test {
 protected:
  CommandOptions Json() {
    CommandOptions options = options_;
    options.format = OutputFormat::kJson;
    return options;
  }

  testing::FakeServer server_;
  std::unique_ptr<Stub> stub_ = server_.NewStub();
  CommandOptions options_{.server = server_.address()};
  std::ostringstream out_, err_;
};

TEST_F(StatsCommandTest, TenantTableHasARowPerVmAndATotal) {
  server_.service().PutStats("tenant:acme", TenantStats());
  ASSERT_EQ(RunStats(*stub_, {.tenant = "acme", .window = "5m"}, options_, out_, err_),
            kExitOk)
      << err_.str();
  ASSERT_EQ(server_.service().stats_requests().size(), 1u);
  EXPECT_EQ(server_.service().stats_requests()[0].tenant(), "acme");
  EXPECT_EQ(server_.service().stats_requests()[0].window_seconds(), 300);
  const std::string text = out_.str();
  EXPECT_THAT(text, StartsWith("tenant acme: 30 windows from 2027-01-15T08:00:00Z to "
                               "2027-01-15T08:05:00Z (last 300 s asked), 4 lost events\n"));
  EXPECT_THAT(text, HasSubstr("VM     RUNTIME_MS  SAME%  IDLE%   FOREIGN%  UNKNOWN%  "
                              "FOREIGN_INTERVALS  LONGEST_FOREIGN_US  FORCED_IDLE_MS\n"));
  EXPECT_THAT(text, HasSubstr("vm-a   2000.000    50.00  45.00   5.00      0.00      12"
                              "                 15.0                3.000\n"));
  EXPECT_THAT(text, HasSubstr("vm-b   1000.000    0.00   100.00  0.00      0.00      0"
                              "                  0.0                 -\n"));
  EXPECT_THAT(text, HasSubstr("TOTAL  3000.000    33.33  63.33   3.33      0.00      12"));
  EXPECT_EQ(err_.str(), "");
}

TEST_F(StatsCommandTest, JsonUsesTheKeysOfAnalyzeAndForcedIdleOnlyWhenKnown) {
  server_.service().PutStats("group:acme/tenant", TenantStats());
  ASSERT_EQ(RunStats(*stub_, {.trust_group = "acme/tenant", .window = "1h"}, Json(), out_,
                     err_),
            kExitOk)
      << err_.str();
  json j = json::parse(out_.str());
  EXPECT_EQ(j["subject"], json({{"trust_group", "acme/tenant"}}));
  EXPECT_EQ(j["window_seconds"], 3600);
  EXPECT_EQ(j["windows"], 30);
  EXPECT_EQ(j["lost_events"], 4);
  ASSERT_EQ(j["vms"].size(), 2u);
  json a = j["vms"][0];
  EXPECT_EQ(a["vm"], "vm-a");
  EXPECT_EQ(a["runtime_ns"], 2000000000);
  EXPECT_EQ(a["same_pct"], 50.0);
  EXPECT_EQ(a["idle_pct"], 45.0);
  EXPECT_EQ(a["foreign_pct"], 5.0);
  EXPECT_EQ(a["unknown_pct"], 0.0);
  EXPECT_EQ(a["foreign_intervals"], 12);
  EXPECT_EQ(a["longest_foreign_ns"], 15000);
  EXPECT_EQ(a["forced_idle_ns"], 3000000);
  EXPECT_FALSE(j["vms"][1].contains("forced_idle_ns"));
  EXPECT_EQ(j["total"]["vm"], "total");
  EXPECT_EQ(j["total"]["same_pct"], 33.3333);
  EXPECT_FALSE(j.contains("cores"));
  EXPECT_EQ(j["partial"], false);
  EXPECT_FALSE(j.contains("missing_replicas"));
}

// A tenant's VMs gone from every host: a row of their own, counted in the
// total; `gone_vms` in JSON, absent when there are none.
TEST_F(StatsCommandTest, GoneVmsAreARowOfTheirOwnInTheTotal) {
  v1::GetStatsResponse r = TenantStats();
  *r.mutable_gone_vms() = Share(1000000000, 0, 0, 1000000000, 0);
  *r.mutable_total() = Share(4000000000, 1000000000, 1900000000, 1100000000, 0);
  server_.service().PutStats("tenant:acme", r);
  ASSERT_EQ(RunStats(*stub_, {.tenant = "acme", .window = "1h"}, options_, out_, err_),
            kExitOk)
      << err_.str();
  const std::string text = out_.str();
  EXPECT_THAT(text, HasSubstr("(gone VMs)  1000.000    0.00   0.00    100.00"));
  EXPECT_THAT(text, HasSubstr("TOTAL       4000.000    25.00  47.50   27.50"));
  EXPECT_LT(text.find("vm-b"), text.find("(gone VMs)"));
  EXPECT_LT(text.find("(gone VMs)"), text.find("TOTAL"));
  std::ostringstream json_out;
  ASSERT_EQ(RunStats(*stub_, {.tenant = "acme", .window = "1h"}, Json(), json_out, err_),
            kExitOk);
  json j = json::parse(json_out.str());
  EXPECT_EQ(j["gone_vms"]["vm"], "gone");
  EXPECT_EQ(j["gone_vms"]["runtime_ns"], 1000000000);
  EXPECT_EQ(j["gone_vms"]["foreign_pct"], 100.0);
  EXPECT_EQ(j["vms"].size(), 2u);

  server_.service().PutStats("tenant:globex", TenantStats());
  std::ostringstream none;
  ASSERT_EQ(RunStats(*stub_, {.tenant = "globex", .window = "1h"}, Json(), none, err_), kExitOk);
  EXPECT_FALSE(json::parse(none.str()).contains("gone_vms"));
}

// csd replicas on etcd: an answer missing some replicas' agents says which,
// in the text and in the JSON.
TEST_F(StatsCommandTest, APartialAnswerNamesTheMissingReplicas) {
  v1::GetStatsResponse partial = TenantStats();
  partial.set_partial(true);
  v1::StatsReplicaGap* gap = partial.add_missing_replicas();
  gap->set_replica("csd-b");
  gap->set_reason("DEADLINE_EXCEEDED: at 10.0.0.2:7443: no answer within 1s");
  server_.service().PutStats("tenant:acme", partial);
  ASSERT_EQ(RunStats(*stub_, {.tenant = "acme", .window = "5m"}, options_, out_, err_),
            kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("4 lost events\npartial: csd replica csd-b is missing: "
                                    "DEADLINE_EXCEEDED: at 10.0.0.2:7443: no answer within "
                                    "1s\n"));
  std::ostringstream json_out;
  ASSERT_EQ(RunStats(*stub_, {.tenant = "acme", .window = "5m"}, Json(), json_out, err_),
            kExitOk);
  json j = json::parse(json_out.str());
  EXPECT_EQ(j["partial"], true);
  EXPECT_EQ(j["missing_replicas"],
            json::parse(R"([{"replica": "csd-b", "reason": "DEADLINE_EXCEEDED: at )"
                        R"(10.0.0.2:7443: no answer within 1s"}])"));
}

TEST_F(StatsCommandTest, HostShowsItsCoresAndOneVmHasNoTotalRow) {
  v1::GetStatsResponse host = TenantStats();
  v1::CoreShare* c = host.add_cores();
  c->set_core(0);
  c->set_both_busy_ns(3);
  c->set_one_idle_ns(1);
  server_.service().PutStats("host:h1", host);
  ASSERT_EQ(RunStats(*stub_, {.host_id = "h1"}, options_, out_, err_), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("\ncores: both busy 75.0%, one idle 25.0%, both idle "
                                    "0.0%, unknown 0.0%\n"));
  EXPECT_THAT(out_.str(), HasSubstr("TOTAL"));
  out_.str("");
  ASSERT_EQ(RunStats(*stub_, {.host_id = "h1"}, Json(), out_, err_), kExitOk);
  json j = json::parse(out_.str());
  ASSERT_EQ(j["cores"].size(), 1u);
  EXPECT_EQ(j["cores"][0]["both_busy_ns"], 3);

  v1::GetStatsResponse one;
  one.set_windows(1);
  *one.add_vms() = TenantStats().vms(1);
  *one.mutable_total() = one.vms(0).share();
  server_.service().PutStats("vm:vm-b", one);
  out_.str("");
  ASSERT_EQ(RunStats(*stub_, {.vm_id = "vm-b"}, options_, out_, err_), kExitOk);
  EXPECT_THAT(out_.str(), StartsWith("vm vm-b: 1 window from "));
  EXPECT_THAT(out_.str(), HasSubstr("vm-b "));
  EXPECT_THAT(out_.str(), Not(HasSubstr("TOTAL")));
}

TEST_F(StatsCommandTest, BadSubjectOrWindowIsAUsageErrorWithoutAnRpc) {
  for (const StatsArgs& args :
       {StatsArgs{}, StatsArgs{.vm_id = "vm-1", .host_id = "h1"},
        StatsArgs{.tenant = "t", .trust_group = "g"}, StatsArgs{.vm_id = "bad vm"},
        StatsArgs{.host_id = "-h"}, StatsArgs{.vm_id = "vm-1", .window = "2d"}}) {
    std::ostringstream out, err;
    EXPECT_EQ(RunStats(*stub_, args, options_, out, err), kExitUsage);
    const std::string message = err.str();
    EXPECT_THAT(message, StartsWith("csctl: "));
    EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 1) << message;
    EXPECT_EQ(out.str(), "");
  }
  EXPECT_EQ(server_.service().calls(), 0);
}

TEST_F(StatsCommandTest, NothingReportedIsOneLineFromCsd) {
  EXPECT_EQ(RunStats(*stub_, {.vm_id = "vm-9", .window = "1h"}, options_, out_, err_),
            kExitRpcError);
  EXPECT_EQ(err_.str(), "csctl: no stats were reported for vm:vm-9 in the last 3600 s\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(StatsCommandTest, CommandLineParsesSubjectWindowAndOutput) {
  server_.service().PutStats("tenant:acme", TenantStats());
  CsctlEnvironment env;
  env.get_env = [](const std::string&) { return std::string(); };
  env.file_exists = [](const std::string&) { return false; };
  env.make_stub = [this](const ConnectionSettings&)
      -> absl::StatusOr<std::unique_ptr<Stub>> { return server_.NewStub(); };
  auto run = [&](std::vector<const char*> argv) {
    argv.insert(argv.begin(), "csctl");
    out_.str("");
    err_.str("");
    return RunCsctl(static_cast<int>(argv.size()), argv.data(), env, out_, err_);
  };
  ASSERT_EQ(run({"stats", "--tenant", "acme", "--window", "10m", "-o", "json"}), kExitOk)
      << err_.str();
  EXPECT_EQ(json::parse(out_.str())["window_seconds"], 600);
  EXPECT_EQ(run({"stats"}), kExitUsage);
  EXPECT_EQ(err_.str(), "csctl: stats takes exactly one of VM, --host, --tenant, --group\n");
  EXPECT_EQ(run({"stats", "vm-1", "--window", "0"}), kExitUsage);
  EXPECT_THAT(err_.str(), StartsWith("csctl: --window '0' must be a duration"));
}

}  // namespace
}  // namespace cosched::cli
