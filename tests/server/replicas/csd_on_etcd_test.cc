// Two csd replicas on one etcd (a real member): what one writes, the other
// serves, and a race between them on one tenant loses nothing.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/metrics_scrape.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/trusted_plaintext.h"

namespace cosched::server {
namespace {

class CsdOnEtcdTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(etcd_.Start()); }

  std::unique_ptr<CsdServer> StartReplica(const std::string& metrics_listen = "") {
    CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = dir_.Sub("unused");
    testing::TrustPlaintextCallers(options.authz);
    options.metrics_listen = metrics_listen;
    store::EtcdStoreOptions store;
    store.client = etcd_.ClientOptions();
    store.prefix = "/cosched";
    options.etcd_store = store;
    auto csd = CsdServer::Start(options);
    EXPECT_TRUE(csd.ok()) << csd.status();
    return csd.ok() ? std::move(*csd) : nullptr;
  }

  // Tags `vm_id` of tenant acme at level vm through `csd`.
  static absl::StatusOr<v1::TagVMResponse> TagVm(CsdServer& csd, const std::string& vm_id) {
    v1::TagVMRequest tag;
    tag.set_vm_id(vm_id);
    tag.set_tenant_id("acme");
    tag.set_isolation(v1::ISOLATION_LEVEL_VM);
    v1::TagVMResponse tagged;
    grpc::ClientContext context;
    grpc::Status s = Stub(csd)->TagVM(&context, tag, &tagged);
    if (!s.ok()) return absl::InternalError(s.error_message());
    return tagged;
  }

  static std::unique_ptr<v1::ControlPlane::Stub> Stub(CsdServer& csd) {
    return v1::ControlPlane::NewStub(
        grpc::CreateChannel(csd.address(), grpc::InsecureChannelCredentials()));
  }

  testing::EtcdMember etcd_;
  testing::TempDir dir_;
};

TEST_F(CsdOnEtcdTest, AReplicaServesWhatAnotherWrote) {
  auto a = StartReplica();
  auto b = StartReplica();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto stub_b = Stub(*b);
  absl::StatusOr<v1::TagVMResponse> tag_a = TagVm(*a, "vm-1");
  ASSERT_TRUE(tag_a.ok()) << tag_a.status();
  const v1::TagVMResponse& tagged = *tag_a;
  v1::GetVMRequest get;
  get.set_vm_id("vm-1");
  v1::VM got;
  grpc::ClientContext context;
  grpc::Status s = stub_b->GetVM(&context, get, &got);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(got.assignment().trust_group(), tagged.vm().assignment().trust_group());
  EXPECT_EQ(got.assignment().revision(), tagged.vm().assignment().revision());
  // The revision is etcd's: at most the one a's commit made (the replicas'
  // own keys may have moved etcd's revision since a's copy of the prefix
  // last heard), above every csd commit before it, so an agent at a
  // revision at or above it has the tag.
  EXPECT_LE(tagged.vm().assignment().revision(), a->revision());
  EXPECT_GT(tagged.vm().assignment().revision(), 1);
}

// Both replicas tag VMs of one tenant at once (each TagVM reads the
// tenant's policy and writes an audit record): every tag is acknowledged and
// there.
// A replica says how many keys of the prefix it holds in memory: what an
// operator sizes its memory by.
TEST_F(CsdOnEtcdTest, AReplicaExportsTheSizeOfItsCopyOfThePrefix) {
  auto csd = StartReplica("127.0.0.1:0");
  ASSERT_NE(csd, nullptr);
  auto cache_keys = [&] {
    return testing::SampleValue(testing::HttpGet(csd->metrics_port(), "/metrics"),
                                "cosched_store_cache_keys")
        .value_or(-1);
  };
  const double before = cache_keys();
  EXPECT_GE(before, 0);
  ASSERT_TRUE(TagVm(*csd, "vm-1").ok());
  // The VM, its index by tenant and meta at least.
  EXPECT_GE(cache_keys(), before + 2);
}

