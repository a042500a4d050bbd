
#include <atomic>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "store/sqlite_store.h"
#include "tests/server/state_testing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

const Actor kTester{"spiffe://test/tester", "admin"};
constexpr int64_t kNsPerSecondForTest = 1000000000;

using testing::Wait;

class DesiredStateTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(state_, nullptr); }

  absl::StatusOr<v1::TagVMResponse> Tag(const std::string& vm,
                                        const std::string& tenant = "",
                                        v1::IsolationLevel level =
                                            v1::ISOLATION_LEVEL_UNSPECIFIED,
                                        std::vector<std::string> classes = {}) {
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id(tenant);
    request.set_isolation(level);
    for (auto& c : classes) request.add_interference_classes(c);
    return Wait<v1::TagVMResponse>(
        [&](auto done) { state_->vms.TagVm(request, kTester, std::move(done)); });
  }

  absl::Status Register(const std::string& host) { return sqlite_.RegisterHost(host, kTester); }

  absl::Status Report(const std::string& host,
                      std::vector<std::pair<std::string, std::string>> vms) {
    v1::ReportRequest request;
    request.set_host_id(host);
    for (auto& [id, uuid] : vms) {
      auto* o = request.add_vms();
      o->set_vm_id(id);
      o->set_uuid(uuid);
    }
    return Wait<v1::ReportResponse>([&](auto done) {
             state_->reports.ApplyReport(request, std::move(done));
           }).status();
  }

  cosched::testing::TempDir dir_;
  testing::SqliteTestState sqlite_{dir_.Sub("data")};
  store::Store* const store_ = sqlite_.store();
  TestState* const state_ = sqlite_.state();
};

TEST_F(DesiredStateTest, TagWithNothingButAnIdUsesDefaultTenantAndVmLevel) {
  auto r = Tag("vm-123");
  ASSERT_OK(r);
  EXPECT_TRUE(r->changed());
  EXPECT_EQ(r->vm().tenant_id(), "default");
  EXPECT_EQ(r->vm().assignment().isolation(), v1::ISOLATION_LEVEL_VM);
  EXPECT_EQ(r->vm().assignment().trust_group(), "default/vm/vm-123");
  EXPECT_EQ(r->vm().thread_scope(), v1::THREAD_SCOPE_EMULATOR);
  EXPECT_GT(r->vm().assignment().revision(), 0);
}

TEST_F(DesiredStateTest, TagIsIdempotent) {
  auto first = Tag("vm-1", "acme", v1::ISOLATION_LEVEL_TENANT, {"avx512"});
  auto second = Tag("vm-1", "acme", v1::ISOLATION_LEVEL_TENANT, {"avx512", "avx512"});
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_FALSE(second->changed());
  EXPECT_EQ(first->vm().assignment().revision(), second->vm().assignment().revision());
  EXPECT_EQ(store_->CurrentRevision(), first->vm().assignment().revision());
  auto third = Tag("vm-1", "acme", v1::ISOLATION_LEVEL_VM);
  ASSERT_OK(third);
  EXPECT_TRUE(third->changed());
  EXPECT_GT(third->vm().assignment().revision(), first->vm().assignment().revision());
}

