// EtcdStore's watch of its prefix, against a real etcd member: each replica
// hears of the other's commits, never of its own, in order with its own
// done callbacks; and what a watch event says, on literal events.
#include "store/etcd_watch.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "cosched/store/etcd_records.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/etcd_store.h"
#include "tests/store/store_test_records.h"
#include "tests/store/watch_events.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace cosched::store {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What one store's external observer was called with, and when (among its
// done callbacks).
class Heard {
 public:
  void Add(const ExternalChange& change) {
    std::lock_guard<std::mutex> lock(mu_);
    changes_.push_back(change);
    events_.push_back(absl::StrCat("external@", change.revision));
  }
  void Done(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(what);
  }
  std::vector<ExternalChange> changes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return changes_;
  }
  std::vector<std::string> events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  // Every VM id any change named.
  std::vector<std::string> vm_ids() const {
    std::vector<std::string> ids;
    for (const ExternalChange& c : changes()) {
      for (const auto& [id, before] : c.vms) ids.push_back(id);
    }
    return ids;
  }

 private:
  mutable std::mutex mu_;
  std::vector<ExternalChange> changes_;
  std::vector<std::string> events_;
};

class EtcdWatchTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(etcd_.Start()); }

  std::unique_ptr<EtcdStore> OpenWatching(Heard& heard) {
    EtcdStoreOptions options;
    options.client = etcd_.ClientOptions();
    options.prefix = "/cosched";
    auto store = EtcdStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return nullptr;
    (*store)->SetExternalObserver([&heard](const ExternalChange& c) { heard.Add(c); });
    return std::move(*store);
  }

  testing::EtcdMember etcd_;
};

TEST_F(EtcdWatchTest, EachReplicaHearsOfTheOthersCommitsOnly) {
  Heard heard_a, heard_b;
  auto a = OpenWatching(heard_a);
  auto b = OpenWatching(heard_b);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const int64_t first = PutAndRecord(*a, MakeVm("vm-a", "t1", "h1"));
  PutAndRecord(*b, MakeVm("vm-b", "t1", "h2"));
  ASSERT_TRUE(testing::Eventually([&] { return !heard_b.changes().empty(); }));
  ASSERT_TRUE(testing::Eventually([&] { return !heard_a.changes().empty(); }));
  // A marker from each side, so that everything before it was heard.
  const int64_t marker = PutAndRecord(*a, MakeVm("vm-a2", "t1", "h1"));
  ASSERT_TRUE(testing::Eventually([&] {
    auto changes = heard_b.changes();
    return !changes.empty() && changes.back().revision == marker;
  }));
  EXPECT_THAT(heard_b.vm_ids(), ElementsAre("vm-a", "vm-a2"));
  EXPECT_THAT(heard_a.vm_ids(), ElementsAre("vm-b"));
  const ExternalChange change = heard_b.changes().front();
  EXPECT_EQ(change.revision, first);
  EXPECT_THAT(change.assignment_hosts, ElementsAre("h1"));
  ASSERT_EQ(change.vms.size(), 1u);
  EXPECT_FALSE(change.vms[0].second.has_value()) << "vm-a was created";
  EXPECT_FALSE(change.resync);
  // b's idea of the current revision follows a's commits without a read.
  EXPECT_EQ(b->CurrentRevision(), marker);
}

// An update names what the VM was before it.
TEST_F(EtcdWatchTest, AChangeSaysWhatAVmWasBefore) {
  Heard heard_a, heard_b;
  auto a = OpenWatching(heard_a);
  auto b = OpenWatching(heard_b);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  PutAndRecord(*a, MakeVm("vm-1", "t1", "h1", "t1/first"));
  ASSERT_TRUE(testing::Eventually([&] { return heard_b.changes().size() == 1; }));
  const int64_t second = PutAndRecord(*a, MakeVm("vm-1", "t1", "h2", "t1/second"));
  ASSERT_TRUE(testing::Eventually([&] {
    auto changes = heard_b.changes();
    return !changes.empty() && changes.back().revision == second;
  }));
  const ExternalChange last = heard_b.changes().back();
  ASSERT_EQ(last.vms.size(), 1u);
  ASSERT_TRUE(last.vms[0].second.has_value());
  EXPECT_EQ(last.vms[0].second->assignment().trust_group(), "t1/first");
  EXPECT_THAT(last.assignment_hosts, ElementsAre("h2"));
}

