#include "agent/server_session.h"
#include "discovery/vm_discovery.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include "agent/backoff.h"
#include "discovery/testing/static_vm_discovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/fake_csd.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace cosched::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::Key;
using testing::FakeAgentService;
using testing::FakeCsd;
using testing::MakeAssignment;
using testing::MakeDelta;
using testing::MakeSnapshot;
using cosched::testing::TempDir;
using namespace std::chrono_literals;

discovery::DiscoveredVm Vm(const std::string& id, const std::string& uuid, int pid) {
  discovery::DiscoveredVm vm;
  vm.vm_id = id;
  vm.uuid = uuid;
  vm.qemu_pid = pid;
  vm.threads.push_back({pid, pid, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator});
  vm.threads.push_back({pid + 1, pid, "CPU 0/KVM", discovery::DiscoveredThread::Kind::kVcpu});
  return vm;
}

class ServerSessionTest : public ::testing::Test {
 protected:
  ServerSessionTest() : cache_(dir_.path() + "/assignments.pb") {}

  std::unique_ptr<ServerSession> MakeSession(
      const std::string& address, StatsWindowQueue* stats = nullptr,
      std::chrono::milliseconds report_interval = 100ms,
      std::chrono::milliseconds min_report_gap = 10ms,
      std::function<std::vector<v1::ImpostorProcess>()> impostors = nullptr) {
    ServerSessionOptions options;
    options.impostors = std::move(impostors);
    options.server_address = address;
    options.report_interval = report_interval;
    options.min_report_gap = min_report_gap;
    options.rpc_timeout = 2s;
    options.backoff_initial = 10ms;
    options.backoff_max = 200ms;
    v1::RegisterRequest registration;
    registration.set_host_id("host-a");
    registration.set_agent_version("0.1.0");
    registration.mutable_capabilities()->set_smt_active(true);
    return std::make_unique<ServerSession>(
        options, registration, &cache_, [this] { return Observe(); },
        [this](int64_t revision) { last_notified_ = revision; }, stats);
  }

  // What a reconcile pass would report, told from the cache alone: a VM
  // with an assignment is PENDING, any other FAIL_CLOSED.
  absl::StatusOr<std::vector<v1::VMObservation>> Observe() {
    auto vms = discovery_.Discover();
    if (!vms.ok()) return vms.status();
    std::vector<v1::VMObservation> observations;
    for (const discovery::DiscoveredVm& vm : *vms) {
      v1::VMObservation o;
      o.set_vm_id(vm.vm_id);
      o.set_uuid(vm.uuid);
      bool known = cache_.Find(vm.vm_id) || (!vm.uuid.empty() && cache_.Find(vm.uuid));
      o.mutable_enforcement()->set_state(known ? v1::ENFORCEMENT_STATE_PENDING
                                               : v1::ENFORCEMENT_STATE_FAIL_CLOSED);
      o.mutable_enforcement()->set_threads_found(static_cast<int>(vm.threads.size()));
      observations.push_back(std::move(o));
    }
    return observations;
  }