TEST_F(DesiredStateTest, TagRecordsTheOperatorsDecisionOnceAndOlderRecordsStayUnchanged) {
  auto first = Tag("vm-1", "acme", v1::ISOLATION_LEVEL_TENANT);
  ASSERT_OK(first);
  const v1::LayoutDecision& decision = first->vm().decision();
  EXPECT_EQ(decision.decided_by(), v1::DECIDED_BY_OPERATOR);
  EXPECT_TRUE(decision.has_decided_at());
  ASSERT_EQ(decision.reasons_size(), 1);
  EXPECT_NE(decision.reasons(0).find("tagged with isolation tenant"), std::string::npos);
  auto again = Tag("vm-1", "acme", v1::ISOLATION_LEVEL_TENANT);
  ASSERT_OK(again);
  EXPECT_FALSE(again->changed());
  EXPECT_EQ(again->vm().decision().decided_at().seconds(), decision.decided_at().seconds());

  // A record from before decisions were kept: the same tag writes nothing.
  v1::VM old = first->vm();
  old.clear_decision();
  std::promise<absl::Status> written;
  store_->Write([&](store::Transaction& txn) { return txn.PutVm(old); },
                [&](absl::Status s) { written.set_value(s); });
  ASSERT_OK(written.get_future().get());
  const int64_t revision = store_->CurrentRevision();
  auto unchanged = Tag("vm-1", "acme", v1::ISOLATION_LEVEL_TENANT);
  ASSERT_OK(unchanged);
  EXPECT_FALSE(unchanged->changed());
  EXPECT_EQ(store_->CurrentRevision(), revision);
}

TEST_F(DesiredStateTest, TagForAnotherTenantIsRefused) {
  ASSERT_OK(Tag("vm-1", "acme"));
  auto r = Tag("vm-1", "globex");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("tenant 'acme'"), std::string::npos);
}

TEST_F(DesiredStateTest, PolicyForbidsLevelAndReassignsDefaults) {
  v1::SetTenantPolicyRequest set;
  set.mutable_policy()->set_tenant_id("bank");
  set.mutable_policy()->set_default_isolation(v1::ISOLATION_LEVEL_VM);
  set.mutable_policy()->add_allowed_isolation(v1::ISOLATION_LEVEL_VM);
  set.mutable_policy()->add_allowed_isolation(v1::ISOLATION_LEVEL_TENANT);
  auto policy = Wait<v1::TenantPolicy>(
      [&](auto done) { state_->policies.SetTenantPolicy(set, kTester, std::move(done)); });
  ASSERT_OK(policy);
  EXPECT_TRUE(policy->explicitly_set());

  auto none = Tag("vm-1", "bank", v1::ISOLATION_LEVEL_NONE);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);

  auto by_default = Tag("vm-2", "bank");
  ASSERT_OK(by_default);
  EXPECT_EQ(by_default->vm().assignment().trust_group(), "bank/vm/vm-2");

  // New default: the VM that follows the default moves to the tenant group.
  set.mutable_policy()->set_default_isolation(v1::ISOLATION_LEVEL_TENANT);
  ASSERT_TRUE(Wait<v1::TenantPolicy>([&](auto done) {
                state_->policies.SetTenantPolicy(set, kTester, std::move(done));
              }).ok());
  v1::GetVMRequest get;
  get.set_vm_id("vm-2");
  auto vm = state_->vms.GetVm(get);
  ASSERT_OK(vm);
  EXPECT_EQ(vm->assignment().trust_group(), "bank/tenant");
  EXPECT_GT(vm->assignment().revision(), by_default->vm().assignment().revision());

  // A policy that forbids a level in use is refused, naming the VM.
  ASSERT_OK(Tag("vm-3", "bank", v1::ISOLATION_LEVEL_VM));
  set.mutable_policy()->clear_allowed_isolation();
  set.mutable_policy()->add_allowed_isolation(v1::ISOLATION_LEVEL_TENANT);
  auto refused = Wait<v1::TenantPolicy>(
      [&](auto done) { state_->policies.SetTenantPolicy(set, kTester, std::move(done)); });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("vm-3 (vm)"), std::string::npos);
}

