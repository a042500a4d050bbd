// A VM on more than one host (live migration), idempotent Reports, and the
// host lifecycle (drain, undrain, remove) with Place's rules of which hosts
// it may choose.
#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "server/state/vm_presence.h"
#include "store/instrumented_store.h"
#include "store/sqlite_store.h"
#include "tests/server/state_testing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

const Actor kTester{"spiffe://test/tester", "admin"};

using testing::Wait;

struct Seen {
  std::string vm_id;
  std::string uuid;
  v1::VMRunState state = v1::VM_RUN_STATE_RUNNING;
};

class MobilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::SqliteStoreOptions options;
    options.data_dir = dir_.Sub("data");
    auto store = store::SqliteStore::Open(options);
    ASSERT_OK(store);
    // Counts the writes that reach the store: an unchanged Report must not.
    store_ = std::make_unique<store::InstrumentedStore>(
        std::move(*store), [this](absl::StatusCode, double) { ++writes_; });
    state_ = std::make_unique<TestState>(*store_);
    // Reports back to back; the rate limit has tests of its own.
    state_->reports.report_rate().set_options({.per_second = 0});
    state_->host_status.set_connected_check([this](absl::string_view host) {
      return connected_.count(std::string(host)) > 0;
    });
  }

  void Tag(const std::string& vm) {
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    auto r = Wait<v1::TagVMResponse>(
        [&](auto done) { state_->vms.TagVm(request, kTester, std::move(done)); });
    ASSERT_OK(r);
  }

  // A host of `cores` cores of two siblings each, SMT on, with core
  // scheduling as `support` says.
  void Register(const std::string& host, int cores = 2,
                v1::CoreSchedSupport support = v1::CORE_SCHED_SUPPORT_SUPPORTED) {
    v1::RegisterRequest request;
    request.set_host_id(host);
    for (int c = 0; c < cores; ++c) {
      auto* core = request.mutable_topology()->add_cores();
      core->add_cpus(c);
      core->add_cpus(c + cores);
    }
    request.mutable_capabilities()->set_smt_active(true);
    request.mutable_capabilities()->set_core_sched(support);
    auto r = Wait<v1::RegisterResponse>([&](auto done) {
      state_->hosts.RegisterHost(request, kTester, std::move(done));
    });
    ASSERT_OK(r);
  }

  absl::Status Report(const std::string& host, const std::vector<Seen>& vms,
                      int64_t applied = 0) {
    v1::ReportRequest request;
    request.set_host_id(host);
    request.set_applied_revision(applied);
    for (const Seen& s : vms) {
      auto* o = request.add_vms();
      o->set_vm_id(s.vm_id);
      o->set_uuid(s.uuid);
      o->set_run_state(s.state);
      // As cs-agent does: every Report carries its own time, 10 s apart.
      o->mutable_enforcement()->mutable_report_time()->set_seconds(10 * ++reports_);
    }
    return Wait<v1::ReportResponse>([&](auto done) {
             state_->reports.ApplyReport(request, std::move(done));
           }).status();
  }

  v1::VM Get(const std::string& vm) {
    v1::GetVMRequest request;
    request.set_vm_id(vm);
    auto r = state_->vms.GetVm(request);
    EXPECT_OK(r);
    return r.ok() ? *r : v1::VM();
  }

  // The VM ids of the host's snapshot: what its agent enforces.
  std::vector<std::string> Enforced(const std::string& host) {
    return testing::AssignedVmIds(*state_, host);
  }

  int AuditCount(const std::string& method, const std::string& subject) {
    v1::ListAuditRecordsRequest request;
    request.set_subject(subject);
    request.set_page_size(1000);
    auto r = state_->audit.ListAuditRecords(request);
    EXPECT_OK(r);
    int n = 0;
    if (r.ok()) {
      for (const auto& record : r->records()) n += record.method() == method;
    }
    return n;
  }

  absl::StatusOr<v1::PlaceResponse> Place(int vcpus, bool pin = false) {
    v1::PlaceRequest request;
    request.set_vcpus(vcpus);
    request.set_pin(pin);
    return state_->policy.Place(request);
  }

  absl::StatusOr<v1::Host> Drain(const std::string& host, bool draining = true) {
    v1::DrainHostRequest request;
    request.set_host_id(host);
    return Wait<v1::Host>([&](auto done) {
      state_->hosts.SetHostDraining(request, draining, kTester, std::move(done));
    });
  }

  absl::StatusOr<v1::RemoveHostResponse> Remove(const std::string& host) {
    v1::RemoveHostRequest request;
    request.set_host_id(host);
    return Wait<v1::RemoveHostResponse>(
        [&](auto done) { state_->hosts.RemoveHost(request, kTester, std::move(done)); });
  }

  cosched::testing::TempDir dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<TestState> state_;
  std::set<std::string> connected_;
  std::atomic<int> writes_{0};
  int64_t reports_ = 0;
};

