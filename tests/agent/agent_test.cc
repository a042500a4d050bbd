#include "agent/agent.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "common/version.h"
#include "discovery/testing/static_vm_discovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/state_fs.h"
#include "host/testing/core_sched_fake.h"
#include "host/testing/fake_host.h"
#include "host/testing/pseudo_fs_fake.h"
#include "host/testing/sched_trace_fake.h"
#include "host/testing/state_fs_fake.h"
#include "tests/agent/agent_fixture.h"
#include "tests/agent/fake_csd.h"
#include "tests/telemetry/trace_fixtures.h"
#include "tests/testing/metrics_scrape.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace cosched::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Key;
using testing::FakeCsd;
using testing::MakeAssignment;
using testing::MakeDelta;
using testing::MakeSnapshot;
using cosched::testing::TempDir;
using namespace std::chrono_literals;

using agent_testing::AgentTest;
using agent_testing::TaggedVm;
using agent_testing::TwoByTwoHost;

TEST_F(AgentTest, RegistersHostAndKeepsAssignmentsAcrossRestart) {
  kernel_->SetMode(host::FakeCoreSched::Mode::kNoSmt);
  discovery::DiscoveredVm vm;
  vm.vm_id = "vm-1";
  discovery_->SetVms({vm});
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  csd.service().Push(MakeSnapshot(4, {MakeAssignment("vm-1", "g1", 4)}));

  std::atomic<int64_t> notified{0};
  {
    AgentOptions options = Options(csd.address());
    options.on_assignments_changed = [&](int64_t revision) { notified = revision; };
    Agent agent(std::move(options));
    ASSERT_OK(agent.Start());
    EXPECT_EQ(agent.probe().support, v1::CORE_SCHED_SUPPORT_NO_SMT);
    EXPECT_EQ(agent.topology().cores_size(), 2);
    EXPECT_TRUE(agent.capabilities().smt_active());
    EXPECT_TRUE(agent.capabilities().schedstats_enabled());
    ASSERT_TRUE(agent.WaitForRevision(4, 10s));
    // The listener runs right after the cache is updated.
    for (int i = 0; i < 1000 && notified < 4; ++i) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(notified, 4);
    EXPECT_THAT(agent.assignments(), ElementsAre(Key("vm-1")));

    v1::RegisterRequest registered = csd.service().registers().at(0);
    EXPECT_EQ(registered.host_id(), "host-a");
    EXPECT_EQ(registered.agent_version(), CoschedVersion());
    EXPECT_EQ(registered.capabilities().core_sched(),
              v1::CORE_SCHED_SUPPORT_NO_SMT);
    EXPECT_THAT(registered.capabilities().core_sched_detail(),
                HasSubstr("no SMT on this host"));
    ASSERT_EQ(registered.topology().cores_size(), 2);
    EXPECT_THAT(registered.topology().cores(1).cpus(), ElementsAre(1, 3));

    csd.service().Push(MakeDelta(6, {MakeAssignment("vm-2", "g2", 6)}, {}));
    ASSERT_TRUE(agent.WaitForRevision(6, 10s));
    ASSERT_TRUE(csd.service().WaitFor([&] {
      const auto& reports = csd.service().reports_locked();
      return !reports.empty() && reports.back().applied_revision() == 6;
    }));
    agent.Stop();
    // The agent makes no kernel writes yet.
    EXPECT_EQ(kernel_->write_calls(), 0);
  }

  // A new agent on the same state dir starts from what it kept and resumes.
  Agent agent(Options(csd.address()));
  ASSERT_OK(agent.Start());
  EXPECT_EQ(agent.applied_revision(), 6);
  EXPECT_TRUE(agent.FindAssignment("vm-2").has_value());
  const size_t watches = csd.service().watches().size();
  ASSERT_TRUE(csd.service().WaitFor(
      [&] { return csd.service().watches_locked().size() > watches; }));
  EXPECT_EQ(csd.service().watches().back().resume_revision(), 6);
}

TEST_F(AgentTest, StartsWithoutCsdAndConnectsLater) {
  FakeCsd probe_port;  // find a free port, then free it
  ASSERT_TRUE(probe_port.ok());
  const int port = probe_port.port();
  probe_port.Shutdown();

  Agent agent(Options("127.0.0.1:" + std::to_string(port)));
  ASSERT_OK(agent.Start());
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(agent.session()->registered());

  FakeCsd csd(port);
  ASSERT_TRUE(csd.ok());
  csd.service().Push(MakeSnapshot(2, {MakeAssignment("vm-1", "g1", 2)}));
  EXPECT_TRUE(agent.WaitForRevision(2, 10s));
}

