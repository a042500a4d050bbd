// EtcdStore replicas racing on shared records, against a real etcd member:
// the loser of a race runs again on the winner's write, a replica whose
// copy of the prefix lags never commits a stale read, no update is lost,
// appends through replicas with lagging copies are linearizable, and audit
// sequences stay unique across replicas.
#include <atomic>
#include <chrono>
#include <latch>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/etcd_store.h"
#include "tests/store/etcd_store_fixture.h"
#include "tests/store/store_test_records.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace cosched::store {
namespace {

// Read-modify-write of host h1's counter (its agent_version).
absl::Status Increment(Transaction& txn, std::atomic<int>* runs) {
  if (runs) ++*runs;
  ASSIGN_OR_RETURN(auto host, txn.GetHost("h1"));
  v1::Host updated;
  updated.set_host_id("h1");
  updated.set_agent_version(std::to_string(host ? std::stoi(host->agent_version()) + 1 : 1));
  return txn.PutHost(updated);
}

int Counter(Store& store) {
  int value = -1;
  EXPECT_OK(store.Read([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto host, txn.GetHost("h1"));
    value = host ? std::stoi(host->agent_version()) : 0;
    return absl::OkStatus();
  }));
  return value;
}

// The loser of a race runs again on what the winner wrote, and sees it.
TEST_F(EtcdStoreTest, LoserOfARaceRunsAgainOnTheWinnersWrite) {
  auto a = OpenReplica();
  auto b = OpenReplica();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::latch a_read(1), b_committed(1);
  std::vector<std::string> seen_by_a;
  std::atomic<int> a_runs{0};
  a->Write(
      [&](Transaction& txn) -> absl::Status {
        ASSIGN_OR_RETURN(auto vm, txn.GetVm("vm-1"));
        seen_by_a.push_back(vm ? vm->assignment().trust_group() : "none");
        if (a_runs++ == 0) {
          a_read.count_down();
          b_committed.wait();  // b commits between a's read and its commit
        }
        v1::VM next = MakeVm("vm-1", "t1", "h1",
                             vm ? vm->assignment().trust_group() + "+a" : "t1/a");
        return txn.PutVm(next);
      },
      nullptr);
  a_read.wait();
  ASSERT_OK(b->WriteSync(
      [](Transaction& txn) { return txn.PutVm(MakeVm("vm-1", "t1", "h1", "t1/b")); }));
  b_committed.count_down();
  ASSERT_OK(a->WriteSync([](Transaction&) { return absl::OkStatus(); }));  // after a's
  EXPECT_EQ(a_runs.load(), 2);
  EXPECT_THAT(seen_by_a, ::testing::ElementsAre("none", "t1/b"));
  // Neither update is lost: a's is on top of b's.
  EXPECT_EQ(GetVm(*b, "vm-1")->assignment().trust_group(), "t1/b+a");
}

// A replica whose cache lags behind another's commit (its watch held): its
// write function reads the old record, the commit's compare on meta fails,
// and the function runs again once the watch brought the cache up to date.
TEST_F(EtcdStoreTest, ACacheThatLagsNeverLetsAStaleReadCommit) {
  auto a = OpenReplica();
  ASSERT_NE(a, nullptr);
  std::atomic<bool> hold{false};
  EtcdStoreOptions options;
  options.client = etcd_.ClientOptions();
  options.watch.before_apply = [&] {
    while (hold) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  auto opened = EtcdStore::Open(options);
  ASSERT_OK(opened.status());
  std::unique_ptr<EtcdStore> b = std::move(*opened);
  ASSERT_OK(b->WriteSync(
      [](Transaction& txn) { return txn.PutVm(MakeVm("vm-1", "t1", "h1", "t1/b0")); }));
  ASSERT_TRUE(testing::Eventually([&] { return a->cache().revision() >= b->CurrentRevision(); }));
  hold = true;
  ASSERT_OK(a->WriteSync(
      [](Transaction& txn) { return txn.PutVm(MakeVm("vm-1", "t1", "h1", "t1/a")); }));
  const int64_t behind = b->cache().revision();
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    hold = false;
  });
  std::vector<std::string> seen;
  ASSERT_OK(b->WriteSync([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto vm, txn.GetVm("vm-1"));
    seen.push_back(vm->assignment().trust_group());
    return txn.PutVm(MakeVm("vm-1", "t1", "h1", vm->assignment().trust_group() + "+b"));
  }));
  release.join();
  EXPECT_LT(behind, a->CurrentRevision());  // b's cache did lag
  EXPECT_THAT(seen, ::testing::ElementsAre("t1/b0", "t1/a"));
  EXPECT_EQ(GetVm(*a, "vm-1")->assignment().trust_group(), "t1/a+b");
  EXPECT_EQ(GetVm(*b, "vm-1")->assignment().trust_group(), "t1/a+b");
}

