// The whole wire in one process: a mini cluster (a real csd with a durable
// store on an ephemeral loopback port, a cs-agent on a fake host and
// kernel), driven through csctl's command code.
#include <chrono>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/eventually.h"
#include "tests/testing/mini_cluster.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = testing::MiniCluster::Start();
    ASSERT_OK(cluster);
    cluster_ = std::move(*cluster);
    auto host = cluster_->AddHost();  // hv-1
    ASSERT_OK(host);
    host_ = *host;
    host_->AddVm("vm-123", 100);
    host_->AddVm("vm-456", 200);
    cli_options_.server = cluster_->csd_address();
    cli_options_.format = cli::OutputFormat::kJson;
  }

  agent::Agent& agent() { return host_->agent(); }
  host::FakeCoreSched& kernel() { return host_->kernel(); }

  // Runs a csctl command; returns its JSON output.
  template <typename Fn>
  nlohmann::json Csctl(Fn command, int want_exit = cli::kExitOk) {
    std::ostringstream out, err;
    int code = command(cluster_->control(), cli_options_, out, err);
    EXPECT_EQ(code, want_exit) << err.str();
    last_error_ = err.str();
    if (code != cli::kExitOk) return nullptr;
    return nlohmann::json::parse(out.str());
  }

  nlohmann::json Tag(const std::string& vm) {
    return Csctl([&](auto& stub, auto& opts, auto& out, auto& err) {
      return cli::RunTag(stub, cli::TagArgs{.vm_id = vm}, opts, out, err);
    });
  }

  std::unique_ptr<testing::MiniCluster> cluster_;
  testing::MiniHost* host_ = nullptr;
  cli::CommandOptions cli_options_;
  std::string last_error_;
};

TEST_F(EndToEndTest, TagReachesTheAgentAndUntagRemovesIt) {
  // The agent registers and reports its VMs.
  ASSERT_TRUE(Eventually([&] {
    auto hosts = Csctl([](auto& s, auto& o, auto& out, auto& err) {
      return cli::RunHostList(s, o, out, err);
    });
    return hosts.size() == 1 && hosts[0]["vm_count"] == 2;
  }));

  nlohmann::json tagged = Tag("vm-123");
  EXPECT_EQ(tagged["vm_id"], "vm-123");
  EXPECT_EQ(tagged["tenant_id"], "default");
  EXPECT_EQ(tagged["isolation"], "vm");
  EXPECT_EQ(tagged["trust_group"], "default/vm/vm-123");
  ASSERT_TRUE(tagged["revision"].is_number());
  int64_t revision = tagged["revision"];

  ASSERT_TRUE(agent().WaitForRevision(revision, 10s));
  auto assignment = agent().FindAssignment("vm-123");
  ASSERT_TRUE(assignment.has_value());
  EXPECT_EQ(assignment->trust_group(), "default/vm/vm-123");
  EXPECT_EQ(assignment->isolation(), v1::ISOLATION_LEVEL_VM);

  // csctl get shows where it runs and that the agent enforces it.
  nlohmann::json got;
  ASSERT_TRUE(Eventually([&] {
    got = Csctl([](auto& s, auto& o, auto& out, auto& err) {
      return cli::RunGet(s, "vm-123", o, out, err);
    });
    return got["enforcement"].is_object() &&
           got["enforcement"]["state"] == "enforced";
  })) << got.dump();
  EXPECT_EQ(got["host_id"], "hv-1");
  EXPECT_EQ(got["enforcement"]["threads_tagged"], 3);
  EXPECT_EQ(got["enforcement"]["applied_trust_group"], "default/vm/vm-123");
  auto listed = Csctl([](auto& s, auto& o, auto& out, auto& err) {
    return cli::RunList(s, cli::ListArgs{.host_id = "hv-1"}, o, out, err);
  });
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["enforcement"]["state"], "enforced");
  // In the (fake) kernel: one cookie for vm-123's threads, another for
  // vm-456 (not tagged yet, so failed closed to a cookie of its own).
  const uint64_t cookie = kernel().CookieOf(100);
  EXPECT_NE(cookie, 0u);
  EXPECT_EQ(kernel().CookieOf(101), cookie);
  EXPECT_EQ(kernel().CookieOf(102), cookie);
  EXPECT_NE(kernel().CookieOf(200), 0u);
  EXPECT_NE(kernel().CookieOf(200), cookie);

  ASSERT_EQ(Csctl([](auto& s, auto& o, auto& out, auto& err) {
              return cli::RunUntag(s, "vm-123", o, out, err);
            }).is_null(), false);
  ASSERT_TRUE(Eventually([&] { return !agent().FindAssignment("vm-123"); }));

  Csctl([](auto& s, auto& o, auto& out, auto& err) {
    return cli::RunGet(s, "vm-123", o, out, err);
  }, cli::kExitRpcError);
  EXPECT_NE(last_error_.find("vm 'vm-123' not found"), std::string::npos) << last_error_;
}