// A VM as the kernel holds it after an agent restart: QEMU (pid 100) and
// its vCPU in `cookie`, and a helper process (virtiofsd, pid 150) that an
// assignment of full thread scope put in it too.
double StateUnusable(Agent& agent, const std::string& reason) {
  return cosched::testing::SampleValue(cosched::testing::ScrapeText(agent.metrics().collectables()),
                                       "cosched_agent_state_unusable_total", {{"reason", reason}})
      .value_or(-1);
}

// The agent after a start without its kept state: running, holding
// nothing, every VM fail-closed on the cookie it already had, which no
// thread lost on the way.
void ExpectFailedClosedOnKeptCookies(Agent& agent, const host::FakeCoreSched& kernel,
                                     uint64_t cookie) {
  EXPECT_TRUE(agent.assignments().empty());
  EXPECT_EQ(agent.applied_revision(), 0);
  ASSERT_TRUE(agent.reconcile_loop()->WaitForPasses(1, 10s));
  std::optional<ReconcileResult> result = agent.reconcile_loop()->last_result();
  ASSERT_TRUE(result.has_value());
  ASSERT_EQ(result->vms.size(), 1u);
  EXPECT_EQ(result->vms[0].enforcement.state(), v1::ENFORCEMENT_STATE_FAIL_CLOSED);
  EXPECT_EQ(result->vms[0].cookie, cookie);
  for (int tid : {100, 101, 150}) EXPECT_EQ(kernel.CookieOf(tid), cookie) << tid;
  EXPECT_EQ(kernel.cookies_cleared(), 0);
  EXPECT_EQ(kernel.write_calls(), 0);
}

TEST_F(AgentTest, CorruptStateFileIsMovedAsideAndVmsStayFailClosed) {
  discovery_->SetVms({TaggedVm(*kernel_, 77)});
  const std::string state = dir_.path() + "/state";
  std::filesystem::create_directories(state);
  { std::ofstream(state + "/assignments.pb") << "not a state file"; }
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  Agent agent(Options(csd.address()));
  ASSERT_OK(agent.Start());
  EXPECT_EQ(StateUnusable(agent, "corrupt"), 1);
  EXPECT_EQ(StateUnusable(agent, "unreadable"), 0);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(state)) {
    names.push_back(entry.path().filename());
  }
  ASSERT_EQ(names.size(), 1u);
  EXPECT_THAT(names[0], ::testing::StartsWith("assignments.pb.corrupt-"));
  { std::ifstream kept(state + "/" + names[0]);
    std::string content((std::istreambuf_iterator<char>(kept)), {});
    EXPECT_EQ(content, "not a state file"); }
  ExpectFailedClosedOnKeptCookies(agent, *kernel_, 77);

  // csd's state then takes over, and is kept again.
  csd.service().Push(MakeSnapshot(5, {MakeAssignment("vm-1", "g1", 5)}));
  ASSERT_TRUE(agent.WaitForRevision(5, 10s));
  EXPECT_EQ(csd.service().watches().at(0).resume_revision(), 0);
  agent.Stop();
  AssignmentCache kept(state + "/assignments.pb");
  ASSERT_OK(kept.Load());
  EXPECT_EQ(kept.revision(), 5);
}

TEST_F(AgentTest, UnreadableStateFileIsMovedAside) {
  discovery_->SetVms({TaggedVm(*kernel_, 77)});
  auto fs = std::make_shared<host::FakeStateFs>();
  const std::string file = dir_.path() + "/state/assignments.pb";
  fs->SetFile(file, AssignmentCache::Encode(3, {{"vm-1", MakeAssignment("vm-1", "g1", 3)}}));
  fs->FailReads(file, absl::UnavailableError("cannot read: Input/output error"));
  AgentOptions options = Options("127.0.0.1:1");
  options.state_fs = fs;
  Agent agent(std::move(options));
  ASSERT_OK(agent.Start());
  EXPECT_EQ(StateUnusable(agent, "unreadable"), 1);
  ASSERT_EQ(fs->files().size(), 1u);
  EXPECT_THAT(fs->files().begin()->first, ::testing::StartsWith(file + ".unreadable-"));
  ExpectFailedClosedOnKeptCookies(agent, *kernel_, 77);
}

