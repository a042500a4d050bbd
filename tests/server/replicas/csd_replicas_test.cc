// Every csd replica serves every RPC (issue #16, part 2): two csd replicas
// on one real etcd member, where what one commits reaches the other's
// placement view and the agents streaming from it, once and at etcd's
// revision, also across a compaction and an etcd restart, with gRPC health
// saying when the store is away, and writes failing fast once etcd is gone.
// And only one of them, the leader, runs the policy engine (part 3), until
// it stops and the other takes over; and GetStats on any replica gathers
// every replica's agents (part 4). What replicas share besides the store's
// records (liveness, forwarded stats) is in csd_replicas_shared_test.cc.
#include "tests/server/replicas/csd_replicas_fixture.h"

namespace cosched::server::replicas_testing {
namespace {

// A tag on replica A reaches an agent streaming from replica B: once, at
// the revision A's commit has in etcd.
TEST_F(CsdReplicasTest, AnotherReplicasTagReachesAStreamOnceAtItsRevision) {
  Replica a = Start();
  Replica b = Start();
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  RegisterAndReport(b, "h1", {"vm-1", "vm-2"});
  auto stream = Watch(b, "h1");
  v1::WatchAssignmentsResponse message;
  ASSERT_TRUE(stream->reader->Read(&message));
  EXPECT_EQ(message.kind(), v1::WatchAssignmentsResponse::KIND_SNAPSHOT);
  EXPECT_EQ(message.assignments_size(), 0);

  v1::TagVMResponse tagged;
  ASSERT_OK(Tag(a, "vm-1", &tagged));
  ASSERT_EQ(tagged.vm().host_id(), "h1");
  ASSERT_TRUE(stream->reader->Read(&message));
  EXPECT_EQ(message.kind(), v1::WatchAssignmentsResponse::KIND_DELTA);
  ASSERT_EQ(message.assignments_size(), 1);
  EXPECT_EQ(message.assignments(0).vm_id(), "vm-1");
  EXPECT_EQ(message.revision(), tagged.vm().assignment().revision());
  EXPECT_EQ(message.revision(), a.csd->revision());

  // The next message has the next tag only: vm-1 is not sent again.
  v1::TagVMResponse second;
  ASSERT_OK(Tag(a, "vm-2", &second));
  ASSERT_TRUE(stream->reader->Read(&message));
  ASSERT_EQ(message.assignments_size(), 1);
  EXPECT_EQ(message.assignments(0).vm_id(), "vm-2");
  EXPECT_EQ(message.revision(), second.vm().assignment().revision());
  // Both replicas are at the same revision.
  EXPECT_TRUE(Eventually([&] { return b.csd->revision() == a.csd->revision(); }));
  stream->context.TryCancel();
}

// Place on B answers from B's view, which A's tag and untag change.
TEST_F(CsdReplicasTest, PlaceOnOneReplicaSeesAnotherReplicasWrites) {
  Replica a = Start();
  Replica b = Start();
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  RegisterAndReport(a, "h1", {"vm-1"});
  RegisterAndReport(a, "h2", {});
  // Two empty hosts: B learns of both from A's writes.
  ASSERT_TRUE(Eventually([&] {
    const std::string host = PlaceOn(b);
    return host == "h1" || host == "h2";
  })) << PlaceOn(b);
  v1::TagVMResponse tagged;
  ASSERT_OK(Tag(a, "vm-1", &tagged));
  // vm-1's two busy vCPUs on h1: the new VM is placed on h2.
  EXPECT_TRUE(Eventually([&] { return PlaceOn(b) == "h2"; })) << PlaceOn(b);

  // Untagged on A: h1 is free again on B (h1 first of two equal hosts).
  grpc::ClientContext context;
  v1::UntagVMRequest untag;
  untag.set_vm_id("vm-1");
  v1::UntagVMResponse untagged;
  ASSERT_OK(a.control->UntagVM(&context, untag, &untagged));
  EXPECT_TRUE(Eventually([&] { return PlaceOn(b) == PlaceOn(a); }));
}

// A rollout started on replica A reaches replica B through its watch: B
// answers its agents' Reports with what the rollout says of each host.
TEST_F(CsdReplicasTest, ARolloutStartedOnOneReplicaDecidesAnotherReplicasAnswers) {
  Replica a = Start();
  Replica b = Start();
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  // Hosts that wait for a rollout, set through A and followed by B.
  SetNewHosts(a, v1::NEW_HOSTS_WAIT_FOR_ROLLOUT);
  for (int i = 0; i < 10; ++i) RegisterAndReport(b, absl::StrCat("h", i), {});
  auto enablement_on_b = [&](const std::string& host) {
    grpc::ClientContext context;
    v1::ReportRequest request;
    request.set_host_id(host);
    v1::ReportResponse response;
    EXPECT_OK(b.agent->Report(&context, request, &response));
    return response.enablement().state();
  };
  EXPECT_EQ(enablement_on_b("h0"), v1::HostEnablement::STATE_NOT_ENABLED);

  const v1::Rollout rollout = StartRollout(a, {10, 100}, 3600);
  ASSERT_EQ(rollout.enabled_count(), 1);
  // The host it enabled says so on its record, on either replica.
  std::string enabled;
  {
    grpc::ClientContext context;
    v1::ListHostsRequest request;
    v1::ListHostsResponse hosts;
    ASSERT_OK(b.control->ListHosts(&context, request, &hosts));
    for (const v1::Host& h : hosts.hosts()) {
      if (h.enabled_by_rollout() == rollout.rollout_id()) enabled = h.host_id();
    }
  }
  ASSERT_NE(enabled, "");
  const std::string other = enabled == "h0" ? "h1" : "h0";
  EXPECT_TRUE(Eventually([&] {
    return enablement_on_b(enabled) == v1::HostEnablement::STATE_ENFORCE;
  })) << enabled;
  EXPECT_EQ(enablement_on_b(other), v1::HostEnablement::STATE_NOT_ENABLED);

  // Aborted on B: A's status says so.
  {
    grpc::ClientContext context;
    v1::Rollout aborted;
    ASSERT_OK(b.control->AbortRollout(&context, v1::ChangeRolloutRequest(), &aborted));
  }
  grpc::ClientContext context;
  v1::Rollout seen;
  ASSERT_OK(a.control->GetRollout(&context, v1::GetRolloutRequest(), &seen));
  EXPECT_EQ(seen.state(), v1::Rollout::STATE_ABORTED);
}

// etcd compacts what B's watch had yet to read while B was cut off from
// it: B reads its views again, and its agent gets what changed (as a
// snapshot: the stream's revision is compacted away, as for an agent that
// resumes from one).
TEST_F(CsdReplicasTest, ACompactionWhileAReplicaIsBehindIsReadAgain) {
  testing::PartitionProxy proxy(EtcdPort());
  ASSERT_NE(proxy.port(), 0);
  Replica a = Start();
  // An outage shorter than end_streams_after_store_lost keeps the stream.
  Replica b = StartBehind(proxy, absl::Minutes(5));
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  RegisterAndReport(b, "h1", {"vm-1"});
  RegisterAndReport(b, "h2", {});
  auto stream = Watch(b, "h1");
  v1::WatchAssignmentsResponse message;
  ASSERT_TRUE(stream->reader->Read(&message));
  const int64_t before = message.revision();
  ASSERT_TRUE(Eventually([&] { return PlaceOn(b) == "h1"; })) << PlaceOn(b);

  proxy.Partition();
  proxy.Cut();
  ASSERT_TRUE(Eventually(
      [&] { return Health(b) == grpc::health::v1::HealthCheckResponse::NOT_SERVING; }));
  v1::TagVMResponse tagged;
  ASSERT_OK(Tag(a, "vm-1", &tagged));
  // A later write, and a compaction up to it: the revisions B's watch has
  // yet to read are gone.
  v1::TagVMResponse later;
  ASSERT_OK(Tag(a, "vm-elsewhere", &later));
  auto client = etcd::Client::Create(etcd_.ClientOptions());
  ASSERT_OK(client.status());
  ASSERT_OK((*client)->Compact(later.vm().assignment().revision()));
  proxy.Heal();

  ASSERT_TRUE(stream->reader->Read(&message));
  EXPECT_EQ(message.kind(), v1::WatchAssignmentsResponse::KIND_SNAPSHOT);
  ASSERT_EQ(message.assignments_size(), 1);
  EXPECT_EQ(message.assignments(0).vm_id(), "vm-1");
  EXPECT_GE(message.revision(), tagged.vm().assignment().revision());
  EXPECT_GT(message.revision(), before);
  EXPECT_TRUE(Eventually([&] { return PlaceOn(b) == "h2"; })) << PlaceOn(b);
  EXPECT_TRUE(Eventually(
      [&] { return Health(b) == grpc::health::v1::HealthCheckResponse::SERVING; }));
  stream->context.TryCancel();
}

// Issue #32 item 6: before, a replica cut off from etcd kept its agents'
// streams open, and they received nothing made through the other replicas
// until the link came back. Now it ends them within
// end_streams_after_store_lost (2 s here) of losing etcd; an agent that
// resumes on another replica gets what was written there.
TEST_F(CsdReplicasTest, AReplicaCutOffFromEtcdEndsItsStreamsAndTheAgentMovesOn) {
  testing::PartitionProxy proxy(EtcdPort());
  ASSERT_NE(proxy.port(), 0);
  Replica a = Start();
  Replica b = StartBehind(proxy, absl::Seconds(2));
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  RegisterAndReport(b, "h1", {"vm-1"});
  auto stream = Watch(b, "h1");
  v1::WatchAssignmentsResponse message;
  ASSERT_TRUE(stream->reader->Read(&message));
  const int64_t held = message.revision();

  proxy.Partition();
  proxy.Cut();
  const auto cut = std::chrono::steady_clock::now();
  // Nothing more comes on B's stream: it ends, naming why.
  while (stream->reader->Read(&message)) {
  }
  const grpc::Status ended = stream->reader->Finish();
  const auto took = std::chrono::steady_clock::now() - cut;
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE) << ended.error_message();
  EXPECT_NE(ended.error_message().find("cannot reach its store"), std::string::npos)
      << ended.error_message();
  // B notices within etcd's keepalive and call deadlines (a few seconds),
  // then waits its 2 s.
  EXPECT_LT(took, seconds(15));
  std::cout << "B ended its stream " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms after it was cut off from etcd\n";