// Labels from each agent's config reach csd at Register; csctl hosts ls
// --selector lists the hosts they match, and refuses a bad selector before
// asking csd.
TEST_F(EndToEndTest, HostLabelsSelectHosts) {
  testing::MiniHostOptions zone_a;
  zone_a.host_id = "hv-a";
  zone_a.labels = {{"zone", "a"}, {"gen", "icx"}};
  testing::MiniHostOptions zone_b;
  zone_b.host_id = "hv-b";
  zone_b.labels = {{"zone", "b"}, {"gen", "icx"}};
  ASSERT_OK(cluster_->AddHost(zone_a));
  ASSERT_OK(cluster_->AddHost(zone_b));
  auto hosts_of = [&](const std::string& selector) {
    std::vector<std::string> ids;
    nlohmann::json hosts = Csctl([&](auto& s, auto& o, auto& out, auto& err) {
      return cli::RunHostList(s, o, out, err, selector);
    });
    for (const auto& h : hosts) ids.push_back(h["host_id"]);
    return ids;
  };
  ASSERT_TRUE(Eventually([&] { return hosts_of("").size() == 3; }));
  EXPECT_EQ(hosts_of("zone=a"), std::vector<std::string>{"hv-a"});
  EXPECT_EQ(hosts_of("gen=icx"), (std::vector<std::string>{"hv-a", "hv-b"}));
  EXPECT_EQ(hosts_of("gen=icx,zone=b"), std::vector<std::string>{"hv-b"});
  EXPECT_TRUE(hosts_of("zone=c").empty());
  nlohmann::json a = Csctl([](auto& s, auto& o, auto& out, auto& err) {
    return cli::RunHostGet(s, "hv-a", o, out, err);
  });
  EXPECT_EQ(a["labels"], (nlohmann::json{{"gen", "icx"}, {"zone", "a"}}));

  Csctl([](auto& s, auto& o, auto& out, auto& err) {
    return cli::RunHostList(s, o, out, err, "zone");
  }, cli::kExitUsage);
  EXPECT_NE(last_error_.find("--selector 'zone' must be key=value"), std::string::npos)
      << last_error_;
  // csd refuses one too, naming the field.
  v1::ListHostsRequest request;
  request.set_selector("zone=a,zone=b");
  v1::ListHostsResponse response;
  grpc::ClientContext context;
  grpc::Status status = cluster_->control().ListHosts(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "selector names zone twice");
}

TEST_F(EndToEndTest, TagBeforeAnyReportWaitsThenArrives) {
  // A VM tagged before it runs anywhere is sent as soon as an agent sees it.
  nlohmann::json tagged = Tag("vm-later");
  EXPECT_EQ(tagged["host_id"], "");
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(agent().FindAssignment("vm-later").has_value());
  host_->AddVm("vm-later", 300);
  ASSERT_TRUE(Eventually([&] { return agent().FindAssignment("vm-later").has_value(); }));
}

TEST_F(EndToEndTest, CsdRestartLosesNothingAndAgentResumes) {
  Tag("vm-123");
  int64_t revision = Tag("vm-456")["revision"];
  ASSERT_TRUE(Eventually([&] {
    return agent().FindAssignment("vm-123") && agent().FindAssignment("vm-456");
  }));
  ASSERT_TRUE(agent().WaitForRevision(revision, 10s));
  const int watches_before = agent().session()->watch_count();
  const int snapshots_before = agent().cache().snapshots_applied();

  cluster_->StopCsd();  // csd goes away; the agent keeps its assignments
  EXPECT_TRUE(agent().FindAssignment("vm-123").has_value());
  ASSERT_OK(cluster_->RestartCsd());  // same data dir, same address

  // Nothing acknowledged was lost.
  auto got = Csctl([](auto& s, auto& o, auto& out, auto& err) {
    return cli::RunGet(s, "vm-456", o, out, err);
  });
  EXPECT_EQ(got["trust_group"], "default/vm/vm-456");

  // The agent reconnects and resumes from its revision: a delta, not a
  // snapshot, and it keeps everything it had.
  ASSERT_TRUE(Eventually([&] {
    return agent().session()->watch_count() > watches_before;
  }, 15s));
  EXPECT_EQ(agent().cache().snapshots_applied(), snapshots_before);
  EXPECT_GE(agent().applied_revision(), revision);
  EXPECT_TRUE(agent().FindAssignment("vm-123").has_value());

  // New changes after the restart still arrive.
  Csctl([](auto& s, auto& o, auto& out, auto& err) {
    return cli::RunTag(s, cli::TagArgs{.vm_id = "vm-456", .isolation = "dedicated"},
                       o, out, err);
  });
  ASSERT_TRUE(Eventually([&] {
    auto a = agent().FindAssignment("vm-456");
    return a && a->dedicated_cores();
  }));
}

TEST_F(EndToEndTest, CsctlReportsBadIdAndMissingVm) {
  Csctl([](auto& s, auto& o, auto& out, auto& err) {
    return cli::RunTag(s, cli::TagArgs{.vm_id = "bad id!"}, o, out, err);
  }, cli::kExitUsage);
  EXPECT_NE(last_error_.find("must be 1-128 characters of [A-Za-z0-9._:-]"),
            std::string::npos) << last_error_;
  Csctl([](auto& s, auto& o, auto& out, auto& err) {
    return cli::RunGet(s, "vm-nope", o, out, err);
  }, cli::kExitRpcError);
  EXPECT_NE(last_error_.find("vm 'vm-nope' not found"), std::string::npos);
}

}  // namespace
}  // namespace cosched