TEST_F(AgentTest, StateFileThatCannotBeMovedAsideIsLeftAndTheAgentStarts) {
  discovery_->SetVms({TaggedVm(*kernel_, 77)});
  auto fs = std::make_shared<host::FakeStateFs>();
  const std::string file = dir_.path() + "/state/assignments.pb";
  fs->SetFile(file, "not a state file");
  fs->FailRenames(dir_.path(), absl::PermissionDeniedError("cannot rename: Read-only file system"));
  AgentOptions options = Options("127.0.0.1:1");
  options.state_fs = fs;
  Agent agent(std::move(options));
  ASSERT_OK(agent.Start());
  EXPECT_EQ(StateUnusable(agent, "corrupt"), 1);
  EXPECT_THAT(fs->files(), ElementsAre(Key(file)));
  ExpectFailedClosedOnKeptCookies(agent, *kernel_, 77);
}

TEST_F(AgentTest, UnusableStateDirStartsWithNoAssignments) {
  // A good state file the agent cannot get at (the dir is unreadable, or a
  // file stands where the dir should be): nothing is loaded, and the agent
  // runs from memory.
  discovery_->SetVms({TaggedVm(*kernel_, 77)});
  auto fs = std::make_shared<host::FakeStateFs>();
  const std::string file = dir_.path() + "/state/assignments.pb";
  fs->SetFile(file, AssignmentCache::Encode(3, {{"vm-1", MakeAssignment("vm-1", "g1", 3)}}));
  fs->FailDirectories(absl::PermissionDeniedError("cannot stat state: Permission denied"));
  AgentOptions options = Options("127.0.0.1:1");
  options.state_fs = fs;
  Agent agent(std::move(options));
  ASSERT_OK(agent.Start());
  EXPECT_EQ(StateUnusable(agent, "state_dir"), 1);
  EXPECT_EQ(StateUnusable(agent, "corrupt"), 0);
  EXPECT_THAT(fs->files(), ElementsAre(Key(file)));
  ExpectFailedClosedOnKeptCookies(agent, *kernel_, 77);
}

TEST_F(AgentTest, UnusableStateDirOnDiskDoesNotStopStart) {
  // The real filesystem: a file where the state dir should be.
  { std::ofstream(dir_.path() + "/state") << "x"; }
  Agent agent(Options("127.0.0.1:1"));
  ASSERT_OK(agent.Start());
  EXPECT_EQ(StateUnusable(agent, "state_dir"), 1);
  EXPECT_TRUE(agent.assignments().empty());
}

TEST_F(AgentTest, ReportsEachVmsRunState) {
  // What discovery says of each VM reaches csd: a destination's incoming
  // copy, a paused one, and a QEMU found through /proc (running).
  discovery::DiscoveredVm incoming, paused, procfs;
  incoming.vm_id = "vm-in";
  incoming.qemu_pid = 100;
  incoming.run_state = v1::VM_RUN_STATE_MIGRATING_IN;
  paused.vm_id = "vm-paused";
  paused.qemu_pid = 200;
  paused.run_state = v1::VM_RUN_STATE_PAUSED;
  procfs.vm_id = "vm-proc";
  procfs.qemu_pid = 300;
  discovery_->SetVms({incoming, paused, procfs});
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  Agent agent(Options(csd.address()));
  ASSERT_OK(agent.Start());
  std::map<std::string, v1::VMRunState> reported;
  ASSERT_TRUE(csd.service().WaitFor([&] {
    const auto& reports = csd.service().reports_locked();
    if (reports.empty() || reports.back().vms_size() < 3) return false;
    for (const v1::VMObservation& o : reports.back().vms()) reported[o.vm_id()] = o.run_state();
    return true;
  }));
  EXPECT_EQ(reported["vm-in"], v1::VM_RUN_STATE_MIGRATING_IN);
  EXPECT_EQ(reported["vm-paused"], v1::VM_RUN_STATE_PAUSED);
  EXPECT_EQ(reported["vm-proc"], v1::VM_RUN_STATE_RUNNING);

  // The incoming copy starts running: the next Report says so.
  incoming.run_state = v1::VM_RUN_STATE_RUNNING;
  discovery_->SetVms({incoming, paused, procfs});
  agent.TriggerReconcile();
  EXPECT_TRUE(csd.service().WaitFor([&] {
    for (const v1::VMObservation& o : csd.service().reports_locked().back().vms()) {
      if (o.vm_id() == "vm-in") return o.run_state() == v1::VM_RUN_STATE_RUNNING;
    }
    return false;
  }));
}

