// The whole wire in one process: a real csd (durable store, ephemeral
// loopback port), a cs-agent with a fake host and kernel, driven through
// csctl's command code.
#include <chrono>
#include <sstream>
#include <thread>

#include "agent/agent.h"
#include "cli/commands.h"
#include "discovery/testing/static_vm_discovery.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "host/pseudo_fs.h"
#include "host/testing/core_sched_fake.h"
#include "host/testing/fake_host.h"
#include "host/testing/pseudo_fs_fake.h"
#include "nlohmann/json.hpp"
#include "server/csd_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<host::FakePseudoFs> TwoCoresTwoSiblings() {
  return host::MakeFakeHost({.interleaved = false});
}

// A VM of three threads (QEMU's main thread and two vCPUs) in `kernel`.
discovery::DiscoveredVm Vm(host::FakeCoreSched& kernel, const std::string& id,
                       int pid) {
  discovery::DiscoveredVm vm;
  vm.vm_id = id;
  vm.qemu_pid = pid;
  using Kind = discovery::DiscoveredThread::Kind;
  vm.threads = {{pid, pid, "qemu-system-x86", Kind::kEmulator},
                {pid + 1, pid, "CPU 0/KVM", Kind::kVcpu},
                {pid + 2, pid, "CPU 1/KVM", Kind::kVcpu}};
  for (const auto& t : vm.threads) kernel.AddTask(t.tid, pid);
  return vm;
}

// Polls `condition` for up to `timeout`.
template <typename Condition>
bool Eventually(Condition condition, std::chrono::milliseconds timeout = 10s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StartCsd("127.0.0.1:0");
    discovery_->SetVms({Vm(*kernel_, "vm-123", 100), Vm(*kernel_, "vm-456", 200)});
    agent::AgentOptions options;
    options.session.server_address = csd_->address();
    options.host_id = "hv-1";
    options.state_dir = dir_.Sub("agent-state");
    options.session.report_interval = 100ms;
    options.session.backoff_initial = 20ms;
    options.session.backoff_max = 200ms;
    options.host_fs = TwoCoresTwoSiblings();
    options.core_sched = kernel_;
    options.loop.rescan_interval = 100ms;
    options.vm_discovery = discovery_;
    agent_ = std::make_unique<agent::Agent>(options);
    ASSERT_OK(agent_->Start());
  }

  void StartCsd(const std::string& listen) {
    server::CsdOptions options;
    options.listen = listen;
    options.data_dir = dir_.Sub("csd-data");
    auto csd = server::CsdServer::Start(options);
    ASSERT_OK(csd);
    csd_ = std::move(*csd);
    stub_ = v1::ControlPlane::NewStub(
        grpc::CreateChannel(csd_->address(), grpc::InsecureChannelCredentials()));
    cli_options_.server = csd_->address();
    cli_options_.format = cli::OutputFormat::kJson;
  }

  // Runs a csctl command; returns its JSON output.
  template <typename Fn>
  nlohmann::json Csctl(Fn command, int want_exit = cli::kExitOk) {
    std::ostringstream out, err;
    int code = command(*stub_, cli_options_, out, err);
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

  cosched::testing::TempDir dir_;
  std::unique_ptr<server::CsdServer> csd_;
  std::unique_ptr<v1::ControlPlane::Stub> stub_;
  cli::CommandOptions cli_options_;
  std::shared_ptr<host::FakeCoreSched> kernel_ =
      std::make_shared<host::FakeCoreSched>();
  std::shared_ptr<discovery::StaticVmDiscovery> discovery_ =
      std::make_shared<discovery::StaticVmDiscovery>();
  std::unique_ptr<agent::Agent> agent_;
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

  ASSERT_TRUE(agent_->WaitForRevision(revision, 10s));
  auto assignment = agent_->FindAssignment("vm-123");
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
  const uint64_t cookie = kernel_->CookieOf(100);
  EXPECT_NE(cookie, 0u);
  EXPECT_EQ(kernel_->CookieOf(101), cookie);
  EXPECT_EQ(kernel_->CookieOf(102), cookie);
  EXPECT_NE(kernel_->CookieOf(200), 0u);
  EXPECT_NE(kernel_->CookieOf(200), cookie);

  ASSERT_EQ(Csctl([](auto& s, auto& o, auto& out, auto& err) {
              return cli::RunUntag(s, "vm-123", o, out, err);
            }).is_null(), false);
  ASSERT_TRUE(Eventually([&] { return !agent_->FindAssignment("vm-123"); }));

  Csctl([](auto& s, auto& o, auto& out, auto& err) {
    return cli::RunGet(s, "vm-123", o, out, err);
  }, cli::kExitRpcError);
  EXPECT_NE(last_error_.find("vm 'vm-123' not found"), std::string::npos) << last_error_;
}

TEST_F(EndToEndTest, TagBeforeAnyReportWaitsThenArrives) {
  // A VM tagged before it runs anywhere is sent as soon as an agent sees it.
  nlohmann::json tagged = Tag("vm-later");
  EXPECT_EQ(tagged["host_id"], "");
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(agent_->FindAssignment("vm-later").has_value());
  discovery_->SetVms({Vm(*kernel_, "vm-123", 100), Vm(*kernel_, "vm-456", 200),
                      Vm(*kernel_, "vm-later", 300)});
  ASSERT_TRUE(Eventually([&] { return agent_->FindAssignment("vm-later").has_value(); }));
}

TEST_F(EndToEndTest, CsdRestartLosesNothingAndAgentResumes) {
  Tag("vm-123");
  int64_t revision = Tag("vm-456")["revision"];
  ASSERT_TRUE(Eventually([&] {
    return agent_->FindAssignment("vm-123") && agent_->FindAssignment("vm-456");
  }));
  ASSERT_TRUE(agent_->WaitForRevision(revision, 10s));
  const int watches_before = agent_->session()->watch_count();
  const int snapshots_before = agent_->cache().snapshots_applied();
  const std::string address = csd_->address();

  csd_.reset();  // csd goes away; the agent keeps its assignments
  EXPECT_TRUE(agent_->FindAssignment("vm-123").has_value());
  StartCsd(address);  // same data dir, same address

  // Nothing acknowledged was lost.
  auto got = Csctl([](auto& s, auto& o, auto& out, auto& err) {
    return cli::RunGet(s, "vm-456", o, out, err);
  });
  EXPECT_EQ(got["trust_group"], "default/vm/vm-456");

  // The agent reconnects and resumes from its revision: a delta, not a
  // snapshot, and it keeps everything it had.
  ASSERT_TRUE(Eventually([&] {
    return agent_->session()->watch_count() > watches_before;
  }, 15s));
  EXPECT_EQ(agent_->cache().snapshots_applied(), snapshots_before);
  EXPECT_GE(agent_->applied_revision(), revision);
  EXPECT_TRUE(agent_->FindAssignment("vm-123").has_value());

  // New changes after the restart still arrive.
  Csctl([](auto& s, auto& o, auto& out, auto& err) {
    return cli::RunTag(s, cli::TagArgs{.vm_id = "vm-456", .isolation = "dedicated"},
                       o, out, err);
  });
  ASSERT_TRUE(Eventually([&] {
    auto a = agent_->FindAssignment("vm-456");
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