// The case a new user hit: one QEMU seen by two agents (procfs, both say
// running), each reporting after every watch message. The old code moved
// the VM to whichever host reported last: thousands of revisions, and each
// move sent the other host a removal.
TEST_F(MobilityTest, TwoHostsReportingOneVmDoNotFlap) {
  Register("hv-a");
  Register("hv-b");
  Tag("vm-1");
  ASSERT_OK(Report("hv-a", {{"vm-1", "u-1"}}));
  ASSERT_OK(Report("hv-b", {{"vm-1", "u-1"}}));
  const int64_t settled = store_->CurrentRevision();
  // Each host's applied revision moves once, to `settled`.
  ASSERT_OK(Report("hv-a", {{"vm-1", "u-1"}}, settled));
  ASSERT_OK(Report("hv-b", {{"vm-1", "u-1"}}, settled));
  const int writes = writes_;
  for (int i = 0; i < 50; ++i) {
    ASSERT_OK(Report("hv-a", {{"vm-1", "u-1"}}, settled));
    ASSERT_OK(Report("hv-b", {{"vm-1", "u-1"}}, settled));
  }
  EXPECT_EQ(store_->CurrentRevision(), settled);
  EXPECT_EQ(writes_, writes) << "unchanged Reports were written";
  EXPECT_EQ(Get("vm-1").host_id(), "hv-a");  // the first to report it
  EXPECT_EQ(Get("vm-1").presence_size(), 2);
  // Both sides enforce the VM's group, and neither is sent a removal.
  EXPECT_EQ(Enforced("hv-a"), std::vector<std::string>{"vm-1"});
  EXPECT_EQ(Enforced("hv-b"), std::vector<std::string>{"vm-1"});
  auto update = state_->watches.WatchUpdate("hv-b", settled);
  ASSERT_OK(update);
  EXPECT_FALSE(update->has_value());
  EXPECT_EQ(AuditCount("ChangeOwner", "vm-1"), 0);
}

// libvirt's view of a live migration, step by step: ownership moves once,
// when the destination runs and the source has stopped, and both sides hold
// the assignment throughout.
TEST_F(MobilityTest, LiveMigrationMovesOwnershipOnceWhenTheSourceStops) {
  Register("hv-a");
  Register("hv-b");
  Tag("vm-1");
  const std::string u = "4f1c2e9a-0000-4000-8000-000000000001";
  ASSERT_OK(Report("hv-a", {{"vm-1", u}}));
  const int64_t start = store_->CurrentRevision();
  std::vector<std::string> owners;
  auto step = [&](const std::vector<Seen>& a, const std::vector<Seen>& b) {
    ASSERT_OK(Report("hv-b", b));
    ASSERT_OK(Report("hv-a", a));
    const v1::VM vm = Get("vm-1");
    if (owners.empty() || owners.back() != vm.host_id()) owners.push_back(vm.host_id());
    // Wherever it runs, its agent is sent its assignment: never fail-closed.
    for (const auto& p : vm.presence()) {
      EXPECT_TRUE(ReceivesAssignment(vm, p.host_id())) << p.host_id();
    }
  };
  step({{"vm-1", u}}, {{"vm-1", u, v1::VM_RUN_STATE_MIGRATING_IN}});
  EXPECT_EQ(Enforced("hv-b"), std::vector<std::string>{"vm-1"});
  step({{"vm-1", u}}, {{"vm-1", u, v1::VM_RUN_STATE_MIGRATING_IN}});
  step({{"vm-1", u, v1::VM_RUN_STATE_MIGRATING_OUT}},
       {{"vm-1", u, v1::VM_RUN_STATE_MIGRATING_IN}});
  step({{"vm-1", u, v1::VM_RUN_STATE_MIGRATING_OUT}}, {{"vm-1", u}});
  step({{"vm-1", u, v1::VM_RUN_STATE_SHUT_OFF}}, {{"vm-1", u}});
  step({}, {{"vm-1", u}});
  EXPECT_EQ(owners, (std::vector<std::string>{"hv-a", "hv-b"}));
  EXPECT_EQ(AuditCount("ChangeOwner", "vm-1"), 1);
  EXPECT_EQ(Enforced("hv-a"), std::vector<std::string>{});
  EXPECT_EQ(Enforced("hv-b"), std::vector<std::string>{"vm-1"});
  // One revision when hv-b joined, one when hv-a left: the states between
  // change the record but no host's set of assignments.
  EXPECT_LE(store_->CurrentRevision() - start, 2);
}