TEST_F(DesiredStateTest, UntagUnknownIsNotFound) {
  v1::UntagVMRequest request;
  request.set_vm_id("vm-nope");
  auto r = Wait<v1::UntagVMResponse>(
      [&](auto done) { state_->vms.UntagVm(request, kTester, std::move(done)); });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  v1::GetVMRequest get;
  get.set_vm_id("vm-nope");
  EXPECT_EQ(state_->vms.GetVm(get).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DesiredStateTest, ReportPlacesTaggedVmsAndTagWaitsForAReport) {
  ASSERT_OK(Register("host-a"));
  ASSERT_OK(Tag("vm-1"));  // tagged before any agent reports it
  auto first = state_->watches.FirstWatchMessage("host-a", 0);
  ASSERT_OK(first);
  EXPECT_EQ(first->kind(), v1::WatchAssignmentsResponse::KIND_SNAPSHOT);
  EXPECT_EQ(first->assignments_size(), 0);
  int64_t seen = first->revision();

  ASSERT_OK(Report("host-a", {{"vm-1", ""}}));
  auto update = state_->watches.WatchUpdate("host-a", seen);
  ASSERT_OK(update);
  ASSERT_TRUE(update->has_value());
  ASSERT_EQ((*update)->assignments_size(), 1);
  EXPECT_EQ((*update)->assignments(0).vm_id(), "vm-1");
  seen = (*update)->revision();

  // A VM reported before it is tagged is sent as soon as it is tagged.
  ASSERT_OK(Report("host-a", {{"vm-1", ""}, {"vm-2", ""}}));
  ASSERT_OK(Tag("vm-2"));
  update = state_->watches.WatchUpdate("host-a", seen);
  ASSERT_TRUE(update.ok() && update->has_value());
  ASSERT_EQ((*update)->assignments_size(), 1);
  EXPECT_EQ((*update)->assignments(0).vm_id(), "vm-2");
}

TEST_F(DesiredStateTest, VmTaggedByUuidIsMatched) {
  ASSERT_OK(Register("host-a"));
  const std::string uuid = "550e8400-e29b-41d4-a716-446655440000";
  ASSERT_OK(Tag(uuid));
  ASSERT_OK(Report("host-a", {{"instance-7", uuid}}));
  auto snapshot = state_->watches.FirstWatchMessage("host-a", 0);
  ASSERT_OK(snapshot);
  ASSERT_EQ(snapshot->assignments_size(), 1);
  EXPECT_EQ(snapshot->assignments(0).vm_id(), uuid);
}

TEST_F(DesiredStateTest, MigrationMovesTheAssignment) {
  ASSERT_OK(Register("host-a"));
  ASSERT_OK(Register("host-b"));
  ASSERT_OK(Tag("vm-1"));
  ASSERT_OK(Report("host-a", {{"vm-1", ""}}));
  int64_t before = store_->CurrentRevision();
  // Live migration: both hosts run it for a while, then the source stops.
  ASSERT_OK(Report("host-b", {{"vm-1", ""}}));
  ASSERT_OK(Report("host-a", {}));
  auto a = state_->watches.WatchUpdate("host-a", before);
  auto b = state_->watches.WatchUpdate("host-b", before);
  ASSERT_TRUE(a.ok() && b.ok() && a->has_value() && b->has_value());
  EXPECT_EQ((*a)->removed_vm_ids_size(), 1);
  EXPECT_EQ((*b)->assignments_size(), 1);
  v1::GetVMRequest get;
  get.set_vm_id("vm-1");
  EXPECT_EQ(state_->vms.GetVm(get)->host_id(), "host-b");
}

TEST_F(DesiredStateTest, UntagSendsARemoval) {
  ASSERT_OK(Register("host-a"));
  ASSERT_OK(Tag("vm-1"));
  ASSERT_OK(Report("host-a", {{"vm-1", ""}}));
  int64_t before = store_->CurrentRevision();
  v1::UntagVMRequest untag;
  untag.set_vm_id("vm-1");
  auto r = Wait<v1::UntagVMResponse>(
      [&](auto done) { state_->vms.UntagVm(untag, kTester, std::move(done)); });
  ASSERT_OK(r);
  EXPECT_GT(r->revision(), before);
  auto update = state_->watches.WatchUpdate("host-a", before);
  ASSERT_TRUE(update.ok() && update->has_value());
  ASSERT_EQ((*update)->removed_vm_ids_size(), 1);
  EXPECT_EQ((*update)->removed_vm_ids(0), "vm-1");
}

TEST_F(DesiredStateTest, ResumeFromCurrentRevisionIsAnEmptyDelta) {
  ASSERT_OK(Register("host-a"));
  ASSERT_OK(Tag("vm-1"));
  ASSERT_OK(Report("host-a", {{"vm-1", ""}}));
  int64_t now = store_->CurrentRevision();
  auto first = state_->watches.FirstWatchMessage("host-a", now);
  ASSERT_OK(first);
  EXPECT_EQ(first->kind(), v1::WatchAssignmentsResponse::KIND_DELTA);
  EXPECT_EQ(first->assignments_size(), 0);
  // A revision from the future (another store?) gets a snapshot.
  auto future = state_->watches.FirstWatchMessage("host-a", now + 1000);
  ASSERT_OK(future);
  EXPECT_EQ(future->kind(), v1::WatchAssignmentsResponse::KIND_SNAPSHOT);
  EXPECT_EQ(future->assignments_size(), 1);
}

TEST_F(DesiredStateTest, ReportFromUnregisteredHostIsRefused) {
  auto s = Report("host-x", {{"vm-1", ""}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("Register"), std::string::npos);
}

TEST_F(DesiredStateTest, ListVmsPagesAndFilters) {
  for (int i = 0; i < 25; ++i) {
    ASSERT_OK(Tag("vm-" + std::to_string(100 + i), i % 2 ? "odd" : "even"));
  }
  v1::ListVMsRequest request;
  request.set_page_size(10);
  std::vector<std::string> ids;
  do {
    auto page = state_->vms.ListVms(request);
    ASSERT_OK(page);
    for (const auto& vm : page->vms()) ids.push_back(vm.vm_id());
    request.set_page_token(page->next_page_token());
  } while (!request.page_token().empty());
  EXPECT_EQ(ids.size(), 25u);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));

  v1::ListVMsRequest odd;
  odd.set_tenant_id("odd");
  auto page = state_->vms.ListVms(odd);
  ASSERT_OK(page);
  EXPECT_EQ(page->vms_size(), 12);
  EXPECT_TRUE(page->next_page_token().empty());
}