// Another replica's change after this store's own commit is heard after
// that commit's done callback, never before.
TEST_F(EtcdWatchTest, AnotherReplicasChangeComesAfterTheDoneOfAnEarlierOwnCommit) {
  Heard heard_a, heard_b;
  auto a = OpenWatching(heard_a);
  auto b = OpenWatching(heard_b);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (int i = 0; i < 20; ++i) {
    std::atomic<bool> own_done{false};
    b->Write([&](Transaction& txn) { return txn.PutVm(MakeVm(absl::StrCat("b-", i))); },
             [&](absl::Status s) {
               EXPECT_OK(s);
               heard_b.Done(absl::StrCat("done-b-", i));
               own_done = true;
             });
    // a writes right after b's commit, perhaps before b heard its answer.
    ASSERT_TRUE(testing::Eventually([&] {
      auto vm = GetVm(*a, absl::StrCat("b-", i));
      return vm.has_value();
    }));
    const int64_t after = PutAndRecord(*a, MakeVm(absl::StrCat("a-", i), "t1", "h1"));
    ASSERT_TRUE(testing::Eventually([&] {
      auto changes = heard_b.changes();
      return !changes.empty() && changes.back().revision == after;
    }));
    EXPECT_TRUE(own_done.load());
    auto events = heard_b.events();
    auto done_at = std::find(events.begin(), events.end(), absl::StrCat("done-b-", i));
    auto heard_at = std::find(events.begin(), events.end(), absl::StrCat("external@", after));
    ASSERT_NE(done_at, events.end());
    EXPECT_LT(done_at - events.begin(), heard_at - events.begin());
  }
}

TEST(EtcdWatchEvent, SaysWhatChanged) {
  ExternalChange change;
  WatchedRevision revision;
  EtcdMeta meta;
  meta.set_commit_id(42);
  ASSERT_OK(AddWatchEvent("/p", PutEvent("/p/meta", meta.SerializeAsString(), 7), change,
                          revision));
  EtcdReport report;
  report.add_vms()->set_vm_id("vm-1");
  ASSERT_OK(AddWatchEvent("/p", PutEvent("/p/reports/h1", report.SerializeAsString(), 7),
                          change, revision));
  ASSERT_OK(AddWatchEvent("/p", PutEvent("/p/changes/h1/vm-1", "", 7), change, revision));
  ASSERT_OK(AddWatchEvent("/p", PutEvent("/p/hosts/h1", "", 7), change, revision));
  ASSERT_OK(AddWatchEvent("/p", PutEvent("/p/policies/t1", "", 7), change, revision));
  EXPECT_FALSE(change.rollout);
  ASSERT_OK(AddWatchEvent("/p", PutEvent("/p/rollout", "", 7), change, revision));
  ASSERT_OK(AddWatchEvent("/p", PutEvent("/p/audit/ffff", "", 7), change, revision));
  ASSERT_OK(AddWatchEvent("/p", PutEvent("/pq/vms/x", "", 7), change, revision));
  EXPECT_EQ(revision.revision, 7);
  EXPECT_EQ(revision.commit_id, 42u);
  EXPECT_EQ(change.revision, 7);
  EXPECT_THAT(change.assignment_hosts, ElementsAre("h1"));
  EXPECT_THAT(change.hosts, ElementsAre("h1"));
  EXPECT_TRUE(change.policies);
  EXPECT_TRUE(change.rollout);
  ASSERT_EQ(change.reports.size(), 1u);
  EXPECT_EQ(change.reports[0].first, "h1");
  ASSERT_EQ(change.reports[0].second.size(), 1u);
  EXPECT_TRUE(change.vms.empty());
}

TEST(EtcdWatchEvent, AValueThatDoesNotParseIsDataLossNamingItsKey) {
  ExternalChange change;
  WatchedRevision revision;
  mvccpb::Event event = PutEvent("/p/vms/vm-1", "", 9);
  event.mutable_prev_kv()->set_key("/p/vms/vm-1");
  event.mutable_prev_kv()->set_value("\xff\xff garbage");
  absl::Status added = AddWatchEvent("/p", event, change, revision);
  EXPECT_TRUE(absl::IsDataLoss(added)) << added;
  EXPECT_THAT(std::string(added.message()), HasSubstr("/p/vms/vm-1"));
  // Still named as changed: the store is read for what it is now.
  ASSERT_EQ(change.vms.size(), 1u);
  EXPECT_EQ(change.vms[0].first, "vm-1");
  EXPECT_FALSE(change.vms[0].second.has_value());
  absl::Status meta = AddWatchEvent("/p", PutEvent("/p/meta", "\xff\xff", 9), change, revision);
  EXPECT_TRUE(absl::IsDataLoss(meta)) << meta;
  EXPECT_THAT(std::string(meta.message()), HasSubstr("/p/meta"));
  EXPECT_FALSE(revision.commit_id.has_value());
}

}  // namespace
}  // namespace cosched::store