  // The agent moves to A and resumes: the tag made through A reaches it.
  v1::TagVMResponse tagged;
  ASSERT_OK(Tag(a, "vm-1", &tagged));
  Stream on_a;
  on_a.context.set_deadline(system_clock::now() + seconds(30));
  v1::WatchAssignmentsRequest resume;
  resume.set_host_id("h1");
  resume.set_resume_revision(held);
  on_a.reader = a.agent->WatchAssignments(&on_a.context, resume);
  ASSERT_TRUE(on_a.reader->Read(&message));
  ASSERT_EQ(message.assignments_size(), 1);
  EXPECT_EQ(message.assignments(0).vm_id(), "vm-1");
  EXPECT_GE(message.revision(), tagged.vm().assignment().revision());
  on_a.context.TryCancel();

  // A stream that starts on B while it is still cut off ends too.
  auto again = Watch(b, "h1");
  while (again->reader->Read(&message)) {
  }
  EXPECT_EQ(again->reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  proxy.Heal();
}

// etcd restarts: B says NOT_SERVING while it is away and SERVING once its
// watch is back, and what A writes then reaches B's agent.
TEST_F(CsdReplicasTest, AfterAnEtcdRestartTheWatchResumes) {
  Replica a = Start();
  // An outage shorter than end_streams_after_store_lost keeps the stream.
  Replica b = Start("", [](CsdOptions& options) {
    options.end_streams_after_store_lost = absl::Minutes(5);
  });
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  RegisterAndReport(b, "h1", {"vm-1"});
  auto stream = Watch(b, "h1");
  v1::WatchAssignmentsResponse message;
  ASSERT_TRUE(stream->reader->Read(&message));
  EXPECT_EQ(Health(b), grpc::health::v1::HealthCheckResponse::SERVING);

  etcd_.Kill();
  EXPECT_TRUE(Eventually(
      [&] { return Health(b) == grpc::health::v1::HealthCheckResponse::NOT_SERVING; }));
  ASSERT_OK(etcd_.Restart());
  EXPECT_TRUE(Eventually(
      [&] { return Health(b) == grpc::health::v1::HealthCheckResponse::SERVING; },
      seconds(20)));

  v1::TagVMResponse tagged;
  ASSERT_TRUE(Eventually([&] { return Tag(a, "vm-1", &tagged).ok(); }, seconds(20)));
  ASSERT_TRUE(stream->reader->Read(&message));
  EXPECT_EQ(message.kind(), v1::WatchAssignmentsResponse::KIND_DELTA);
  ASSERT_EQ(message.assignments_size(), 1);
  EXPECT_EQ(message.assignments(0).vm_id(), "vm-1");
  EXPECT_EQ(message.revision(), tagged.vm().assignment().revision());
  stream->context.TryCancel();
}

// etcd gone entirely: a write fails UNAVAILABLE within a couple of seconds
// naming etcd (nothing waits forever), and health says NOT_SERVING. Reads
// of the replica's own view go on: Place (the hosts, VMs and tenant
// policies it holds, as last committed) and GetStats (its agents' windows;
// the other replicas are those it last listed). Reads of records (GetVM)
// fail as writes do.
TEST_F(CsdReplicasTest, WithEtcdGoneWritesFailFastNamingIt) {
  Replica a = Start();
  ASSERT_NE(a.csd, nullptr);
  RegisterAndReport(a, "h1", {"vm-1"});
  ReportWindow(a, "h1", "vm-1", 100);
  {
    // Tenant "other" may not use `vm`: Place must refuse it from memory.
    grpc::ClientContext context;
    v1::SetTenantPolicyRequest request;
    request.mutable_policy()->set_tenant_id("other");
    request.mutable_policy()->set_default_isolation(v1::ISOLATION_LEVEL_TENANT);
    request.mutable_policy()->add_allowed_isolation(v1::ISOLATION_LEVEL_TENANT);
    v1::TenantPolicy policy;
    ASSERT_OK(a.control->SetTenantPolicy(&context, request, &policy));
  }
  v1::GetStatsRequest vm_1;
  vm_1.set_vm_id("vm-1");
  v1::GetStatsResponse stats;
  ASSERT_OK(Stats(a, vm_1, &stats));
  EXPECT_FALSE(stats.partial());

  etcd_.Kill();
  const auto killed = std::chrono::steady_clock::now();
  v1::TagVMResponse tagged;
  grpc::Status refused = Tag(a, "vm-1", &tagged);
  const auto took = std::chrono::steady_clock::now() - killed;
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_NE(refused.error_message().find("etcd at 127.0.0.1:"), std::string::npos)
      << refused.error_message();
  // The store's etcd calls have a 2 s deadline (timeout_ms).
  EXPECT_LT(took, seconds(5));
  std::cout << "with etcd gone, TagVM failed after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
  EXPECT_TRUE(Eventually(
      [&] { return Health(a) == grpc::health::v1::HealthCheckResponse::NOT_SERVING; }));

  // The view goes on: Place answers from it, with the tenant's policy
  // (`vm` is not allowed; its default, tenant, is), and so does GetStats.
  EXPECT_EQ(PlaceOn(a), "error: isolation 'vm' is not allowed by the policy of tenant 'other' "
                        "(allowed: tenant)");
  {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(10));
    v1::PlaceRequest request;
    request.set_tenant_id("other");
    request.set_vcpus(2);
    request.set_pin(false);
    v1::PlaceResponse response;
    ASSERT_OK(a.control->Place(&context, request, &response));
    EXPECT_EQ(response.host_id(), "h1");
    EXPECT_EQ(response.isolation(), v1::ISOLATION_LEVEL_TENANT);
  }
  ASSERT_OK(Stats(a, vm_1, &stats));
  EXPECT_EQ(stats.total().run_ns(), 100000000);
  EXPECT_FALSE(stats.partial()) << "its last list of replicas is used: " << stats.DebugString();
  grpc::ClientContext context;
  v1::GetVMRequest get;
  get.set_vm_id("vm-1");
  v1::VM vm;
  EXPECT_EQ(a.control->GetVM(&context, get, &vm).error_code(), grpc::StatusCode::UNAVAILABLE);
}

// The policy engine decides on the leading replica only, for what was
// asked of any replica; when the leader stops, the other leads and decides.
TEST_F(CsdReplicasTest, OnlyTheLeaderRunsTheEngineAndTheNextTakesItOver) {
  Replica a = Start();
  Replica b = Start();
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  EXPECT_TRUE(a.csd->leads());
  EXPECT_FALSE(b.csd->leads());

  ASSERT_OK(SetAutoPolicy(b, "acme"));
  // Six single-vCPU VMs on 2 cores of 2 CPUs, two of them another
  // tenant's (fixed at level vm): acme sharing a cookie pays.
  const std::vector<std::string> vms = {"a-1", "a-2", "a-3", "a-4", "g-1", "g-2"};
  ASSERT_NO_FATAL_FAILURE(RegisterAndReport(b, "h1", vms, 1));
  for (const char* vm : {"a-1", "a-2", "a-3"}) ASSERT_OK(TagForEngine(b, vm));
  for (const char* vm : {"g-1", "g-2"}) ASSERT_OK(TagForEngine(b, vm, "globex"));
  // Asked of b, decided by a (b's engine does not run while a leads).
  ASSERT_TRUE(Eventually(
      [&] {
        return DecidedByEngine(b, "a-1") && DecidedByEngine(b, "a-2") &&
               DecidedByEngine(b, "a-3");
      },
      std::chrono::seconds(10)));

  a.csd->Shutdown();
  a.csd.reset();
  // a resigned on shutdown; how soon b follows is the replicas' test's.
  ASSERT_TRUE(Eventually([&] { return b.csd->leads(); }, std::chrono::seconds(10)))
      << "b did not lead after a's shutdown";
  ASSERT_OK(TagForEngine(b, "a-4"));
  EXPECT_TRUE(Eventually([&] { return DecidedByEngine(b, "a-4"); }, std::chrono::seconds(10)));
}

// Two replicas race TagVM and SetTenantPolicy on one tenant: the result is
// that of some serial order of the acknowledged requests. Whatever the
// order, the last policy written sets the level of every VM tagged without
// one (a TagVM after it uses its default, and it re-assigns those before
// it), so any VM at another level than the final policy's default is a
// lost update.
TEST_F(CsdReplicasTest, RacingTagsAndPolicyChangesOnTwoReplicasEndAsSomeSerialOrder) {
  Replica replicas[2] = {Start(), Start()};
  ASSERT_NE(replicas[0].csd, nullptr);
  ASSERT_NE(replicas[1].csd, nullptr);
  auto set_default = [&](Replica& r, v1::IsolationLevel level) {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(20));
    v1::SetTenantPolicyRequest request;
    v1::TenantPolicy* policy = request.mutable_policy();
    policy->set_tenant_id("acme");
    policy->set_default_isolation(level);
    policy->add_allowed_isolation(v1::ISOLATION_LEVEL_VM);
    policy->add_allowed_isolation(v1::ISOLATION_LEVEL_TENANT);
    v1::TenantPolicy response;
    return r.control->SetTenantPolicy(&context, request, &response);
  };
  auto tag = [&](Replica& r, const std::string& vm) {
    grpc::ClientContext context;
    context.set_deadline(system_clock::now() + seconds(20));
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id("acme");  // the policy's default level
    v1::TagVMResponse response;
    return r.control->TagVM(&context, request, &response);
  };
  ASSERT_OK(set_default(replicas[0], v1::ISOLATION_LEVEL_VM));
  constexpr int kVms = 16;
  std::atomic<int> acknowledged{0}, aborted{0};
  auto count = [&](const grpc::Status& status) {
    if (status.ok()) {
      ++acknowledged;
    } else {
      // Lost too many races in a row: not acknowledged, so any order
      // holds without it.
      EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED) << status.error_message();
      ++aborted;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kVms; ++i) {
        count(tag(replicas[t], absl::StrCat("vm-", t == 0 ? i : kVms - 1 - i)));
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 8; ++i) {
      count(set_default(replicas[i % 2],
                        i % 2 == 0 ? v1::ISOLATION_LEVEL_TENANT : v1::ISOLATION_LEVEL_VM));
    }
  });
  for (auto& t : threads) t.join();
  EXPECT_GT(acknowledged.load(), 0);

  v1::TenantPolicy final_policy;
  {
    grpc::ClientContext context;
    v1::GetTenantPolicyRequest request;
    request.set_tenant_id("acme");
    ASSERT_OK(replicas[1].control->GetTenantPolicy(&context, request, &final_policy));
  }
  const v1::IsolationLevel level = final_policy.default_isolation();
  for (int i = 0; i < kVms; ++i) {
    const std::string id = absl::StrCat("vm-", i);
    for (Replica& r : replicas) {
      grpc::ClientContext context;
      v1::GetVMRequest request;
      request.set_vm_id(id);
      v1::VM vm;
      ASSERT_OK(r.control->GetVM(&context, request, &vm));
      EXPECT_EQ(vm.assignment().isolation(), level) << id;
      EXPECT_EQ(vm.assignment().trust_group(),
                level == v1::ISOLATION_LEVEL_TENANT ? "acme/tenant" : "acme/vm/" + id)
          << id;
    }
  }
  std::cout << acknowledged.load() << " requests acknowledged, " << aborted.load()
            << " aborted after too many lost races\n";
}