TEST_F(DesiredStateTest, FullLastPageHasNoNextToken) {
  for (int i = 0; i < 20; ++i) ASSERT_OK(Tag("vm-" + std::to_string(100 + i)));
  v1::ListVMsRequest request;
  request.set_page_size(10);
  auto first = state_->vms.ListVms(request);
  ASSERT_OK(first);
  EXPECT_EQ(first->vms_size(), 10);
  ASSERT_FALSE(first->next_page_token().empty());
  request.set_page_token(first->next_page_token());
  auto second = state_->vms.ListVms(request);
  ASSERT_OK(second);
  EXPECT_EQ(second->vms_size(), 10);
  EXPECT_TRUE(second->next_page_token().empty());
  // The largest page the API allows is served whole.
  v1::ListVMsRequest big;
  big.set_page_size(1000);
  auto all = state_->vms.ListVms(big);
  ASSERT_OK(all);
  EXPECT_EQ(all->vms_size(), 20);
}

// A one-second window ending a few seconds ago in which `vm_id` ran 100 ns.
v1::StatsWindow RecentWindow(int64_t end_ago_s, const std::string& vm_id) {
  const int64_t now = absl::ToUnixNanos(absl::Now());
  v1::StatsWindow w;
  w.set_end_unix_ns(now - end_ago_s * 1000000000LL);
  w.set_start_unix_ns(w.end_unix_ns() - 1000000000LL);
  auto* vm = w.add_vms();
  vm->set_vm_id(vm_id);
  vm->mutable_share()->set_run_ns(100);
  vm->mutable_share()->set_idle_ns(100);
  return w;
}

