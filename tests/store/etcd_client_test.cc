// cosched_etcd's client against a real etcd member: paged ranges at one
// revision, the Txn limits, compaction, leases, a watch with prev_kv, and
// errors that name etcd.
#include "etcd/client.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/status_matchers.h"

namespace cosched::etcd {
namespace {

using ::testing::HasSubstr;

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(etcd_.Start());
    ClientOptions options = etcd_.ClientOptions();
    options.range_page = 10;  // so that 25 keys take three pages
    auto client = Client::Create(options);
    ASSERT_OK(client.status());
    client_ = std::move(*client);
  }

  testing::EtcdMember etcd_;
  std::unique_ptr<Client> client_;
};

TEST(PrefixEnd, IsTheFirstKeyAfterThePrefix) {
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixEnd("a\xff"), "b");
  EXPECT_EQ(PrefixEnd("\xff\xff"), std::string(1, '\0'));
}

TEST_F(EtcdClientTest, RangeReadsEveryPageAtTheFirstPagesRevision) {
  for (int i = 0; i < 25; ++i) {
    ASSERT_OK(client_->Put(absl::StrCat("/k/", 100 + i), "v").status());
  }
  ASSERT_OK(client_->Put("/l", "outside").status());
  auto all = client_->Range("/k/", PrefixEnd("/k/"));
  ASSERT_OK(all.status());
  ASSERT_EQ(all->kvs.size(), 25u);
  EXPECT_EQ(all->kvs.front().key(), "/k/100");
  EXPECT_EQ(all->kvs.back().key(), "/k/124");
  // At an older revision, later writes are not there, on every page.
  const int64_t then = all->revision;
  ASSERT_OK(client_->Put("/k/200", "later").status());
  auto old = client_->Range("/k/", PrefixEnd("/k/"), then);
  ASSERT_OK(old.status());
  EXPECT_EQ(old->kvs.size(), 25u);
  auto limited = client_->Range("/k/", PrefixEnd("/k/"), 0, 12);
  ASSERT_OK(limited.status());
  EXPECT_EQ(limited->kvs.size(), 12u);
}

TEST_F(EtcdClientTest, ACompactedRevisionIsOutOfRange) {
  auto first = client_->Put("/x", "1");
  ASSERT_OK(first.status());
  auto second = client_->Put("/x", "2");
  ASSERT_OK(second.status());
  ASSERT_OK(client_->Compact(*second));
  absl::Status old = client_->Range("/x", "", *first).status();
  EXPECT_TRUE(absl::IsOutOfRange(old)) << old;
  EXPECT_THAT(std::string(old.message()), HasSubstr("compacted"));
}

TEST_F(EtcdClientTest, ATxnOverTheLimitsIsRefusedBeforeItIsSent) {
  etcdserverpb::TxnRequest request;
  for (int i = 0; i < 129; ++i) {
    auto* put = request.add_success()->mutable_request_put();
    put->set_key(absl::StrCat("/t/", i));
  }
  absl::Status refused = client_->Txn(request).status();
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("limit of 128 operations"));
  request.mutable_success()->RemoveLast();
  ASSERT_OK(client_->Txn(request).status());  // 128 fit
  auto written = client_->Range("/t/", PrefixEnd("/t/"));
  ASSERT_OK(written.status());
  EXPECT_EQ(written->kvs.size(), 128u);
}

TEST_F(EtcdClientTest, KeysOfARevokedLeaseAreGone) {
  auto lease = client_->LeaseGrant(30);
  ASSERT_OK(lease.status());
  ASSERT_OK(client_->Put("/leased", "v", *lease).status());
  auto ttl = client_->LeaseKeepAliveOnce(*lease);
  ASSERT_OK(ttl.status());
  EXPECT_GT(*ttl, 0);
  ASSERT_OK(client_->LeaseRevoke(*lease));
  auto gone = client_->Range("/leased", "");
  ASSERT_OK(gone.status());
  EXPECT_TRUE(gone->kvs.empty());
}

TEST_F(EtcdClientTest, AWatchSeesChangesWithTheirPreviousValues) {
  ASSERT_OK(client_->Put("/w/a", "1").status());
  auto watch = client_->Watch("/w/", PrefixEnd("/w/"), 0, /*prev_kv=*/true,
                              /*progress_notify=*/true);
  ASSERT_OK(watch.status());
  auto created = (*watch)->Read();
  ASSERT_OK(created.status());
  EXPECT_TRUE(created->created());
  ASSERT_OK(client_->Put("/w/a", "2").status());
  ASSERT_OK(client_->DeleteRange("/w/a", "").status());
  int seen = 0;
  while (seen < 2) {
    auto response = (*watch)->Read();
    ASSERT_OK(response.status());
    for (const mvccpb::Event& event : response->events()) {
      EXPECT_EQ(event.prev_kv().value(), seen == 0 ? "1" : "2");
      EXPECT_EQ(event.type(), seen == 0 ? mvccpb::Event::PUT : mvccpb::Event::DELETE);
      ++seen;
    }
  }
  (*watch)->Cancel();
}

TEST_F(EtcdClientTest, WithTheMemberGoneCallsFailUnavailableNamingIt) {
  etcd_.Kill();
  absl::Status down = client_->Range("/x", "").status();
  EXPECT_TRUE(absl::IsUnavailable(down)) << down;
  EXPECT_THAT(std::string(down.message()), HasSubstr("etcd at " + etcd_.endpoint()));
}

TEST(EtcdClientOptions, AreCheckedAtCreate) {
  EXPECT_TRUE(absl::IsInvalidArgument(Client::Create(ClientOptions()).status()));
  ClientOptions options;
  options.endpoints = {"no-port"};
  EXPECT_TRUE(absl::IsInvalidArgument(Client::Create(options).status()));
  options.endpoints = {"10.1.2.3:2379"};
  absl::Status plaintext = Client::Create(options).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(plaintext)) << plaintext;
}

}  // namespace
}  // namespace cosched::etcd