  bool WaitForRevision(int64_t revision) {
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         std::chrono::steady_clock::now() < deadline;) {
      if (cache_.revision() >= revision && last_notified_ >= revision) {
        return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  TempDir dir_;
  AssignmentCache cache_;
  discovery::StaticVmDiscovery discovery_;
  std::atomic<int64_t> last_notified_{0};
};

TEST_F(ServerSessionTest, RegistersWatchesAndReports) {
  discovery_.SetVms({Vm("vm-1", "", 100), Vm("vm-2", "uuid-2", 200)});
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  FakeAgentService& service = csd.service();
  service.Push(MakeSnapshot(5, {MakeAssignment("vm-1", "g1", 5)}));

  std::unique_ptr<ServerSession> session = MakeSession(csd.address());
  ASSERT_OK(session->Start());
  ASSERT_TRUE(WaitForRevision(5));
  EXPECT_THAT(cache_.assignments(), ElementsAre(Key("vm-1")));

  std::vector<v1::RegisterRequest> registers = service.registers();
  ASSERT_FALSE(registers.empty());
  EXPECT_EQ(registers[0].host_id(), "host-a");
  EXPECT_EQ(registers[0].agent_version(), "0.1.0");
  EXPECT_TRUE(registers[0].capabilities().smt_active());
  ASSERT_FALSE(service.watches().empty());
  EXPECT_EQ(service.watches()[0].host_id(), "host-a");
  EXPECT_EQ(service.watches()[0].resume_revision(), 0);
  EXPECT_TRUE(session->watching());

  // A delta: vm-2 is now known (by its UUID), vm-1 removed.
  service.Push(MakeDelta(8, {MakeAssignment("uuid-2", "g2", 8)}, {"vm-1"}));
  ASSERT_TRUE(WaitForRevision(8));
  EXPECT_THAT(cache_.assignments(), ElementsAre(Key("uuid-2")));

  // A report that reflects revision 8 arrives.
  ASSERT_TRUE(service.WaitFor([&] {
    const auto& reports = service.reports_locked();
    return !reports.empty() && reports.back().applied_revision() == 8;
  }));
  v1::ReportRequest report = service.reports().back();
  EXPECT_EQ(report.host_id(), "host-a");
  ASSERT_EQ(report.vms_size(), 2);
  EXPECT_EQ(report.vms(0).vm_id(), "vm-1");
  EXPECT_EQ(report.vms(0).enforcement().state(),
            v1::ENFORCEMENT_STATE_FAIL_CLOSED);
  EXPECT_EQ(report.vms(0).enforcement().threads_found(), 2);
  EXPECT_EQ(report.vms(1).vm_id(), "vm-2");
  EXPECT_EQ(report.vms(1).uuid(), "uuid-2");
  EXPECT_EQ(report.vms(1).enforcement().state(), v1::ENFORCEMENT_STATE_PENDING);

  // Reports keep coming on the interval.
  const size_t count = service.reports().size();
  ASSERT_TRUE(service.WaitFor(
      [&] { return service.reports_locked().size() >= count + 2; }));
  session->Stop();
}

// A burst of watch messages (a migration, a re-plan) asks for a Report after
// each: they give one Report once the gap has passed, not one each.
TEST_F(ServerSessionTest, ABurstOfWatchMessagesGivesOneReport) {
  discovery_.SetVms({Vm("vm-1", "", 100)});
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  FakeAgentService& service = csd.service();
  service.Push(MakeSnapshot(1, {MakeAssignment("vm-1", "g1", 1)}));
  std::unique_ptr<ServerSession> session =
      MakeSession(csd.address(), nullptr, /*report_interval=*/60s, /*min_report_gap=*/2s);
  ASSERT_OK(session->Start());
  ASSERT_TRUE(service.WaitFor([&] { return !service.reports_locked().empty(); }));
  for (int64_t revision = 2; revision <= 21; ++revision) {
    service.Push(MakeDelta(revision, {MakeAssignment("vm-1", "g1", revision)}, {}));
  }
  ASSERT_TRUE(WaitForRevision(21));
  ASSERT_TRUE(service.WaitFor([&] {
    const auto& reports = service.reports_locked();
    return !reports.empty() && reports.back().applied_revision() == 21;
  }));
  int between = 0;
  for (const v1::ReportRequest& r : service.reports()) {
    between += r.applied_revision() > 1 && r.applied_revision() < 21;
  }
  EXPECT_EQ(between, 0) << "the burst's messages were reported one by one";
  session->Stop();
}

TEST_F(ServerSessionTest, ResumesAfterStreamDropAndServerRestart) {
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  const int port = csd.port();
  csd.service().Push(MakeSnapshot(5, {MakeAssignment("vm-1", "g1", 5)}));
  std::unique_ptr<ServerSession> session = MakeSession(csd.address());
  ASSERT_OK(session->Start());
  ASSERT_TRUE(WaitForRevision(5));

  // csd ends the stream: the agent comes back asking from revision 5.
  csd.service().DropStreams();
  ASSERT_TRUE(csd.service().WaitFor([&] {
    return csd.service().watches_locked().size() >= 2 &&
           csd.service().open_streams_locked() == 1;
  }));
  EXPECT_EQ(csd.service().watches()[1].resume_revision(), 5);
  EXPECT_GE(csd.service().registers().size(), 2u);
  csd.service().Push(MakeDelta(6, {MakeAssignment("vm-2", "g2", 6)}, {}));
  ASSERT_TRUE(WaitForRevision(6));

  // csd goes away and comes back on the same port.
  csd.Shutdown();
  FakeCsd restarted(port);
  ASSERT_TRUE(restarted.ok());
  restarted.service().Push(MakeDelta(7, {}, {"vm-1"}));
  ASSERT_TRUE(WaitForRevision(7));
  ASSERT_FALSE(restarted.service().watches().empty());
  EXPECT_EQ(restarted.service().watches()[0].resume_revision(), 6);
  EXPECT_THAT(cache_.assignments(), ElementsAre(Key("vm-2")));
  EXPECT_GE(session->watch_count(), 3);
  session->Stop();

  // What was received survives the agent.
  AssignmentCache reloaded(dir_.path() + "/assignments.pb");
  ASSERT_OK(reloaded.Load());
  EXPECT_EQ(reloaded.revision(), 7);
}

TEST_F(ServerSessionTest, StaleMessageMakesItReconnect) {
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  csd.service().Push(MakeSnapshot(5, {MakeAssignment("vm-1", "g1", 5)}));
  csd.service().Push(MakeDelta(3, {}, {"vm-1"}));  // goes back: refused
  std::unique_ptr<ServerSession> session = MakeSession(csd.address());
  ASSERT_OK(session->Start());
  ASSERT_TRUE(csd.service().WaitFor(
      [&] { return csd.service().watches_locked().size() >= 2; }));
  EXPECT_EQ(csd.service().watches()[1].resume_revision(), 5);
  EXPECT_EQ(cache_.revision(), 5);
  EXPECT_TRUE(cache_.Find("vm-1").has_value());
  session->Stop();
}

TEST_F(ServerSessionTest, DiscoveryFailureSkipsTheReport) {
  discovery_.SetError(absl::UnavailableError("libvirt is down"));
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  csd.service().Push(MakeSnapshot(1, {}));
  std::unique_ptr<ServerSession> session = MakeSession(csd.address());
  ASSERT_OK(session->Start());
  ASSERT_TRUE(WaitForRevision(1));
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(csd.service().reports().empty());
  discovery_.SetError(absl::OkStatus());
  ASSERT_TRUE(csd.service().WaitFor(
      [&] { return !csd.service().reports_locked().empty(); }));
  session->Stop();
}

// Issue #32 item 6: a replica that lost its store may keep the stream open
// while every Report fails; after report_failures_before_moving (3) of
// them in a row the agent leaves it for the next replica, resuming there.
TEST_F(ServerSessionTest, ReportsFailingAtOneReplicaMoveTheAgentOn) {
  discovery_.SetVms({Vm("vm-1", "", 100)});
  FakeCsd cut_off, healthy;
  ASSERT_TRUE(cut_off.ok() && healthy.ok());
  cut_off.service().SetReportStatus(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "cannot reach its store"));
  cut_off.service().Push(MakeSnapshot(1, {}));
  healthy.service().Push(MakeSnapshot(1, {}));
  std::unique_ptr<ServerSession> session =
      MakeSession(absl::StrCat(cut_off.address(), ",", healthy.address()));
  ASSERT_OK(session->Start());
  ASSERT_TRUE(healthy.service().WaitFor(
      [&] { return !healthy.service().reports_locked().empty(); }))
      << "the agent stayed on the replica whose Reports fail";
  EXPECT_EQ(session->current_address(), healthy.address());
  EXPECT_EQ(session->failovers(), 1);
  // At least three failed Reports there (the stream itself never failed);
  // one more may leave while the stream winds down.
  EXPECT_GE(cut_off.service().reports().size(), 3u);
  EXPECT_LE(cut_off.service().reports().size(), 4u);
  session->Stop();
}

// With one address there is nowhere to go: Reports keep being retried.
TEST_F(ServerSessionTest, ReportsFailingAtTheOnlyCsdKeepTheStream) {
  discovery_.SetVms({Vm("vm-1", "", 100)});
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  csd.service().SetReportStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "store away"));
  csd.service().Push(MakeSnapshot(1, {}));
  std::unique_ptr<ServerSession> session = MakeSession(csd.address());
  ASSERT_OK(session->Start());
  ASSERT_TRUE(csd.service().WaitFor([&] { return csd.service().reports_locked().size() >= 6; }));
  EXPECT_EQ(session->failovers(), 0);
  EXPECT_TRUE(session->watching());
  EXPECT_EQ(session->watch_count(), 1);
  session->Stop();
}