TEST_F(MobilityTest, OneNameWithTwoUuidsIsAConflictThatFailsClosedOnBothSides) {
  Register("hv-a");
  Register("hv-b");
  Tag("vm-1");
  ASSERT_OK(Report("hv-a", {{"vm-1", "uuid-one"}}));
  ASSERT_OK(Report("hv-b", {{"vm-1", "uuid-two"}}));
  v1::VM vm = Get("vm-1");
  EXPECT_TRUE(absl::StrContains(vm.conflict(), "uuid-one")) << vm.conflict();
  EXPECT_TRUE(absl::StrContains(vm.conflict(), "uuid-two")) << vm.conflict();
  EXPECT_EQ(vm.host_id(), "hv-a");
  EXPECT_EQ(Enforced("hv-a"), std::vector<std::string>{});
  EXPECT_EQ(Enforced("hv-b"), std::vector<std::string>{});
  // Nothing flaps while it lasts.
  const int64_t during = store_->CurrentRevision();
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(Report("hv-a", {{"vm-1", "uuid-one"}}));
    ASSERT_OK(Report("hv-b", {{"vm-1", "uuid-two"}}));
  }
  EXPECT_EQ(store_->CurrentRevision(), during);
  // The impostor goes: the VM is enforced where it is again.
  ASSERT_OK(Report("hv-b", {}));
  EXPECT_EQ(Get("vm-1").conflict(), "");
  EXPECT_EQ(Enforced("hv-a"), std::vector<std::string>{"vm-1"});
}

// Issue #32 item 5: a host whose copy of a VM has no UUID, while another
// host reports the VM with one, is sent nothing for it (its copy fails
// closed); the host with the UUID keeps the assignment. When that host
// goes, the copy without a UUID is the VM's only one and gets it.
TEST_F(MobilityTest, ACopyWithoutAUuidBesideOneWithAUuidGetsNoAssignment) {
  Register("hv-a");
  Register("hv-b");
  Tag("vm-1");
  const std::string u = "4f1c2e9a-0000-4000-8000-000000000009";
  ASSERT_OK(Report("hv-a", {{"vm-1", u}}));
  ASSERT_OK(Report("hv-b", {{"vm-1", ""}}));
  v1::VM vm = Get("vm-1");
  EXPECT_EQ(vm.conflict(), "");
  EXPECT_TRUE(ReceivesAssignment(vm, "hv-a"));
  EXPECT_FALSE(ReceivesAssignment(vm, "hv-b"));
  EXPECT_EQ(Enforced("hv-a"), std::vector<std::string>{"vm-1"});
  EXPECT_EQ(Enforced("hv-b"), std::vector<std::string>{});
  ASSERT_OK(Report("hv-a", {}));
  vm = Get("vm-1");
  EXPECT_TRUE(ReceivesAssignment(vm, "hv-b"));
  EXPECT_EQ(Enforced("hv-b"), std::vector<std::string>{"vm-1"});
}