TEST_F(DesiredStateTest, StatsOfAVmTaggedByUuidCountForItsTenantAsTaggedNow) {
  const std::string uuid = "4a3c0f0e-3f6b-4d1e-9c1a-0d2a5b7c9e11";
  ASSERT_OK(Tag(uuid, "acme"));
  ASSERT_OK(Register("host-a"));
  v1::ReportRequest report;
  report.set_host_id("host-a");
  auto* o = report.add_vms();
  o->set_vm_id("instance-1");
  o->set_uuid(uuid);
  *report.add_stats() = RecentWindow(5, "instance-1");
  ASSERT_TRUE(Wait<v1::ReportResponse>([&](auto done) {
                state_->reports.ApplyReport(report, std::move(done));
              }).ok());

  v1::GetStatsRequest by_vm;
  by_vm.set_vm_id(uuid);
  auto r = state_->stats_queries.GetStats(by_vm);
  ASSERT_OK(r);
  ASSERT_EQ(r->vms_size(), 1);
  EXPECT_EQ(r->vms(0).vm_id(), uuid);
  EXPECT_EQ(r->total().idle_ns(), 100);

  v1::GetStatsRequest by_tenant;
  by_tenant.set_tenant("acme");
  by_tenant.set_window_seconds(60);
  r = state_->stats_queries.GetStats(by_tenant);
  ASSERT_OK(r);
  EXPECT_EQ(r->total().run_ns(), 100);

  // Retagged for another tenant: its recent history goes with it.
  ASSERT_TRUE(Wait<v1::UntagVMResponse>([&](auto done) {
                v1::UntagVMRequest untag;
                untag.set_vm_id(uuid);
                state_->vms.UntagVm(untag, kTester, std::move(done));
              }).ok());
  ASSERT_OK(Tag(uuid, "globex"));
  EXPECT_EQ(state_->stats_queries.GetStats(by_tenant).status().code(), absl::StatusCode::kNotFound);
  by_tenant.set_tenant("globex");
  r = state_->stats_queries.GetStats(by_tenant);
  ASSERT_OK(r);
  EXPECT_EQ(r->total().run_ns(), 100);
}