TEST_F(EtcdStoreTest, ReplicasIncrementingOneRecordLoseNoUpdate) {
  auto a = OpenReplica();
  auto b = OpenReplica();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr int kPerThread = 40;
  std::atomic<int> acknowledged{0}, runs{0};
  std::vector<std::thread> threads;
  for (EtcdStore* store : {a.get(), b.get(), a.get(), b.get()}) {
    threads.emplace_back([&, store] {
      for (int i = 0; i < kPerThread; ++i) {
        absl::Status s = store->WriteSync([&](Transaction& txn) { return Increment(txn, &runs); });
        if (s.ok()) ++acknowledged;
        else ADD_FAILURE() << s;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(acknowledged.load(), 4 * kPerThread);
  EXPECT_EQ(Counter(*a), acknowledged.load());
  EXPECT_EQ(Counter(*b), acknowledged.load());
  // The replicas did race: some functions ran again after losing.
  EXPECT_GT(runs.load(), acknowledged.load());
}

// Three replicas whose watches lag at random (0-5 ms before each response
// they apply) append ids to a few shared records at once, read-modify-write:
// each record's list is then a linearization of the acknowledged appends to
// it. Every acknowledged append is there exactly once, and one acknowledged
// before another was submitted comes first. A write on a stale copy of a
// record would lose an append or order two wrongly.
TEST_F(EtcdStoreTest, AppendsThroughReplicasWithLaggingCachesAreLinearizable) {
  constexpr int kReplicas = 3, kThreadsPerReplica = 2, kOpsPerThread = 25, kRecords = 3;
  std::vector<std::unique_ptr<EtcdStore>> replicas;
  for (int r = 0; r < kReplicas; ++r) {
    EtcdStoreOptions options;
    options.client = etcd_.ClientOptions();
    options.watch.before_apply = [] {
      thread_local std::mt19937 lag{std::random_device{}()};
      std::this_thread::sleep_for(
          std::chrono::microseconds(std::uniform_int_distribution<int>(0, 5000)(lag)));
    };
    auto opened = EtcdStore::Open(options);
    ASSERT_OK(opened.status());
    replicas.push_back(std::move(*opened));
  }
  struct Op {
    std::string id;
    int record = 0;
    std::chrono::steady_clock::time_point submitted, acknowledged;
    bool ok = false;
  };
  std::vector<std::vector<Op>> ops(kReplicas * kThreadsPerReplica);
  std::vector<std::thread> threads;
  for (int t = 0; t < kReplicas * kThreadsPerReplica; ++t) {
    threads.emplace_back([&, t] {
      EtcdStore& store = *replicas[t % kReplicas];
      std::mt19937 pick(t);
      for (int i = 0; i < kOpsPerThread; ++i) {
        Op op;
        op.id = absl::StrCat("t", t, ".", i);
        op.record = std::uniform_int_distribution<int>(0, kRecords - 1)(pick);
        op.submitted = std::chrono::steady_clock::now();
        absl::Status s = store.WriteSync([&](Transaction& txn) -> absl::Status {
          const std::string host_id = absl::StrCat("h", op.record);
          ASSIGN_OR_RETURN(auto host, txn.GetHost(host_id));
          v1::Host next;
          next.set_host_id(host_id);
          next.set_agent_version((host ? host->agent_version() + "," : "") + op.id);
          return txn.PutHost(next);
        });
        op.acknowledged = std::chrono::steady_clock::now();
        op.ok = s.ok();
        EXPECT_OK(s);
        ops[t].push_back(op);
      }
    });
  }
  for (std::thread& t : threads) t.join();

  // Each record's list, as every replica reads it.
  std::vector<std::vector<std::string>> lists(kRecords);
  for (int r = 0; r < kRecords; ++r) {
    for (auto& replica : replicas) {
      std::vector<std::string> list;
      ASSERT_OK(replica->Read([&](Transaction& txn) -> absl::Status {
        ASSIGN_OR_RETURN(auto host, txn.GetHost(absl::StrCat("h", r)));
        list = host ? absl::StrSplit(host->agent_version(), ',') : std::vector<std::string>();
        return absl::OkStatus();
      }));
      if (replica == replicas.front()) lists[r] = list;
      EXPECT_EQ(list, lists[r]) << "replicas disagree on h" << r;
    }
  }
  std::map<std::string, std::pair<int, size_t>> position;  // id -> (record, index)
  for (int r = 0; r < kRecords; ++r) {
    for (size_t i = 0; i < lists[r].size(); ++i) {
      EXPECT_TRUE(position.emplace(lists[r][i], std::pair{r, i}).second)
          << lists[r][i] << " appended twice";
    }
  }
  std::vector<const Op*> acknowledged;
  for (const auto& thread_ops : ops) {
    for (const Op& op : thread_ops) {
      if (!op.ok) continue;
      acknowledged.push_back(&op);
      auto found = position.find(op.id);
      ASSERT_NE(found, position.end()) << op.id << " was acknowledged and lost";
      EXPECT_EQ(found->second.first, op.record) << op.id;
    }
  }
  EXPECT_EQ(acknowledged.size(), position.size());
  for (const Op* a : acknowledged) {
    for (const Op* b : acknowledged) {
      if (a->record == b->record && a->acknowledged < b->submitted) {
        EXPECT_LT(position[a->id].second, position[b->id].second)
            << a->id << " was acknowledged before " << b->id << " was submitted";
      }
    }
  }
}

TEST_F(EtcdStoreTest, AuditSequencesAreUniqueAndIncreasingAcrossReplicas) {
  auto a = OpenReplica();
  auto b = OpenReplica();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<std::thread> threads;
  for (EtcdStore* store : {a.get(), b.get()}) {
    threads.emplace_back([store] {
      for (int i = 0; i < 30; ++i) {
        EXPECT_OK(store->WriteSync([i](Transaction& txn) {
          return txn.AppendAudit(MakeAudit("alice", absl::StrCat("vm-", i), i));
        }));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<v1::AuditRecord> all;
  ASSERT_OK(a->Read([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(all, txn.ListAudit({}, 0, 1000));
    return absl::OkStatus();
  }));
  ASSERT_EQ(all.size(), 60u);
  for (size_t i = 1; i < all.size(); ++i) {
    EXPECT_GT(all[i - 1].sequence(), all[i].sequence()) << i;  // newest first, no repeat
  }
}

// The store's revisions are etcd's: what one replica commits, the other
// reports once it reads.

}  // namespace
}  // namespace cosched::store
