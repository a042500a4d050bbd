// A staged rollout end to end (issue #17, part 4): 20 agents on fake
// hosts, a rollout of 10%, 50% and 100% with short soaks. One host of the
// second stage stops reporting: the rollout halts naming it, the third
// stage never comes, and no host outside the second stage makes a cookie
// (its agent says not-enabled and its fake kernel sees no write).
#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/state/rollout_view.h"
#include "tests/testing/eventually.h"
#include "tests/testing/mini_cluster.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::Eventually;

constexpr int kHosts = 20;
// Long enough that the halt (no report for kNoReportHalt, seen within a
// check interval of 1 s) comes well before stage 2 would end; short enough
// that the test takes seconds.
constexpr int kSoakSeconds = 8;
constexpr int kNoReportHaltSeconds = 2;

std::string HostId(int i) { return absl::StrFormat("hv-%02d", i); }

class RolloutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::MiniClusterOptions options;
    options.csd.rollout.check_interval = 1s;
    options.csd.rollout.no_report_halt = std::chrono::seconds(kNoReportHaltSeconds);
    options.csd.rollout.min_soak_s = 1;
    auto cluster = testing::MiniCluster::Start(std::move(options));
    ASSERT_OK(cluster);
    cluster_ = std::move(*cluster);
  }

  v1::Rollout Rollout() {
    v1::Rollout rollout;
    grpc::ClientContext context;
    EXPECT_OK(cluster_->control().GetRollout(&context, v1::GetRolloutRequest(), &rollout));
    return rollout;
  }

  int RegisteredHosts() {
    v1::ListHostsRequest request;
    request.set_page_size(100);
    v1::ListHostsResponse response;
    grpc::ClientContext context;
    if (!cluster_->control().ListHosts(&context, request, &response).ok()) return -1;
    return response.hosts_size();
  }

  // The hosts whose records say rollout `id` enabled them.
  std::set<std::string> EnabledBy(const std::string& id) {
    v1::ListHostsRequest request;
    request.set_page_size(100);
    v1::ListHostsResponse response;
    grpc::ClientContext context;
    EXPECT_OK(cluster_->control().ListHosts(&context, request, &response));
    std::set<std::string> hosts;
    for (const v1::Host& h : response.hosts()) {
      if (h.enabled_by_rollout() == id) hosts.insert(h.host_id());
    }
    return hosts;
  }

  v1::Host GetHost(const std::string& id) {
    v1::GetHostRequest request;
    request.set_host_id(id);
    v1::Host host;
    grpc::ClientContext context;
    EXPECT_OK(cluster_->control().GetHost(&context, request, &host));
    return host;
  }

  v1::VM GetVm(const std::string& id) {
    v1::GetVMRequest request;
    request.set_vm_id(id);
    v1::VM vm;
    grpc::ClientContext context;
    EXPECT_OK(cluster_->control().GetVM(&context, request, &vm));
    return vm;
  }

  std::unique_ptr<testing::MiniCluster> cluster_;
};

