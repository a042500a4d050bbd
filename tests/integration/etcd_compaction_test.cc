// An agent away from csd while etcd's history is compacted (issue #16): on
// its return it gets a snapshot, because its resume revision is gone, and
// converges; away without a compaction, it resumes with a delta. csd runs
// on a real etcd member; the agent is a mini cluster's.
#include <chrono>
#include <memory>
#include <string>

#include "cosched/v1/control_plane.grpc.pb.h"
#include "etcd/client.h"
#include "gtest/gtest.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/eventually.h"
#include "tests/testing/mini_cluster.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using std::chrono::seconds;
using testing::Eventually;

class EtcdCompactionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(etcd_.Start());
    testing::MiniClusterOptions options;
    store::EtcdStoreOptions store;
    store.client = etcd_.ClientOptions();
    store.prefix = "/cosched";
    options.csd.etcd_store = store;
    auto cluster = testing::MiniCluster::Start(std::move(options));
    ASSERT_OK(cluster);
    cluster_ = std::move(*cluster);
    auto host = cluster_->AddHost();
    ASSERT_OK(host);
    host_ = *host;
  }

  int64_t Tag(const std::string& vm, v1::IsolationLevel level) {
    grpc::ClientContext context;
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id("acme");
    request.set_isolation(level);
    v1::TagVMResponse response;
    EXPECT_OK(cluster_->control().TagVM(&context, request, &response));
    return response.vm().assignment().revision();
  }

  // The agent stops; `vm` moves to `level` while it is away; it starts
  // again and holds the change.
  void AwayWhile(const std::string& vm, v1::IsolationLevel level, bool compact) {
    host_->Stop();
    const int64_t changed = Tag(vm, level);
    if (compact) {
      auto client = etcd::Client::Create(etcd_.ClientOptions());
      ASSERT_OK(client);
      ASSERT_OK((*client)->Compact(changed));
    }
    ASSERT_OK(host_->Start());
    ASSERT_TRUE(Eventually([&] { return Holds(vm, level, changed); }, seconds(15)))
        << "the agent did not receive " << vm << " at revision " << changed;
  }

  // The agent's cache holds `vm` at `level`, at `revision` or later.
  bool Holds(const std::string& vm, v1::IsolationLevel level, int64_t revision) {
    auto held = host_->agent().cache().Find(vm);
    return host_->agent().cache().revision() >= revision && held.has_value() &&
           held->isolation() == level;
  }

  testing::EtcdMember etcd_;
  std::unique_ptr<testing::MiniCluster> cluster_;
  testing::MiniHost* host_ = nullptr;
};

TEST_F(EtcdCompactionTest, AnAgentAwayAcrossACompactionGetsASnapshotAndConverges) {
  host_->AddVm("vm-1", 100);
  host_->AddVm("vm-2", 200);
  const int64_t first = Tag("vm-1", v1::ISOLATION_LEVEL_TENANT);
  const int64_t second = Tag("vm-2", v1::ISOLATION_LEVEL_VM);
  ASSERT_TRUE(Eventually(
      [&] {
        return Holds("vm-1", v1::ISOLATION_LEVEL_TENANT, first) &&
               Holds("vm-2", v1::ISOLATION_LEVEL_VM, second);
      },
      seconds(15)));
  ASSERT_TRUE(Eventually([&] { return host_->VmCookie(200) != 0; }, seconds(10)));

  // Away, no compaction: the restarted agent resumes by revision.
  ASSERT_NO_FATAL_FAILURE(AwayWhile("vm-2", v1::ISOLATION_LEVEL_TENANT, /*compact=*/false));
  EXPECT_EQ(host_->agent().cache().snapshots_applied(), 0);
  EXPECT_GE(host_->agent().cache().deltas_applied(), 1);
  ASSERT_TRUE(Eventually([&] { return host_->VmCookie(100) == host_->VmCookie(200); },
                         seconds(10)));

  // Away across a compaction: its revision is gone, a snapshot it is.
  ASSERT_NO_FATAL_FAILURE(AwayWhile("vm-2", v1::ISOLATION_LEVEL_VM, /*compact=*/true));
  EXPECT_EQ(host_->agent().cache().snapshots_applied(), 1);
  ASSERT_TRUE(Eventually(
      [&] { return host_->VmCookie(200) != 0 && host_->VmCookie(100) != host_->VmCookie(200); },
      seconds(10)))
      << "vm-1 on " << host_->VmCookie(100) << ", vm-2 on " << host_->VmCookie(200);
}

}  // namespace
}  // namespace cosched