// Issue #36 item 3: a VM deleted and untagged (as a control plane does)
// leaves csd's memory minutes later, not a day, and its figures stay in
// its tenant's: through Reports and csd's store, as csd runs it.
TEST(StatsOfGoneVmsTest, ADeletedAndUntaggedVmStaysInItsTenantsFiguresAsGone) {
  cosched::testing::TempDir dir;
  std::atomic<int64_t> later{0};
  testing::SqliteTestState sqlite(dir.Sub("data"), [&later] {
    return absl::ToUnixNanos(absl::Now()) + later.load();
  });
  TestState& state = *sqlite.state();
  for (const char* vm : {"vm-1", "vm-2"}) {
    v1::TagVMRequest tag;
    tag.set_vm_id(vm);
    tag.set_tenant_id("acme");
    ASSERT_OK(Wait<v1::TagVMResponse>(
        [&](auto done) { state.vms.TagVm(tag, kTester, std::move(done)); }));
  }
  ASSERT_OK(sqlite.RegisterHost("host-a", kTester));
  auto report = [&](std::vector<std::string> vms, bool with_window) {
    v1::ReportRequest r;
    r.set_host_id("host-a");
    for (const std::string& vm : vms) r.add_vms()->set_vm_id(vm);
    if (with_window) {
      v1::StatsWindow w = RecentWindow(5, vms[0]);
      for (size_t i = 1; i < vms.size(); ++i) {
        v1::VMStats* v = w.add_vms();
        *v->mutable_share() = w.vms(0).share();
        v->set_vm_id(vms[i]);
      }
      // The window is the stats clock's, not the system's.
      w.set_end_unix_ns(w.end_unix_ns() + later.load());
      w.set_start_unix_ns(w.start_unix_ns() + later.load());
      *r.add_stats() = w;
    }
    return Wait<v1::ReportResponse>(
        [&](auto done) { state.reports.ApplyReport(r, std::move(done)); }).status();
  };
  ASSERT_OK(report({"vm-1", "vm-2"}, true));
  later += 61 * kNsPerSecondForTest;  // a round: csd learns their tenant
  ASSERT_OK(report({"vm-1", "vm-2"}, false));

  // vm-2 deleted: its host stops reporting it, the control plane untags it.
  ASSERT_OK(report({"vm-1"}, false));
  v1::UntagVMRequest untag;
  untag.set_vm_id("vm-2");
  ASSERT_OK(Wait<v1::UntagVMResponse>(
      [&](auto done) { state.vms.UntagVm(untag, kTester, std::move(done)); }));
  EXPECT_EQ(state.stats.own.VmSeriesCount(), 2u);
  later += 3 * 60 * kNsPerSecondForTest;
  ASSERT_OK(report({"vm-1"}, false));
  EXPECT_EQ(state.stats.own.FoldedSeriesCount(), 1u);
  EXPECT_EQ(state.stats.own.VmSeriesCount(), 1u) << "vm-1 is still reported";

  v1::GetStatsRequest by_tenant;
  by_tenant.set_tenant("acme");
  by_tenant.set_window_seconds(3600);
  auto r = state.stats_queries.GetStats(by_tenant);
  ASSERT_OK(r);
  EXPECT_EQ(r->total().run_ns(), 200);
  EXPECT_EQ(r->gone_vms().run_ns(), 100);
  ASSERT_EQ(r->vms_size(), 1);
  EXPECT_EQ(r->vms(0).vm_id(), "vm-1");
  // The VM itself is no subject any more.
  v1::GetStatsRequest by_vm;
  by_vm.set_vm_id("vm-2");
  by_vm.set_window_seconds(3600);
  EXPECT_EQ(state.stats_queries.GetStats(by_vm).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DesiredStateTest, ReportWithACoreBeyondTheRegisteredTopologyIsRefusedWhole) {
  ASSERT_OK(Register("host-a"));  // one core: index 0
  v1::ReportRequest report;
  report.set_host_id("host-a");
  report.add_vms()->set_vm_id("vm-1");
  v1::StatsWindow window = RecentWindow(5, "vm-1");
  window.add_cores()->set_core(0);
  window.add_cores()->set_core(1);
  *report.add_stats() = window;
  auto refused = Wait<v1::ReportResponse>(
      [&](auto done) { state_->reports.ApplyReport(report, std::move(done)); });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "stats[0].cores[1].core is 1; it must index the host's registered "
                "topology, which has 1 cores"),
            std::string::npos)
      << refused.status();
  // Nothing of it was taken: not its VMs, not its stats.
  v1::GetHostRequest get;
  get.set_host_id("host-a");
  auto host = state_->hosts.GetHost(get);
  ASSERT_OK(host);
  EXPECT_EQ(host->vm_count(), 0);
  v1::GetStatsRequest by_vm;
  by_vm.set_vm_id("vm-1");
  EXPECT_EQ(state_->stats_queries.GetStats(by_vm).status().code(), absl::StatusCode::kNotFound);

  // The same window within the topology is taken.
  report.mutable_stats(0)->mutable_cores()->RemoveLast();
  EXPECT_TRUE(Wait<v1::ReportResponse>([&](auto done) {
                state_->reports.ApplyReport(report, std::move(done));
              }).ok());
  host = state_->hosts.GetHost(get);
  ASSERT_OK(host);
  EXPECT_EQ(host->vm_count(), 1);
  EXPECT_OK(state_->stats_queries.GetStats(by_vm));
}

std::vector<v1::AuditRecord> AuditOf(TestState& state,
                                     const std::string& subject = "") {
  v1::ListAuditRecordsRequest request;
  request.set_subject(subject);
  request.set_page_size(1000);
  auto page = state.audit.ListAuditRecords(request);
  EXPECT_OK(page);
  return {page->records().begin(), page->records().end()};
}