// Reports carry the impostors the agent found: the first 32, and the count.
TEST_F(ServerSessionTest, ReportsCarryImpostorsBounded) {
  discovery_.SetVms({Vm("vm-1", "", 100)});
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  csd.service().Push(MakeSnapshot(1, {}));
  std::unique_ptr<ServerSession> session =
      MakeSession(csd.address(), nullptr, 100ms, 10ms, [] {
        std::vector<v1::ImpostorProcess> impostors(40);
        for (int i = 0; i < 40; ++i) impostors[i].set_pid(1000 + i);
        return impostors;
      });
  ASSERT_OK(session->Start());
  ASSERT_TRUE(csd.service().WaitFor([&] { return !csd.service().reports_locked().empty(); }));
  const v1::ReportRequest report = csd.service().reports().front();
  EXPECT_EQ(report.impostor_count(), 40);
  ASSERT_EQ(report.impostors_size(), 32);
  EXPECT_EQ(report.impostors(31).pid(), 1031);
  session->Stop();
}

// Stats windows ride on every report until csd accepts one; then they
// leave the queue and the next reports carry only newer ones.
TEST_F(ServerSessionTest, StatsWindowsLeaveOnlyWhenCsdAcceptedTheReport) {
  StatsWindowQueue stats(2);
  for (int i = 1; i <= 3; ++i) {
    v1::StatsWindow window;
    window.set_start_unix_ns(i);
    stats.Push(window);
  }
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  FakeAgentService& service = csd.service();
  service.SetReportStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "csd store busy"));
  service.Push(MakeSnapshot(1, {}));
  std::unique_ptr<ServerSession> session = MakeSession(csd.address(), &stats);
  ASSERT_OK(session->Start());
  ASSERT_TRUE(service.WaitFor([&] { return service.reports_locked().size() >= 2; }));
  for (const v1::ReportRequest& report : service.reports()) {
    ASSERT_EQ(report.stats_size(), 2);
    EXPECT_EQ(report.stats(0).start_unix_ns(), 2);
    EXPECT_EQ(report.dropped_windows(), 1);
  }
  EXPECT_EQ(stats.size(), 2u);
  EXPECT_EQ(session->report_count(), 0);

  service.SetReportStatus(grpc::Status::OK);
  ASSERT_TRUE(service.WaitFor([&] {
    const auto& reports = service.reports_locked();
    return !reports.empty() && reports.back().stats_size() == 0;
  }));
  EXPECT_EQ(stats.size(), 0u);
  EXPECT_EQ(stats.dropped(), 0);
  session->Stop();
  const std::vector<v1::ReportRequest> reports = service.reports();
  EXPECT_EQ(reports.back().dropped_windows(), 0);
}

