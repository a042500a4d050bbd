// What csd replicas on one etcd prefix share besides the store's records
// (issue #16): which hosts each one's agents are connected to and report
// (the seen records, server/state/host_liveness.h), so that every replica judges
// liveness alike, the stats windows the others forward to the leader's
// policy engine (server/replicas/stats_forwarder.h), and each one's health
// for csctl status (server/replicas/peer_status.h).
#include <algorithm>

#include "common/version.h"
#include "tests/server/replicas/csd_replicas_fixture.h"

namespace cosched::server::replicas_testing {
namespace {

// A host whose agent talks to replica B is live on replica A too, past
// host_stale_after, by B's seen record (issue #16): A's Place chooses it,
// A's GetHost says it is connected, and a rollout A leads does not halt on
// it while its agent reports to B. Once that agent goes silent, A halts
// the rollout naming it, and once its stream is gone A's Place no longer
// chooses it.
TEST_F(CsdReplicasTest, AHostWhoseAgentTalksToAnotherReplicaIsLiveOnEveryReplica) {
  auto tweak = [](const std::string& name) {
    return [name](CsdOptions& options) {
      options.host_stale_after_s = 2;
      options.etcd_store->replicas.name = name;
      options.etcd_store->replicas.seen_interval = absl::Milliseconds(200);
      options.rollout.check_interval = std::chrono::seconds(1);
      options.rollout.no_report_halt = std::chrono::seconds(3);
      options.rollout.min_soak_s = 1;
    };
  };
  Replica a = Start("", tweak("csd-a"));  // leads: it campaigned first
  Replica b = Start("", tweak("csd-b"));
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  SetNewHosts(a, v1::NEW_HOSTS_WAIT_FOR_ROLLOUT);
  RegisterAndReport(b, "hv-1", {});
  std::unique_ptr<Stream> stream = Watch(b, "hv-1");
  v1::WatchAssignmentsResponse first;
  ASSERT_TRUE(stream->reader->Read(&first));
  auto report = [&b] {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(5));
    v1::ReportRequest request;
    request.set_host_id("hv-1");
    v1::ReportResponse response;
    return b.agent->Report(&context, request, &response).ok();
  };
  auto get_on_a = [&a] {
    grpc::ClientContext context;
    v1::GetHostRequest request;
    request.set_host_id("hv-1");
    v1::Host host;
    EXPECT_OK(a.control->GetHost(&context, request, &host));
    return host;
  };
  auto rollout_on_a = [&a] {
    grpc::ClientContext context;
    v1::Rollout rollout;
    EXPECT_OK(a.control->GetRollout(&context, v1::GetRolloutRequest(), &rollout));
    return rollout;
  };

