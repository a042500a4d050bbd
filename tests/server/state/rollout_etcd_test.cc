// A staged rollout's hosts on etcd (issue #35 item 6): each is marked on
// its own host record, in commits that fit the member's limits whatever
// the stage's size, and a start waits until every replica on the prefix
// reads records of that form.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cosched/store/etcd_records.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/state/rollout_control.h"
#include "store/etcd_replicas.h"
#include "store/etcd_store.h"
#include "tests/server/state_testing.h"
#include "tests/server/test_state.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/status_matchers.h"

namespace cosched::server {
namespace {

using ::cosched::testing::StatusIs;
using ::testing::Each;
using ::testing::Le;

// Far below etcd's default of 128: a commit of kEnableChunk hosts does not
// fit, and has to be cut.
constexpr int kMaxTxnOps = 40;
constexpr int kHosts = 150;

class RolloutOnEtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cosched::testing::EtcdMemberOptions member;
    member.max_txn_ops = kMaxTxnOps;
    etcd_ = std::make_unique<cosched::testing::EtcdMember>(member);
    ASSERT_OK(etcd_->Start());
    store::EtcdStoreOptions options;
    options.client = etcd_->ClientOptions();
    options.client.max_txn_ops = kMaxTxnOps;
    options.prefix = "/cosched";
    options.replicas.name = "csd-a";
    ASSERT_OK_AND_ASSIGN(store_, store::EtcdStore::Open(options));
    state_ = std::make_unique<TestState>(*store_);
    ASSERT_OK(state_->Load());
    RolloutOptions rollout;
    rollout.min_soak_s = 60;
    control_ = std::make_unique<RolloutControl>(
        *store_, state_->rollout, state_->host_status, state_->placement, rollout, nullptr,
        nullptr, [this] { return store_->replicas().CheckRecordFormat(store::kRecordFormat); });
    v1::SetNewHostsRequest wait;
    wait.set_new_hosts(v1::NEW_HOSTS_WAIT_FOR_ROLLOUT);
    ASSERT_OK(testing::Wait<v1::Rollout>([&](auto done) {
                control_->SetNewHosts(wait, Actor{"alice", "admin"}, std::move(done));
              }).status());
    for (int i = 0; i < kHosts; ++i) {
      ASSERT_OK(testing::RegisterHost(*state_, absl::StrCat("hv-", i), Actor{"hv", "host"}));
    }
  }

  absl::StatusOr<v1::Rollout> Start(std::vector<int> percents) {
    v1::StartRolloutRequest request;
    for (int p : percents) request.add_stage_percents(p);
    request.set_soak_seconds(60);
    return testing::Wait<v1::Rollout>([&](auto done) {
      control_->StartRollout(request, Actor{"alice", "admin"}, std::move(done));
    });
  }

  // How many hosts each EnableRolloutHosts record names, oldest first.
  std::vector<int> EnrolmentSizes() {
    v1::ListAuditRecordsRequest request;
    request.set_page_size(1000);
    absl::StatusOr<v1::ListAuditRecordsResponse> records =
        state_->audit.ListAuditRecords(request);
    EXPECT_TRUE(records.ok()) << records.status();
    std::vector<int> sizes;
    if (!records.ok()) return sizes;
    for (const v1::AuditRecord& r : records->records()) {
      if (r.method() != "EnableRolloutHosts") continue;
      // "<why>: N host(s): a, b, ..."
      const std::vector<std::string> parts = absl::StrSplit(r.reason(), ": ");
      EXPECT_EQ(parts.size(), 3u) << r.reason();
      if (parts.size() != 3) continue;
      sizes.insert(sizes.begin(),
                   static_cast<int>(std::vector<std::string>(absl::StrSplit(parts[2], ", ")).size()));
    }
    return sizes;
  }

  std::unique_ptr<cosched::testing::EtcdMember> etcd_;
  std::unique_ptr<store::EtcdStore> store_;
  std::unique_ptr<TestState> state_;
  std::unique_ptr<RolloutControl> control_;
};

TEST_F(RolloutOnEtcdTest, AStageLargerThanOneTxnIsEnabledInCommitsThatFit) {
  ASSERT_OK_AND_ASSIGN(v1::Rollout started, Start({100}));
  EXPECT_EQ(started.enabled_count(), kHosts);
  EXPECT_EQ(started.matching_hosts(), kHosts);
  // The record lists no host; every host's own record names the rollout.
  EXPECT_EQ(started.enabled_hosts_size(), 0);
  ASSERT_OK(store_->Read([&](store::Transaction& txn) -> absl::Status {
    store::Page page;
    page.limit = 1000;
    ASSIGN_OR_RETURN(std::vector<v1::Host> hosts, txn.ListHosts(page));
    EXPECT_EQ(hosts.size(), static_cast<size_t>(kHosts));
    for (const v1::Host& h : hosts) {
      EXPECT_EQ(h.enabled_by_rollout(), started.rollout_id()) << h.host_id();
    }
    return absl::OkStatus();
  }));
  // kEnableChunk hosts are more operations than the member takes: the
  // commits were cut until they fit, and together name every host once.
  const std::vector<int> sizes = EnrolmentSizes();
  EXPECT_THAT(sizes, Each(Le(kMaxTxnOps)));
  int total = 0;
  for (int n : sizes) total += n;
  EXPECT_EQ(total, kHosts);
  // What the Register answer says, from the view the commits updated.
  v1::GetHostRequest get;
  get.set_host_id("hv-7");
  ASSERT_OK_AND_ASSIGN(v1::Host host, state_->hosts.GetHost(get));
  EXPECT_EQ(host.enablement().state(), v1::HostEnablement::STATE_ENFORCE);
}

TEST_F(RolloutOnEtcdTest, AReplicaOfAnOlderCsdHoldsTheStart) {
  // What a replica that predates record_format registers.
  store::EtcdReplica old;
  old.set_name("csd-old");
  ASSERT_OK(store_->client().Put("/cosched/replicas/csd-old", old.SerializeAsString()).status());
  EXPECT_THAT(Start({10, 100}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "replica csd-old runs an older csd (store record format 0, this change "
                       "needs 1)"));
  EXPECT_EQ(control_->GetRollout()->rollout_id(), "");
  ASSERT_OK(store_->client().DeleteRange("/cosched/replicas/csd-old", "").status());
  ASSERT_OK_AND_ASSIGN(v1::Rollout started, Start({10, 100}));
  EXPECT_EQ(started.enabled_count(), 15);
}

}  // namespace
}  // namespace cosched::server