TEST_F(RolloutTest, AHostOfStageTwoThatStopsReportingHaltsItBeforeStageThree) {
  cli::CommandOptions cli_options;
  cli_options.server = cluster_->csd_address();
  {
    // Enforcement is turned on in stages: the hosts wait for the rollout.
    cli::RolloutNewHostsArgs args;
    args.value = "wait-for-rollout";
    args.reason = "staged turn-on";
    std::ostringstream out, err;
    ASSERT_EQ(cli::RunRolloutNewHosts(cluster_->control(), args, cli_options, out, err),
              cli::kExitOk)
        << err.str();
    EXPECT_THAT(out.str(), HasSubstr("new hosts: wait-for-rollout"));
  }
  std::vector<std::string> ids;
  for (int i = 0; i < kHosts; ++i) {
    testing::MiniHostOptions options;
    options.host_id = HostId(i);
    options.labels = {{"zone", "a"}};
    ASSERT_OK(cluster_->AddHost(options).status());
    ids.push_back(options.host_id);
  }
  ASSERT_TRUE(Eventually([&] { return RegisteredHosts() == kHosts; }));

  // Which hosts each stage enables: csd's own rule over the same ids.
  const std::vector<std::string> stage1 = server::StageHosts(ids, 10);
  const std::vector<std::string> stage2 = server::StageHosts(ids, 50);
  ASSERT_EQ(stage1.size(), 2u);
  ASSERT_EQ(stage2.size(), 10u);
  std::string silent;
  for (const std::string& h : stage2) {
    if (std::count(stage1.begin(), stage1.end(), h) == 0) {
      silent = h;
      break;
    }
  }
  ASSERT_FALSE(silent.empty());
  const std::set<std::string> in_stage2(stage2.begin(), stage2.end());

  {
    cli::RolloutStartArgs args;
    args.stages = "10%,50%,100%";
    args.soak = absl::StrCat(kSoakSeconds, "s");
    args.selector = "zone=a";
    std::ostringstream out, err;
    ASSERT_EQ(cli::RunRolloutStart(cluster_->control(), args, cli_options, out, err),
              cli::kExitOk)
        << err.str();
    EXPECT_THAT(out.str(), HasSubstr("stage 1 enabled 2 host(s)"));
  }
  const auto start = std::chrono::steady_clock::now();
  const v1::Rollout started = Rollout();
  ASSERT_EQ(started.state(), v1::Rollout::STATE_RUNNING);
  ASSERT_EQ(started.enabled_count(), 2);
  EXPECT_EQ(EnabledBy(started.rollout_id()),
            std::set<std::string>(stage1.begin(), stage1.end()));

  // Every agent hears what csd says of its host within a report or two;
  // only then do VMs start, so that what the kernels see from here on is
  // the rollout's doing alone.
  auto in = [](const std::vector<std::string>& set, const std::string& h) {
    return std::count(set.begin(), set.end(), h) > 0;
  };
  ASSERT_TRUE(Eventually([&] {
    for (const std::string& h : ids) {
      const auto want = in(stage1, h) ? v1::HostEnablement::STATE_ENFORCE
                                      : v1::HostEnablement::STATE_NOT_ENABLED;
      if (cluster_->host(h).agent().enablement().state() != want) return false;
    }
    return true;
  }, 5s));
  for (int i = 0; i < kHosts; ++i) {
    testing::MiniHost& host = cluster_->host(ids[i]);
    host.kernel().ResetCallCounts();
    host.AddVm(absl::StrCat("vm-", i), 100);
    v1::TagVMRequest request;
    request.set_vm_id(absl::StrCat("vm-", i));
    request.set_tenant_id("acme");
    request.set_isolation(v1::ISOLATION_LEVEL_VM);
    v1::TagVMResponse response;
    grpc::ClientContext context;
    ASSERT_OK(cluster_->control().TagVM(&context, request, &response));
  }
  for (const std::string& h : stage1) {
    const int i = std::stoi(h.substr(3));
    EXPECT_TRUE(Eventually([&] { return cluster_->host(h).VmCookie(100) != 0; }, 5s)) << h;
    EXPECT_TRUE(Eventually([&] {
      return GetVm(absl::StrCat("vm-", i)).enforcement().state() ==
             v1::ENFORCEMENT_STATE_ENFORCED;
    }, 5s)) << h;
  }

  // Stage 2 comes after the soak; then one of its new hosts goes silent.
  ASSERT_TRUE(Eventually([&] { return Rollout().stage() == 1; }, 20s));
  const v1::Rollout second = Rollout();
  EXPECT_EQ(second.state(), v1::Rollout::STATE_RUNNING);
  // The stage's hosts are marked in commits after the record's.
  EXPECT_TRUE(Eventually([&] { return EnabledBy(second.rollout_id()) == in_stage2; }, 5s));
  // Counted from csd's view of the hosts, which each commit's completion
  // updates just after the commit is readable.
  EXPECT_TRUE(Eventually([&] {
    return Rollout().enabled_count() == static_cast<int>(in_stage2.size());
  }, 5s)) << Rollout().enabled_count();
  cluster_->host(silent).Stop();

  ASSERT_TRUE(Eventually([&] { return Rollout().state() == v1::Rollout::STATE_HALTED; }, 10s))
      << Rollout().DebugString();
  const v1::Rollout halted = Rollout();
  EXPECT_EQ(halted.halted_host(), silent);
  EXPECT_THAT(halted.halt_reason(), HasSubstr(absl::StrCat("host ", silent, " stopped reporting")));
  EXPECT_EQ(halted.stage(), 1);
  const auto halted_after = std::chrono::steady_clock::now() - start;
  EXPECT_LT(halted_after, std::chrono::seconds(2 * kSoakSeconds))
      << "halted only after stage 2 would have soaked";

  // Past the time stage 3 would have begun, nothing more is enabled.
  std::this_thread::sleep_for(std::chrono::seconds(kSoakSeconds));
  const v1::Rollout later = Rollout();
  EXPECT_EQ(later.state(), v1::Rollout::STATE_HALTED);
  EXPECT_EQ(later.stage(), 1);
  EXPECT_EQ(EnabledBy(later.rollout_id()), in_stage2);

  for (int i = 0; i < kHosts; ++i) {
    const std::string& h = ids[i];
    if (h == silent) continue;
    testing::MiniHost& host = cluster_->host(h);
    if (in_stage2.count(h) != 0) {
      EXPECT_TRUE(Eventually([&] { return host.VmCookie(100) != 0; }, 5s)) << h;
      EXPECT_EQ(GetHost(h).enablement().state(), v1::HostEnablement::STATE_ENFORCE) << h;
      continue;
    }
    // A host of stage 3: not enabled, and it never made a cookie.
    EXPECT_EQ(GetHost(h).enablement().state(), v1::HostEnablement::STATE_NOT_ENABLED) << h;
    EXPECT_EQ(host.agent().enablement().state(), v1::HostEnablement::STATE_NOT_ENABLED) << h;
    EXPECT_EQ(host.kernel().write_calls(), 0) << h;
    EXPECT_EQ(host.VmCookie(100), 0u) << h;
    EXPECT_TRUE(Eventually([&] {
      return GetVm(absl::StrCat("vm-", i)).enforcement().state() ==
             v1::ENFORCEMENT_STATE_NOT_ENABLED;
    }, 5s)) << h;
  }

  // What an operator sees.
  std::ostringstream out, err;
  ASSERT_EQ(cli::RunRolloutStatus(cluster_->control(), cli_options, out, err), cli::kExitOk)
      << err.str();
  EXPECT_THAT(out.str(), HasSubstr("halted"));
  EXPECT_THAT(out.str(), HasSubstr(absl::StrCat("host ", silent, " stopped reporting")));
  EXPECT_THAT(out.str(), HasSubstr("2 of 3 (50%)"));
  std::ostringstream hosts, hosts_err;
  ASSERT_EQ(cli::RunHostList(cluster_->control(), cli_options, hosts, hosts_err), cli::kExitOk);
  EXPECT_THAT(hosts.str(), HasSubstr("not-enabled"));
}