TEST_F(DesiredStateTest, ChangesAreAuditedWithWhoBeforeAndAfter) {
  ASSERT_OK(Tag("vm-1", "acme", v1::ISOLATION_LEVEL_VM));
  ASSERT_OK(Tag("vm-1", "acme", v1::ISOLATION_LEVEL_VM));  // no change
  auto retag = Tag("vm-1", "acme", v1::ISOLATION_LEVEL_TENANT);
  ASSERT_OK(retag);
  auto records = AuditOf(*state_, "vm-1");
  ASSERT_EQ(records.size(), 2u);  // newest first; the no-op left none
  EXPECT_EQ(records[0].method(), "TagVM");
  EXPECT_EQ(records[0].who(), kTester.who);
  EXPECT_EQ(records[0].role(), "admin");
  EXPECT_EQ(records[0].revision(), retag->vm().assignment().revision());
  EXPECT_NE(records[0].before().find("ISOLATION_LEVEL_VM"), std::string::npos);
  EXPECT_NE(records[0].after().find("ISOLATION_LEVEL_TENANT"), std::string::npos);
  EXPECT_EQ(records[1].before(), "");
  EXPECT_GT(records[0].sequence(), records[1].sequence());

  v1::UntagVMRequest untag;
  untag.set_vm_id("vm-1");
  auto removed = Wait<v1::UntagVMResponse>(
      [&](auto done) { state_->vms.UntagVm(untag, kTester, std::move(done)); });
  ASSERT_OK(removed);
  records = AuditOf(*state_, "vm-1");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].method(), "UntagVM");
  EXPECT_NE(records[0].before(), "");
  EXPECT_EQ(records[0].after(), "");
  EXPECT_EQ(records[0].revision(), removed->revision());

  v1::SetTenantPolicyRequest set;
  set.mutable_policy()->set_tenant_id("acme");
  set.mutable_policy()->set_default_isolation(v1::ISOLATION_LEVEL_TENANT);
  ASSERT_TRUE(Wait<v1::TenantPolicy>([&](auto done) {
                state_->policies.SetTenantPolicy(set, kTester, std::move(done));
              }).ok());
  records = AuditOf(*state_, "acme");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].method(), "SetTenantPolicy");
  EXPECT_EQ(records[0].before(), "");
  EXPECT_NE(records[0].after().find("ISOLATION_LEVEL_TENANT"), std::string::npos);
}

TEST_F(DesiredStateTest, OnlyANewHostsRegistrationIsAudited) {
  ASSERT_OK(Register("host-a"));
  ASSERT_OK(Register("host-a"));
  auto records = AuditOf(*state_, "host-a");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].method(), "Register");
  EXPECT_NE(records[0].after().find("host-a"), std::string::npos);
}