TEST_F(MobilityTest, AnUnchangedReportWritesNothingAndAChangedOneDoes) {
  Register("hv-a");
  Tag("vm-1");
  ASSERT_OK(Report("hv-a", {{"vm-1", ""}}));
  const int64_t revision = store_->CurrentRevision();
  v1::GetHostRequest get;
  get.set_host_id("hv-a");
  const int64_t first_seen =
      google::protobuf::util::TimeUtil::TimestampToNanoseconds(
          state_->hosts.GetHost(get)->last_seen_time());
  absl::SleepFor(absl::Milliseconds(5));
  const int writes = writes_;
  ASSERT_OK(Report("hv-a", {{"vm-1", ""}}));
  EXPECT_EQ(writes_, writes) << "an unchanged Report was written";
  EXPECT_EQ(store_->CurrentRevision(), revision);
  auto update = state_->watches.WatchUpdate("hv-a", revision);
  ASSERT_OK(update);
  EXPECT_FALSE(update->has_value());
  // The host's time still moves, from memory.
  EXPECT_GT(google::protobuf::util::TimeUtil::TimestampToNanoseconds(
                state_->hosts.GetHost(get)->last_seen_time()),
            first_seen);
  // A VM that goes is a change.
  ASSERT_OK(Report("hv-a", {}));
  EXPECT_EQ(writes_, writes + 1);
  EXPECT_EQ(Get("vm-1").host_id(), "");
  EXPECT_GT(store_->CurrentRevision(), revision);
}

// The stats of a VM tagged by its UUID go under that id, whether the
// Report that carried them was written or not; and a VM tagged after its
// host last reported gets them too.
TEST_F(MobilityTest, StatsOfUnchangedReportsGoUnderTheIdTheVmIsTaggedWith) {
  Register("hv-a");
  const std::string uuid = "4f1c2e9a-0000-4000-8000-000000000002";
  const int64_t now_ns = absl::ToUnixNanos(absl::Now());
  int64_t window = 0;
  auto report = [&] {
    v1::ReportRequest request;
    request.set_host_id("hv-a");
    auto* o = request.add_vms();
    o->set_vm_id("guest-7");
    o->set_uuid(uuid);
    o->set_run_state(v1::VM_RUN_STATE_RUNNING);
    auto* w = request.add_stats();
    w->set_start_unix_ns(now_ns - 100'000'000'000 + window * 1'000'000'000);
    w->set_end_unix_ns(now_ns - 100'000'000'000 + (window + 1) * 1'000'000'000);
    ++window;
    auto* vm = w->add_vms();
    vm->set_vm_id("guest-7");
    vm->mutable_share()->set_run_ns(100);
    vm->mutable_share()->set_idle_ns(100);
    return Wait<v1::ReportResponse>(
               [&](auto done) { state_->reports.ApplyReport(request, std::move(done)); })
        .status();
  };
  ASSERT_OK(report());  // written; nobody has tagged it yet
  Tag(uuid);
  const int writes = writes_;
  ASSERT_OK(report());
  ASSERT_OK(report());
  // The tag wrote the VM's presence from the host's Report, and told the
  // Report memory the id its stats go under (issue #36: one write per tag).
  EXPECT_EQ(writes_, writes) << "no write after the tag";
  v1::GetStatsRequest get;
  get.set_vm_id(uuid);
  auto stats = state_->stats_queries.GetStats(get);
  ASSERT_OK(stats);
  // The two windows reported after the tag (the first, from before it,
  // went under the name it ran under then); the unchanged Report's among
  // them.
  EXPECT_EQ(stats->total().run_ns(), 200);
}