// Stats live in the memory of the replica the agent reports to (part 4):
// GetStats on any replica gathers the others' and adds them up, and an
// answer missing a registered replica's agents says so and names it.
TEST_F(CsdReplicasTest, GetStatsOnAnyReplicaGathersEveryReplicasAgents) {
  Replica a = Start();
  Replica b = Start();
  ASSERT_NE(a.csd, nullptr);
  ASSERT_NE(b.csd, nullptr);
  v1::TagVMResponse tagged;
  ASSERT_OK(Tag(a, "vm-a", &tagged));
  ASSERT_OK(Tag(a, "vm-b", &tagged));
  RegisterAndReport(a, "host-a", {"vm-a"});
  RegisterAndReport(b, "host-b", {"vm-b"});
  ReportWindow(a, "host-a", "vm-a", 300);
  ReportWindow(b, "host-b", "vm-b", 500);

  v1::GetStatsRequest tenant;
  tenant.set_tenant("acme");
  // Each replica registers where it listens once it does, within a poll.
  for (Replica* r : {&a, &b}) {
    v1::GetStatsResponse stats;
    EXPECT_TRUE(Eventually([&] { return Stats(*r, tenant, &stats).ok() && stats.windows() == 2; }))
        << stats.DebugString();
    EXPECT_FALSE(stats.partial()) << stats.DebugString();
    ASSERT_EQ(stats.vms_size(), 2);
    EXPECT_EQ(stats.vms(0).vm_id(), "vm-a");
    EXPECT_EQ(stats.vms(0).share().run_ns(), 300000000);
    EXPECT_EQ(stats.vms(1).vm_id(), "vm-b");
    EXPECT_EQ(stats.vms(1).share().run_ns(), 500000000);
    EXPECT_EQ(stats.total().run_ns(), 800000000);
    EXPECT_EQ(stats.total().same_ns(), 800000000 - 2000);
    EXPECT_EQ(stats.total().foreign_intervals(), 2);
    EXPECT_EQ(stats.total().longest_foreign_ns(), 500);  // the longer, not the sum
  }
  // A VM whose agent is on the other replica; asked of this one only, it
  // has none.
  v1::GetStatsRequest vm_b;
  vm_b.set_vm_id("vm-b");
  v1::GetStatsResponse stats;
  ASSERT_OK(Stats(a, vm_b, &stats));
  EXPECT_EQ(stats.total().run_ns(), 500000000);
  vm_b.set_local_only(true);
  EXPECT_EQ(Stats(a, vm_b, &stats).error_code(), grpc::StatusCode::NOT_FOUND);

  // Two replicas registered but not answering: one at an address that
  // accepts connections and never speaks, one that gave no address.
  int silent = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(silent, 16), 0);
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  const int silent_port = ntohs(addr.sin_port);
  auto client = etcd::Client::Create(etcd_.ClientOptions());
  ASSERT_OK(client);
  store::EtcdReplica ghost;
  ghost.set_name("ghost");
  ghost.set_address(absl::StrCat("127.0.0.1:", silent_port));
  ASSERT_OK((*client)->Put("/cosched/replicas/ghost", ghost.SerializeAsString()).status());
  store::EtcdReplica mute;
  mute.set_name("mute");
  ASSERT_OK((*client)->Put("/cosched/replicas/mute", mute.SerializeAsString()).status());

  // A's list of replicas is read again within 5 s.
  EXPECT_TRUE(Eventually([&] { return Stats(a, tenant, &stats).ok() && stats.partial(); },
                         std::chrono::seconds(15)));
  const auto asked = std::chrono::steady_clock::now();
  ASSERT_OK(Stats(a, tenant, &stats));
  const auto took = std::chrono::steady_clock::now() - asked;
  EXPECT_TRUE(stats.partial());
  EXPECT_EQ(stats.windows(), 2) << "the replicas that answered are all there";
  ASSERT_EQ(stats.missing_replicas_size(), 2) << stats.DebugString();
  EXPECT_EQ(stats.missing_replicas(0).replica(), "ghost");
  EXPECT_NE(stats.missing_replicas(0).reason().find(
                absl::StrCat("at 127.0.0.1:", silent_port, ": no answer within 300ms")),
            std::string::npos)
      << stats.missing_replicas(0).reason();
  EXPECT_EQ(stats.missing_replicas(1).replica(), "mute");
  EXPECT_NE(stats.missing_replicas(1).reason().find("registered no address"), std::string::npos)
      << stats.missing_replicas(1).reason();
  std::cout << "GetStats with a silent replica answered after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms (peer_timeout_ms 300)\n";
  // A subject nobody has: NOT_FOUND, naming what is missing.
  v1::GetStatsRequest nobody;
  nobody.set_vm_id("vm-none");
  grpc::Status none = Stats(a, nobody, &stats);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(none.error_message().find("missing: ghost"), std::string::npos)
      << none.error_message();
  close(silent);
}

}  // namespace
}  // namespace cosched::server::replicas_testing