TEST_F(DesiredStateTest, RefusedChangeLeavesNoAuditRecord) {
  ASSERT_OK(Tag("vm-1", "a"));
  EXPECT_EQ(Tag("vm-1", "b").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(AuditOf(*state_).size(), 1u);
}

TEST_F(DesiredStateTest, ChangeWhoseAuditRecordFailsIsNotWritten) {
  // An actor without a name cannot be audited: the store refuses the record,
  // and the VM must not be tagged without it.
  v1::TagVMRequest request;
  request.set_vm_id("vm-unaudited");
  auto tagged = Wait<v1::TagVMResponse>([&](auto done) {
    state_->vms.TagVm(request, Actor{"", "admin"}, std::move(done));
  });
  EXPECT_EQ(tagged.status().code(), absl::StatusCode::kInvalidArgument);
  v1::GetVMRequest get;
  get.set_vm_id("vm-unaudited");
  EXPECT_EQ(state_->vms.GetVm(get).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(AuditOf(*state_).empty());
}

TEST_F(DesiredStateTest, AuditRecordsPageNewestFirstAndFilterByWho) {
  for (int i = 0; i < 5; ++i) ASSERT_OK(Tag("vm-" + std::to_string(i)));
  v1::ListAuditRecordsRequest request;
  request.set_page_size(2);
  std::vector<std::string> subjects;
  do {
    auto page = state_->audit.ListAuditRecords(request);
    ASSERT_OK(page);
    for (const auto& r : page->records()) subjects.push_back(r.subject());
    request.set_page_token(page->next_page_token());
  } while (!request.page_token().empty());
  EXPECT_EQ(subjects,
            (std::vector<std::string>{"vm-4", "vm-3", "vm-2", "vm-1", "vm-0"}));

  v1::ListAuditRecordsRequest by_who;
  by_who.set_who("someone-else");
  auto none = state_->audit.ListAuditRecords(by_who);
  ASSERT_OK(none);
  EXPECT_EQ(none->records_size(), 0);
  by_who.set_who(kTester.who);
  EXPECT_EQ(state_->audit.ListAuditRecords(by_who)->records_size(), 5);

  v1::ListAuditRecordsRequest bad;
  bad.set_page_token("garbage");
  EXPECT_EQ(state_->audit.ListAuditRecords(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Issue #32 item 10: a host's topology and labels are what it says of
// itself; a change after its first Register is on record, a routine
// re-registration is not.
TEST_F(DesiredStateTest, AChangeOfAHostsTopologyOrLabelsIsAudited) {
  auto register_with = [&](std::vector<int> cpus, std::string zone, bool observe = false) {
    v1::RegisterRequest request;
    request.set_host_id("host-a");
    request.set_observe(observe);
    auto* core = request.mutable_topology()->add_cores();
    for (int cpu : cpus) core->add_cpus(cpu);
    (*request.mutable_labels())["zone"] = std::move(zone);
    return Wait<v1::RegisterResponse>([&](auto done) {
             state_->hosts.RegisterHost(request, Actor{"spiffe://test/host/host-a", "host"},
                                  std::move(done));
           }).status();
  };
  auto methods = [&] {
    v1::ListAuditRecordsRequest list;
    list.set_subject("host-a");
    auto records = state_->audit.ListAuditRecords(list);
    std::vector<std::string> out;
    if (records.ok()) {
      for (const auto& r : records->records()) out.insert(out.begin(), r.method());
    }
    return out;
  };
  ASSERT_OK(register_with({0, 1}, "a"));
  ASSERT_OK(register_with({0, 1}, "a"));
  EXPECT_EQ(methods(), std::vector<std::string>({"Register"}));
  ASSERT_OK(register_with({0, 1}, "b"));
  ASSERT_OK(register_with({0, 2}, "b"));
  EXPECT_EQ(methods(), std::vector<std::string>({"Register", "ChangeHost", "ChangeHost"}));
  // An agent that starts or stops observing (enforce: observe) is on record
  // too, and csd shows it.
  ASSERT_OK(register_with({0, 2}, "b", /*observe=*/true));
  EXPECT_EQ(methods().size(), 4u);
  v1::GetHostRequest get;
  get.set_host_id("host-a");
  absl::StatusOr<v1::Host> observing = state_->hosts.GetHost(get);
  ASSERT_OK(observing.status());
  EXPECT_TRUE(observing->agent_observes());
  v1::ListAuditRecordsRequest list;
  list.set_subject("host-a");
  auto records = state_->audit.ListAuditRecords(list);
  ASSERT_OK(records);
  const v1::AuditRecord& labels = records->records(2);  // newest first
  EXPECT_NE(labels.before().find("\"a\""), std::string::npos) << labels.before();
  EXPECT_NE(labels.after().find("\"b\""), std::string::npos) << labels.after();
}

}  // namespace
}  // namespace cosched::server