TEST_F(AgentTest, BadHostIdAndMissingTopologyAreNamed) {
  AgentOptions options = Options("127.0.0.1:1");
  options.host_id = "bad id!";
  EXPECT_EQ(Agent(options).Start().code(), absl::StatusCode::kInvalidArgument);

  host_fs_->Remove("/sys/devices/system/cpu/online");
  absl::Status status = Agent(Options("127.0.0.1:1")).Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("describe host"));
  EXPECT_THAT(status.message(), HasSubstr("/sys/devices/system/cpu/online"));
}

host::SchedTraceFormat FourCpuTraceFormat() {
  host::SchedTraceFormat format;
  format.sched_switch_format = std::string(telemetry::testing::kSchedSwitchFormat);
  format.header_page = std::string(telemetry::testing::kHeaderPage);
  format.num_cpus = 4;
  return format;
}

// Tagging does not depend on telemetry: a trace that cannot start is said
// in the capabilities, and the agent runs on.
TEST_F(AgentTest, TelemetryThatCannotStartIsReportedAndTaggingGoesOn) {
  auto trace = std::make_shared<host::FakeSchedTrace>(FourCpuTraceFormat());
  trace->SetStartError(absl::PermissionDeniedError(
      "cannot create trace instance /sys/kernel/tracing/instances/cs-agent: Permission denied"));
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  csd.service().Push(MakeSnapshot(1, {}));
  AgentOptions options = Options(csd.address());
  options.telemetry = true;
  options.sched_trace = trace;
  Agent agent(std::move(options));
  ASSERT_OK(agent.Start());
  EXPECT_FALSE(agent.capabilities().telemetry_active());
  EXPECT_THAT(agent.capabilities().telemetry_detail(), HasSubstr("Permission denied"));
  ASSERT_TRUE(agent.WaitForRevision(1, 10s));
  EXPECT_FALSE(csd.service().registers().at(0).capabilities().telemetry_active());
  EXPECT_FALSE(agent.latest_stats().has_value());
  agent.Stop();
}

// Windows of the VMs the agent found reach csd in its reports, and the
// newest is readable from the agent.
TEST_F(AgentTest, TelemetryWindowsOfItsVmsReachCsd) {
  discovery::DiscoveredVm vm;
  vm.vm_id = "vm-1";
  vm.qemu_pid = 100;
  vm.threads.push_back({100, 100, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator});
  vm.threads.push_back({101, 100, "CPU 0/KVM", discovery::DiscoveredThread::Kind::kVcpu});
  discovery_->SetVms({vm});
  kernel_->AddTask(100, 100);
  kernel_->AddTask(101, 100);
  auto trace = std::make_shared<host::FakeSchedTrace>(FourCpuTraceFormat());
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  csd.service().Push(MakeSnapshot(1, {MakeAssignment("vm-1", "g1", 1)}));
  AgentOptions options = Options(csd.address());
  options.telemetry = true;
  options.sched_trace = trace;
  options.collector.poll_interval = 5ms;
  Agent agent(std::move(options));
  ASSERT_OK(agent.Start());
  EXPECT_TRUE(agent.capabilities().telemetry_active());
  EXPECT_TRUE(trace->started());

  const auto layout = *telemetry::SchedSwitchLayout::FromFormat(
      telemetry::testing::kSchedSwitchFormat);
  // The vCPU runs 1 ms of every 10 on CPU 0, its sibling CPU 2 idle, until
  // a report carries it (the collector learns the VM's threads within a
  // second of the first reconcile pass).
  int64_t now = 1'000'000'000;
  auto has_vm = [](const v1::ReportRequest& report) {
    for (const v1::StatsWindow& w : report.stats())
      for (const v1::VMStats& s : w.vms())
        if (s.vm_id() == "vm-1" && s.share().run_ns() > 0) return true;
    return false;
  };
  bool seen = false;
  for (int i = 0; i < 1000 && !seen; ++i) {
    std::vector<telemetry::SchedSwitch> events = {{now, 0, 0, 101, 0},
                                                  {now + 1'000'000, 0, 101, 0, 0}};
    for (auto& page : telemetry::testing::BuildPages(layout, events)) trace->AddPage(0, page);
    if (i == 0) trace->AddPage(2, telemetry::testing::BuildPages(layout, {{now, 2, 0, 0, 0}})[0]);
    now += 10'000'000;
    trace->SetNowNs(now);
    std::this_thread::sleep_for(10ms);
    for (const v1::ReportRequest& report : csd.service().reports()) seen = seen || has_vm(report);
  }
  ASSERT_TRUE(seen);
  std::optional<v1::StatsWindow> latest = agent.latest_stats();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->cores_size(), 2);
  agent.Stop();
  EXPECT_TRUE(trace->stopped());
}

}  // namespace
}  // namespace cosched::agent