TEST_F(CsdOnEtcdTest, ReplicasRacingOnOneTenantLoseNoTag) {
  auto a = StartReplica();
  auto b = StartReplica();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr int kPerReplica = 30;
  std::vector<std::thread> threads;
  std::atomic<int> acknowledged{0};
  for (CsdServer* csd : {a.get(), b.get()}) {
    threads.emplace_back([&, csd] {
      auto stub = Stub(*csd);
      for (int i = 0; i < kPerReplica; ++i) {
        v1::TagVMRequest tag;
        tag.set_vm_id(absl::StrCat(csd == a.get() ? "a-" : "b-", i));
        tag.set_tenant_id("acme");
        tag.set_isolation(i % 2 ? v1::ISOLATION_LEVEL_TENANT : v1::ISOLATION_LEVEL_VM);
        v1::TagVMResponse tagged;
        grpc::ClientContext context;
        if (stub->TagVM(&context, tag, &tagged).ok()) ++acknowledged;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(acknowledged.load(), 2 * kPerReplica);
  auto stub = Stub(*b);
  v1::ListVMsRequest list;
  list.set_tenant_id("acme");
  list.set_page_size(1000);
  v1::ListVMsResponse listed;
  grpc::ClientContext context;
  grpc::Status s = stub->ListVMs(&context, list, &listed);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(listed.vms_size(), 2 * kPerReplica);
}


// A record under the prefix that does not parse: csd does not start on a
// half-read state, and says which key.
TEST_F(CsdOnEtcdTest, AValueThatDoesNotParseKeepsCsdFromStarting) {
  auto client = etcd::Client::Create(etcd_.ClientOptions());
  ASSERT_OK(client.status());
  ASSERT_OK((*client)->Put("/cosched/vms/vm-bad", "\xff\xff garbage").status());
  CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "";
  store::EtcdStoreOptions store;
  store.client = etcd_.ClientOptions();
  store.prefix = "/cosched";
  options.etcd_store = store;
  auto csd = CsdServer::Start(options);
  ASSERT_FALSE(csd.ok());
  EXPECT_TRUE(absl::IsDataLoss(csd.status())) << csd.status();
  EXPECT_NE(csd.status().message().find("/cosched/vms/vm-bad"), std::string::npos)
      << csd.status();
}

// Issue #33: the off switch over a selector wrote every matched host and
// its audit record in one write, which etcd refuses past max_txn_ops (128
// operations by default: about 60 hosts). It now writes a few hosts a
// write: a zone of 150 hosts is switched off and on, each host audited.
TEST_F(CsdOnEtcdTest, TheOffSwitchOverAZoneOfAnySizeFitsEtcdsTxnLimit) {
  auto csd = StartReplica();
  ASSERT_NE(csd, nullptr);
  auto channel = grpc::CreateChannel(csd->address(), grpc::InsecureChannelCredentials());
  auto agent = v1::AgentService::NewStub(channel);
  constexpr int kHosts = 150;
  for (int h = 0; h < kHosts; ++h) {
    v1::RegisterRequest reg;
    reg.set_host_id(absl::StrCat("hv-", h));
    v1::Core* core = reg.mutable_topology()->add_cores();
    core->add_cpus(0);
    core->add_cpus(1);
    (*reg.mutable_labels())["zone"] = h < kHosts - 1 ? "a" : "b";
    grpc::ClientContext context;
    v1::RegisterResponse registered;
    grpc::Status s = agent->Register(&context, reg, &registered);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  auto control = Stub(*csd);
  for (bool off : {true, false}) {
    v1::SetHostEnforcementRequest request;
    request.set_selector("zone=a");
    request.set_off(off);
    request.set_reason("kernel bug in zone a");
    v1::SetHostEnforcementResponse response;
    grpc::ClientContext context;
    grpc::Status s = control->SetHostEnforcement(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(response.hosts_size(), kHosts - 1) << off;
    for (const v1::Host& host : response.hosts()) EXPECT_EQ(host.enforcement_off(), off);
  }
  // Zone b was never switched; every switch of zone a is audited.
  v1::GetHostRequest get;
  get.set_host_id(absl::StrCat("hv-", kHosts - 1));
  v1::Host b;
  grpc::ClientContext context;
  ASSERT_TRUE(control->GetHost(&context, get, &b).ok());
  EXPECT_FALSE(b.enforcement_off());
  v1::ListAuditRecordsRequest audit;
  audit.set_subject("hv-3");
  audit.set_page_size(100);
  v1::ListAuditRecordsResponse records;
  grpc::ClientContext audit_context;
  ASSERT_TRUE(control->ListAuditRecords(&audit_context, audit, &records).ok());
  int switches = 0;
  for (const v1::AuditRecord& r : records.records()) switches += r.method() == "SetHostEnforcement";
  EXPECT_EQ(switches, 2);
}

}  // namespace
}  // namespace cosched::server