  // Reporting to B every 300 ms, from well past host_stale_after.
  std::atomic<bool> reporting{true};
  std::thread agent([&] {
    while (reporting) {
      report();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  ASSERT_EQ(StartRollout(a, {100}, 3600).enabled_count(), 1);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  v1::Host host = get_on_a();
  EXPECT_TRUE(host.connected());
  EXPECT_EQ(host.connected_replica(), "csd-b");
  EXPECT_EQ(host.unplaceable_reason(), "");
  EXPECT_GT(absl::FromUnixSeconds(host.last_seen_time().seconds()),
            absl::Now() - absl::Seconds(3));
  EXPECT_EQ(PlaceOn(a), "hv-1");
  EXPECT_EQ(rollout_on_a().state(), v1::Rollout::STATE_RUNNING) << rollout_on_a().halt_reason();

  // Silent, its stream still held (a stuck agent): A halts the rollout.
  reporting = false;
  agent.join();
  EXPECT_TRUE(Eventually([&] { return rollout_on_a().state() == v1::Rollout::STATE_HALTED; },
                         std::chrono::seconds(15)));
  EXPECT_NE(rollout_on_a().halt_reason().find("host hv-1 stopped reporting"), std::string::npos)
      << rollout_on_a().halt_reason();
  // Still connected: still placeable.
  EXPECT_EQ(PlaceOn(a), "hv-1");

  // Its stream gone too: A's Place rules it out within a record or two.
  stream->context.TryCancel();
  EXPECT_TRUE(Eventually([&] { return !get_on_a().connected(); }, std::chrono::seconds(10)));
  EXPECT_EQ(get_on_a().connected_replica(), "");
  EXPECT_NE(PlaceOn(a).find("error"), std::string::npos);
}

// A Report that changes only enforcement is held by the replica that heard
// it (reports.h): that replica shows it at once, another replica shows the
// applied revision by the seen records and the VM's enforcement once the
// host's first Report enforcement_write_interval_s later has written it.
TEST_F(CsdReplicasTest, AnotherReplicaSeesHeldEnforcementWithinItsBounds) {
  auto tweak = [](const std::string& name) {
    return [name](CsdOptions& options) {
      options.etcd_store->replicas.name = name;
      options.etcd_store->replicas.seen_interval = absl::Milliseconds(200);
      options.enforcement_write_interval_s = 2;
    };
  };
  Replica a = Start("", tweak("csd-a"));
  Replica b = Start("", tweak("csd-b"));
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  v1::TagVMResponse tagged;
  ASSERT_OK(Tag(a, "vm-1", &tagged));
  RegisterAndReport(b, "hv-1", {"vm-1"});  // vm-1 in no state yet: written
  auto report = [&b](v1::EnforcementState state, int64_t applied) {
    ReportEnforcement(b, "hv-1", "vm-1", state, applied);
  };
  auto vm_on = [](Replica& r) { return GetVmOn(r, "vm-1"); };
  auto applied_on = [](Replica& r) {
    grpc::ClientContext context;
    v1::GetHostRequest request;
    request.set_host_id("hv-1");
    v1::Host host;
    EXPECT_OK(r.control->GetHost(&context, request, &host));
    return host.applied_revision();
  };
  const int64_t revision = tagged.vm().assignment().revision();
  const absl::Time enforced = absl::Now();
  report(v1::ENFORCEMENT_STATE_ENFORCED, revision);
  EXPECT_EQ(vm_on(b).enforcement().state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_EQ(applied_on(b), revision);
  EXPECT_TRUE(Eventually([&] { return applied_on(a) == revision; }, std::chrono::seconds(5)));
  // Not written yet: A shows what the store has.
  ASSERT_EQ(vm_on(a).vm_id(), "vm-1");
  EXPECT_EQ(vm_on(a).enforcement().state(), v1::ENFORCEMENT_STATE_UNSPECIFIED);

  // The agent goes on reporting the same: its first Report 2 s after the
  // change writes it.
  EXPECT_TRUE(Eventually(
      [&] {
        report(v1::ENFORCEMENT_STATE_ENFORCED, revision);
        return vm_on(a).enforcement().state() == v1::ENFORCEMENT_STATE_ENFORCED;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(300)));
  EXPECT_GE(absl::Now() - enforced, absl::Seconds(2));
}

// A tag on replica A of a VM a host reports to replica B costs one write:
// B learns of it through the watch, and its agent's next Report, which
// says it enforces the VM, is held by B, not written (so A still shows
// what the store had).
TEST_F(CsdReplicasTest, AnotherReplicasTagDoesNotMakeTheHostsReportAWrite) {
  auto tweak = [](const std::string& name) {
    return [name](CsdOptions& options) {
      options.etcd_store->replicas.name = name;
      options.enforcement_write_interval_s = 3600;
    };
  };
  Replica a = Start("", tweak("csd-a"));
  Replica b = Start("", tweak("csd-b"));
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  RegisterAndReport(b, "hv-1", {"vm-1"});  // untagged yet: written
  v1::TagVMResponse tagged;
  ASSERT_OK(Tag(a, "vm-1", &tagged));
  auto vm_on = [](Replica& r) { return GetVmOn(r, "vm-1"); };
  ASSERT_TRUE(Eventually([&] { return vm_on(b).host_id() == "hv-1"; }));
  for (int i = 0; i < 3; ++i) {
    ReportEnforcement(b, "hv-1", "vm-1", v1::ENFORCEMENT_STATE_ENFORCED,
                      tagged.vm().assignment().revision());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(vm_on(b).enforcement().state(), v1::ENFORCEMENT_STATE_ENFORCED);
  ASSERT_EQ(vm_on(a).vm_id(), "vm-1");
  EXPECT_EQ(vm_on(a).enforcement().state(), v1::ENFORCEMENT_STATE_UNSPECIFIED)
      << "B wrote its host's Report after A's tag";
}

// The policy engine runs on the leader, and an agent reports to one
// replica: B forwards its agents' windows to the leader A (Replica.
// ForwardStats), so A's engine and ExplainVM see the load of a host whose
// agent talks to B, while GetStats still counts each window once.
TEST_F(CsdReplicasTest, TheLeadersEngineSeesTheLoadOfHostsWhoseAgentsTalkToAnotherReplica) {
  // The leader takes B's windows of host-b once B's record of the hosts it
  // hears says so (B sends them again until then): records every 200 ms.
  auto often = [](CsdOptions& o) { o.etcd_store->replicas.seen_interval = absl::Milliseconds(200); };
  Replica a = Start("", often);  // leads: it campaigned first
  Replica b = Start("", often);
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  v1::TagVMResponse tagged;
  ASSERT_OK(Tag(a, "vm-b", &tagged));
  RegisterAndReport(b, "host-b", {"vm-b"});
  ReportWindow(b, "host-b", "vm-b", 500);

  v1::ExplainVMResponse explained;
  EXPECT_TRUE(Eventually([&] {
    explained.Clear();
    return Explain(a, "vm-b", &explained).ok() && explained.measured().windows() == 1;
  }, std::chrono::seconds(15))) << explained.DebugString();
  EXPECT_GT(explained.load(), 0);
  EXPECT_GT(explained.measured().throughput(), 0);

  // Fleet-wide GetStats on A: B's window once, from B's answer.
  v1::GetStatsRequest vm_b;
  vm_b.set_vm_id("vm-b");
  v1::GetStatsResponse stats;
  ASSERT_OK(Stats(a, vm_b, &stats));
  EXPECT_EQ(stats.windows(), 1);
  EXPECT_EQ(stats.total().run_ns(), 500000000);
  // A's own agents have none of it.
  vm_b.set_local_only(true);
  EXPECT_EQ(Stats(a, vm_b, &stats).error_code(), grpc::StatusCode::NOT_FOUND);
}

// ExplainVM and Plan rest on every replica's agents' stats and on the
// engine's record of the plans it applied, and the leader alone has both:
// a replica that does not lead answers them with the leader's answer;
// local_only gives its own.
TEST_F(CsdReplicasTest, ExplainAndPlanOnAReplicaThatDoesNotLeadAreTheLeaders) {
  Replica a = Start();  // leads
  Replica b = Start();
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  ASSERT_OK(SetAutoPolicy(a, "acme"));
  // As in OnlyTheLeaderRunsTheEngine: acme sharing a cookie pays. The
  // host's agent talks to a, so its windows are a's alone (only the
  // leader is forwarded any).
  const std::vector<std::string> vms = {"a-1", "a-2", "a-3", "g-1", "g-2"};
  ASSERT_NO_FATAL_FAILURE(RegisterAndReport(a, "h1", vms, 1));
  for (const char* vm : {"a-1", "a-2", "a-3"}) ASSERT_OK(TagForEngine(a, vm));
  for (const char* vm : {"g-1", "g-2"}) ASSERT_OK(TagForEngine(a, vm, "globex"));
  ASSERT_TRUE(Eventually([&] { return DecidedByEngine(b, "a-1"); }, seconds(10)));
  // A window that begins after the plan (ReportWindow's begins 2 s before
  // it is sent), so that the plan's report counts it.
  std::this_thread::sleep_for(seconds(3));
  ASSERT_NO_FATAL_FAILURE(ReportWindow(a, "h1", "a-1", 500));

  v1::ExplainVMResponse on_b;
  EXPECT_TRUE(Eventually([&] {
    on_b.Clear();
    return Explain(b, "a-1", &on_b).ok() && on_b.measured().windows() == 1;
  })) << on_b.DebugString();
  EXPECT_EQ(on_b.decision().decided_by(), v1::DECIDED_BY_ENGINE);
  EXPECT_EQ(on_b.host_plan().since().windows(), 1) << on_b.DebugString();
  // b's own agents sent none of it.
  v1::ExplainVMResponse local;
  ASSERT_OK(Explain(b, "a-1", &local, /*local_only=*/true));
  EXPECT_EQ(local.measured().windows(), 0);
  EXPECT_EQ(local.host_plan().since().windows(), 0);
  // The leader's own errors come back as they are.
  EXPECT_EQ(Explain(b, "never-tagged", &local).error_code(), grpc::StatusCode::NOT_FOUND);

  v1::PlanResponse report_a, report_b, report_b_local;
  ASSERT_OK(PlanReport(a, &report_a));
  ASSERT_OK(PlanReport(b, &report_b));
  ASSERT_OK(PlanReport(b, &report_b_local, /*local_only=*/true));
  ASSERT_EQ(report_a.reports_size(), 1) << report_a.DebugString();
  EXPECT_EQ(report_a.reports(0).since().windows(), 1) << report_a.DebugString();
  EXPECT_EQ(report_b.DebugString(), report_a.DebugString());
  ASSERT_EQ(report_b_local.reports_size(), 1) << report_b_local.DebugString();
  EXPECT_EQ(report_b_local.reports(0).since().windows(), 0) << report_b_local.DebugString();
}

// A replica that cannot ask the leader says so, naming the leader and
// why, and still answers from its own state when asked to.
TEST_F(CsdReplicasTest, AReplicaThatCannotAskTheLeaderSaysWhy) {
  // a listens on a wildcard address and advertises none.
  Replica a = Start("", [](CsdOptions& options) {
    options.listen = "0.0.0.0:0";
    options.insecure = true;  // plaintext beyond loopback, as the wildcard is
    // With insecure, plaintext callers may be at most viewers.
    options.authz.plaintext_role = "viewer";
  });
  Replica b = Start();
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  ASSERT_TRUE(a.csd->leads());
  v1::TagVMResponse tagged;
  ASSERT_OK(Tag(b, "vm-1", &tagged));
  ASSERT_NO_FATAL_FAILURE(RegisterAndReport(b, "h1", {"vm-1"}));

  v1::ExplainVMResponse explained;
  grpc::Status refused = Explain(b, "vm-1", &explained);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("does not lead and asks the leader"), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("registered no address"), std::string::npos)
      << refused.error_message();
  v1::PlanResponse plan;
  EXPECT_EQ(PlanReport(b, &plan).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_OK(Explain(b, "vm-1", &explained, /*local_only=*/true));
  EXPECT_EQ(explained.host_id(), "h1");
}

// Replica.ForwardStats is refused by a replica that does not lead (naming
// the leader), and checks what it is given, naming the field.
TEST_F(CsdReplicasTest, ForwardStatsIsTheLeadersAndChecksItsInput) {
  Replica a = Start();
  Replica b = Start();
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  auto forward = [](Replica& r, const v1::ForwardStatsRequest& request) {
    auto stub = v1::Replica::NewStub(
        grpc::CreateChannel(r.csd->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    v1::ForwardStatsResponse response;
    return stub->ForwardStats(&context, request, &response);
  };
  v1::ForwardStatsRequest request;
  request.set_replica("test");
  v1::ForwardedStats* report = request.add_reports();
  report->set_host_id("hv-1");
  v1::StatsWindow* window = report->add_stats();
  window->set_end_unix_ns(absl::ToUnixNanos(absl::Now()));
  window->set_start_unix_ns(window->end_unix_ns() - 1000000000);
  EXPECT_OK(forward(a, request));
  grpc::Status refused = forward(b, request);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("this replica does not lead"), std::string::npos)
      << refused.error_message();

  report->set_host_id("bad host");
  grpc::Status bad = forward(a, request);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("reports[0].host_id"), std::string::npos)
      << bad.error_message();
  report->set_host_id("hv-1");
  window->set_start_unix_ns(window->end_unix_ns() + 1);
  bad = forward(a, request);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("reports[0].stats[0]"), std::string::npos)
      << bad.error_message();
}

// csctl status's answer (GetStatus): the replica asked, then every other
// by name, exactly one of them leading; one that cannot be asked is listed
// with why, not left out.
TEST_F(CsdReplicasTest, StatusListsEveryReplicaAndNamesOneThatCannotBeAsked) {
  Replica a = Start();
  Replica b = Start();
  // c listens on a wildcard address and advertises none.
  Replica c = Start("", [](CsdOptions& options) {
    options.listen = "0.0.0.0:0";
    options.insecure = true;
    options.authz.plaintext_role = "viewer";
  });
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  ASSERT_NE(c.csd, nullptr);
  ASSERT_TRUE(a.csd->leads());
  v1::TagVMResponse tagged;
  ASSERT_OK(Tag(a, "vm-1", &tagged));

  // A replica registers its address at its campaign's next round.
  v1::GetStatusResponse status;
  ASSERT_TRUE(Eventually([&] {
    grpc::ClientContext context;
    status.Clear();
    if (!b.control->GetStatus(&context, v1::GetStatusRequest(), &status).ok()) return false;
    return std::count_if(status.replicas().begin(), status.replicas().end(),
                         [](const v1::ReplicaStatus& r) { return !r.unreachable().empty(); }) == 1;
  })) << status.DebugString();
  ASSERT_EQ(status.replicas_size(), 3) << status.DebugString();
  // b first, as it knows itself.
  const v1::ReplicaStatus& self = status.replicas(0);
  EXPECT_EQ(self.store(), "etcd");
  EXPECT_TRUE(self.store_reachable());
  EXPECT_FALSE(self.leader());
  EXPECT_EQ(self.version(), CoschedVersion());
  EXPECT_TRUE(self.unreachable().empty());
  EXPECT_TRUE(self.has_started_time());
  int leaders = 0;
  int unreachable = 0;
  for (const v1::ReplicaStatus& r : status.replicas()) {
    EXPECT_FALSE(r.name().empty());
    if (r.leader()) {
      ++leaders;
      EXPECT_GT(r.revision(), 0) << r.name();
      EXPECT_EQ(r.version(), CoschedVersion());
    }
    if (!r.unreachable().empty()) {
      ++unreachable;
      EXPECT_NE(r.unreachable().find("registered no address"), std::string::npos)
          << r.unreachable();
      EXPECT_TRUE(r.version().empty());
    }
  }
  EXPECT_EQ(leaders, 1) << status.DebugString();
  EXPECT_EQ(unreachable, 1);
  // The others are listed by name.
  EXPECT_LT(status.replicas(1).name(), status.replicas(2).name());

  // local_only: the replica asked, alone.
  grpc::ClientContext local_context;
  v1::GetStatusRequest local;
  local.set_local_only(true);
  v1::GetStatusResponse own;
  ASSERT_OK(a.control->GetStatus(&local_context, local, &own));
  ASSERT_EQ(own.replicas_size(), 1);
  EXPECT_TRUE(own.replicas(0).leader());
}

}  // namespace
}  // namespace cosched::server::replicas_testing