TEST_F(MobilityTest, AnUnchangedReportIsStillCheckedAgainstTheTopology) {
  Register("hv-a", 1);
  ASSERT_OK(Report("hv-a", {}));
  v1::ReportRequest request;
  request.set_host_id("hv-a");
  auto* window = request.add_stats();
  window->set_start_unix_ns(absl::ToUnixNanos(absl::Now()) - 2'000'000'000);
  window->set_end_unix_ns(absl::ToUnixNanos(absl::Now()) - 1'000'000'000);
  window->add_cores()->set_core(3);
  auto r = Wait<v1::ReportResponse>(
      [&](auto done) { state_->reports.ApplyReport(request, std::move(done)); });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

TEST_F(MobilityTest, TaggingAVmAlreadyReportedOnTwoHostsSendsItToBoth) {
  Register("hv-a");
  Register("hv-b");
  ASSERT_OK(Report("hv-a", {{"vm-1", ""}}));
  ASSERT_OK(Report("hv-b", {{"vm-1", "", v1::VM_RUN_STATE_MIGRATING_IN}}));
  Tag("vm-1");
  EXPECT_EQ(Get("vm-1").host_id(), "hv-a");
  EXPECT_EQ(Enforced("hv-a"), std::vector<std::string>{"vm-1"});
  EXPECT_EQ(Enforced("hv-b"), std::vector<std::string>{"vm-1"});
}

TEST_F(MobilityTest, AReportWithAnUnknownRunStateIsRefused) {
  Register("hv-a");
  v1::ReportRequest request;
  request.set_host_id("hv-a");
  auto* o = request.add_vms();
  o->set_vm_id("vm-1");
  o->set_run_state(static_cast<v1::VMRunState>(99));
  auto r = Wait<v1::ReportResponse>(
      [&](auto done) { state_->reports.ApplyReport(request, std::move(done)); });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "vms[0].run_state"));
}

TEST_F(MobilityTest, DrainedHostsAreNotChosenAndKeepTheirVmsEnforced) {
  Register("hv-a");
  Register("hv-b");
  Tag("vm-1");
  ASSERT_OK(Report("hv-a", {{"vm-1", ""}}));
  ASSERT_OK(Report("hv-b", {}));
  auto drained = Drain("hv-b");
  ASSERT_OK(drained);
  EXPECT_TRUE(drained->draining());
  EXPECT_EQ(drained->unplaceable_reason(), "draining");
  for (int i = 0; i < 3; ++i) {
    auto placed = Place(1);
    ASSERT_OK(placed);
    EXPECT_EQ(placed->host_id(), "hv-a");
  }
  ASSERT_OK(Drain("hv-a"));
  EXPECT_EQ(Enforced("hv-a"), std::vector<std::string>{"vm-1"});
  auto none = Place(1);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(none.status().message(), "2 draining"))
      << none.status();
  EXPECT_EQ(AuditCount("DrainHost", "hv-a"), 1);
  ASSERT_OK(Drain("hv-a"));  // idempotent: no second record
  EXPECT_EQ(AuditCount("DrainHost", "hv-a"), 1);
  ASSERT_OK(Drain("hv-b", false));
  auto placed = Place(1);
  ASSERT_OK(placed);
  EXPECT_EQ(placed->host_id(), "hv-b");
}

TEST_F(MobilityTest, PlaceSkipsHostsThatCannotIsolateOrAreNotLive) {
  Register("no-kernel", 2, v1::CORE_SCHED_SUPPORT_NO_KERNEL_SUPPORT);
  Register("quiet");
  Register("good");
  ASSERT_OK(Report("no-kernel", {}));
  ASSERT_OK(Report("good", {}));
  state_->settings.set_host_stale_after(absl::Milliseconds(200));
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_OK(Report("no-kernel", {}));
  ASSERT_OK(Report("good", {}));
  auto placed = Place(1);
  ASSERT_OK(placed);
  EXPECT_EQ(placed->host_id(), "good");
  ASSERT_EQ(placed->candidates_size(), 1);
  v1::GetHostRequest get;
  get.set_host_id("quiet");
  EXPECT_TRUE(absl::StrContains(state_->hosts.GetHost(get)->unplaceable_reason(), "not live"));
  connected_.insert("quiet");  // a connected agent is live however quiet
  EXPECT_EQ(state_->hosts.GetHost(get)->unplaceable_reason(), "");
  connected_.clear();
  ASSERT_OK(Drain("good"));
  auto none = Place(1);
  ASSERT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string why(none.status().message());
  EXPECT_TRUE(absl::StrContains(why, "1 draining")) << why;
  EXPECT_TRUE(absl::StrContains(why, "1 not live")) << why;
  EXPECT_TRUE(absl::StrContains(why, "1 unable to isolate")) << why;
  // `none` needs no cookie: a host without core scheduling will do (for a
  // tenant whose policy grants it).
  v1::SetTenantPolicyRequest grant;
  grant.mutable_policy()->set_tenant_id("default");
  grant.mutable_policy()->set_default_isolation(v1::ISOLATION_LEVEL_VM);
  grant.mutable_policy()->add_allowed_isolation(v1::ISOLATION_LEVEL_VM);
  grant.mutable_policy()->add_allowed_isolation(v1::ISOLATION_LEVEL_NONE);
  ASSERT_OK(Wait<v1::TenantPolicy>(
      [&](auto done) { state_->policies.SetTenantPolicy(grant, kTester, std::move(done)); }));
  v1::PlaceRequest untagged;
  untagged.set_vcpus(1);
  untagged.set_isolation(v1::ISOLATION_LEVEL_NONE);
  untagged.set_pin(false);
  auto any = state_->policy.Place(untagged);
  ASSERT_OK(any);
  EXPECT_EQ(any->host_id(), "no-kernel");
}