TEST_F(ServerSessionTest, StopIsPromptWhileStreaming) {
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  csd.service().Push(MakeSnapshot(1, {}));
  std::unique_ptr<ServerSession> session = MakeSession(csd.address());
  ASSERT_OK(session->Start());
  ASSERT_TRUE(WaitForRevision(1));
  auto start = std::chrono::steady_clock::now();
  session->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_FALSE(session->watching());
}

TEST_F(ServerSessionTest, StopIsPromptWhileBackingOff) {
  ServerSessionOptions options;
  options.server_address = "127.0.0.1:1";  // nothing listens there
  options.backoff_initial = 10s;
  options.backoff_max = 60s;
  ServerSession session(options, v1::RegisterRequest(), &cache_,
                        [this] { return Observe(); },
                        nullptr);
  ASSERT_OK(session.Start());
  std::this_thread::sleep_for(200ms);
  auto start = std::chrono::steady_clock::now();
  session.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_FALSE(session.registered());
}

TEST_F(ServerSessionTest, PlaintextToRemoteNeedsInsecure) {
  ServerSessionOptions options;
  options.server_address = "192.0.2.1:7443";
  ServerSession session(options, v1::RegisterRequest(), &cache_,
                        [this] { return Observe(); },
                        nullptr);
  EXPECT_EQ(session.Start().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(JitteredBackoffTest, GrowsToTheCapWithJitter) {
  JitteredBackoff backoff(200ms, 10s, /*seed=*/1);
  std::chrono::milliseconds largest{0};
  for (int i = 0; i < 5; ++i) {
    const std::chrono::milliseconds ceiling =
        std::min<std::chrono::milliseconds>(200ms * (1 << i), 10s);
    const std::chrono::milliseconds delay = backoff.NextDelay();
    EXPECT_LE(delay, ceiling);
    EXPECT_GE(delay, 0ms);
  }
  for (int i = 0; i < 200; ++i) {
    const std::chrono::milliseconds delay = backoff.NextDelay();
    EXPECT_LE(delay, 10s);
    largest = std::max(largest, delay);
  }
  EXPECT_GT(largest, 5s);  // it does reach up toward the cap
  backoff.Reset();
  EXPECT_LE(backoff.NextDelay(), 200ms);
}

}  // namespace
}  // namespace cosched::agent