// The rollout is durable: a csd restarted mid-rollout goes on with it, and
// its agents keep hearing not-enabled where it had not enabled them.
TEST_F(RolloutTest, ARestartedCsdKeepsTheRolloutAndWhatItEnabled) {
  {
    v1::SetNewHostsRequest wait;
    wait.set_new_hosts(v1::NEW_HOSTS_WAIT_FOR_ROLLOUT);
    v1::Rollout record;
    grpc::ClientContext context;
    ASSERT_OK(cluster_->control().SetNewHosts(&context, wait, &record));
  }
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    testing::MiniHostOptions options;
    options.host_id = HostId(i);
    ASSERT_OK(cluster_->AddHost(options).status());
    ids.push_back(options.host_id);
  }
  ASSERT_TRUE(Eventually([&] { return RegisteredHosts() == 4; }));
  v1::StartRolloutRequest request;
  request.add_stage_percents(25);
  request.add_stage_percents(100);
  request.set_soak_seconds(3600);
  v1::Rollout started;
  {
    grpc::ClientContext context;
    ASSERT_OK(cluster_->control().StartRollout(&context, request, &started));
  }
  ASSERT_EQ(started.enabled_count(), 1);
  const std::set<std::string> by_it = EnabledBy(started.rollout_id());
  ASSERT_EQ(by_it.size(), 1u);
  const std::string enabled = *by_it.begin();

  cluster_->StopCsd();
  ASSERT_OK(cluster_->RestartCsd());
  const v1::Rollout after = Rollout();
  EXPECT_EQ(after.rollout_id(), started.rollout_id());
  EXPECT_EQ(after.state(), v1::Rollout::STATE_RUNNING);
  EXPECT_EQ(after.stage(), 0);
  EXPECT_EQ(after.stage_started_time().seconds(), started.stage_started_time().seconds());
  EXPECT_EQ(after.new_hosts(), v1::NEW_HOSTS_WAIT_FOR_ROLLOUT);
  for (const std::string& h : ids) {
    const auto want = h == enabled ? v1::HostEnablement::STATE_ENFORCE
                                   : v1::HostEnablement::STATE_NOT_ENABLED;
    EXPECT_TRUE(Eventually([&] { return GetHost(h).enablement().state() == want; }, 5s)) << h;
    EXPECT_TRUE(Eventually([&] {
      return cluster_->host(h).agent().enablement().state() == want;
    }, 5s)) << h;
  }
}

}  // namespace
}  // namespace cosched