TEST_F(MobilityTest, PinnedPlacementLeavesOneCoreSharedLikeTheAgent) {
  Register("hv-a", 2);
  ASSERT_OK(Report("hv-a", {}));
  auto one = Place(2, /*pin=*/true);  // one core of two
  ASSERT_OK(one);
  EXPECT_EQ(one->cores_size(), 1);
  auto both = Place(4, /*pin=*/true);  // both cores: the agent would refuse
  EXPECT_EQ(both.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(both.status().message(), "stays shared"))
      << both.status();
}

TEST_F(MobilityTest, HostLifecycleOfAnUnknownHostIsNotFound) {
  EXPECT_EQ(Drain("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Drain("nope", false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Remove("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Remove("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MobilityTest, RemoveIsRefusedWhileConnectedOrReportingVms) {
  Register("hv-a");
  Tag("vm-1");
  ASSERT_OK(Report("hv-a", {{"vm-1", ""}}));
  connected_.insert("hv-a");
  auto r = Remove("hv-a");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "agent connected")) << r.status();
  connected_.clear();
  r = Remove("hv-a");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "vm-1")) << r.status();
  ASSERT_OK(Report("hv-a", {}));
  r = Remove("hv-a");
  ASSERT_OK(r);
  v1::GetHostRequest get;
  get.set_host_id("hv-a");
  EXPECT_EQ(state_->hosts.GetHost(get).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(AuditCount("RemoveHost", "hv-a"), 1);
  EXPECT_EQ(Place(1).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(MobilityTest, ADeadHostCanBeRemovedAndItsVmsMoveToWhereTheyRun) {
  Register("hv-a");
  Register("hv-b");
  Tag("vm-1");
  ASSERT_OK(Report("hv-a", {{"vm-1", ""}}));
  ASSERT_OK(Report("hv-b", {{"vm-1", ""}}));
  EXPECT_EQ(Get("vm-1").host_id(), "hv-a");
  state_->settings.set_host_stale_after(absl::Milliseconds(100));
  absl::SleepFor(absl::Milliseconds(200));
  auto r = Remove("hv-a");  // its agent died with the VM in its last report
  ASSERT_OK(r);
  EXPECT_EQ(Get("vm-1").host_id(), "hv-b");
  EXPECT_EQ(Enforced("hv-b"), std::vector<std::string>{"vm-1"});
}

// The rule alone, over every pair of run states of an owner and another host.
// Issue #32 item 4: a paused or shut off owner keeps its VM (before, any
// host that reported it running while the owner did not took it, and with
// it the right to tag it from its metadata); only a migration's states
// give it up.
TEST(ResolveOwner, TheOwnerGivesWayOnlyToARunningHostWhileItMigrates) {
  const v1::VMRunState states[] = {v1::VM_RUN_STATE_RUNNING, v1::VM_RUN_STATE_MIGRATING_IN,
                                   v1::VM_RUN_STATE_MIGRATING_OUT, v1::VM_RUN_STATE_PAUSED,
                                   v1::VM_RUN_STATE_SHUT_OFF};
  google::protobuf::Timestamp t;
  for (v1::VMRunState owner : states) {
    for (v1::VMRunState other : states) {
      v1::VM vm;
      vm.set_vm_id("vm-1");
      vm.set_host_id("a");
      v1::VMObservation o;
      o.set_run_state(owner);
      SetPresence(vm, "a", o, t);
      o.set_run_state(other);
      SetPresence(vm, "b", o, t);
      ResolveOwner(vm);
      const bool migrating = owner == v1::VM_RUN_STATE_MIGRATING_IN ||
                             owner == v1::VM_RUN_STATE_MIGRATING_OUT;
      const bool moves = migrating && other == v1::VM_RUN_STATE_RUNNING;
      EXPECT_EQ(vm.host_id(), moves ? "b" : "a") << owner << " " << other;
      EXPECT_TRUE(ReceivesAssignment(vm, "a") && ReceivesAssignment(vm, "b"));
    }
  }
}

}  // namespace
}  // namespace cosched::server
