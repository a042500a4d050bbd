// The Store contract's writer (store/store.h) on both backends: a failing
// write in a batch is undone alone, concurrent writers are all answered,
// readers see whole writes, a closing store commits what is queued, and
// answers run apart from the writer, in commit order. The records' own
// contract is in store_contract_test.cc, which instantiates the suite for
// both backends (tests/store/store_contract_fixture.h).
#include <atomic>
#include <chrono>
#include <latch>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/store/store_contract_fixture.h"
#include "tests/testing/status_matchers.h"

namespace cosched::store {
namespace {

using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

TEST_P(StoreContractTest, FailingWriteInABatchIsUndoneAlone) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::mutex mu;
  std::vector<std::vector<std::string>> observed;
  store->SetCommitObserver([&](const std::vector<std::string>& hosts, int64_t) {
    std::lock_guard<std::mutex> lock(mu);
    observed.push_back(hosts);
  });

  // Holding the writer inside a first write makes the next three one batch.
  std::latch blocker_started(1);
  std::latch release_blocker(1);
  store->Write(
      [&](Transaction&) {
        blocker_started.count_down();
        release_blocker.wait();
        return absl::OkStatus();
      },
      nullptr);
  blocker_started.wait();

  std::latch done(3);
  absl::Status a, b, c;
  store->Write(
      [](Transaction& txn) -> absl::Status {
        RETURN_IF_ERROR(txn.PutVm(MakeVm("vm-a", "t1", "ha")));
        return txn.RecordChange("ha", "vm-a");
      },
      [&](absl::Status s) {
        a = s;
        done.count_down();
      });
  store->Write(
      [](Transaction& txn) -> absl::Status {
        RETURN_IF_ERROR(txn.PutVm(MakeVm("vm-b", "t1", "hb")));
        RETURN_IF_ERROR(txn.RecordChange("hb", "vm-b"));
        return absl::AbortedError("b gives up");
      },
      [&](absl::Status s) {
        b = s;
        done.count_down();
      });
  store->Write(
      [](Transaction& txn) -> absl::Status {
        RETURN_IF_ERROR(txn.PutVm(MakeVm("vm-c", "t1", "hc")));
        return txn.RecordChange("hc", "vm-c");
      },
      [&](absl::Status s) {
        c = s;
        done.count_down();
      });
  release_blocker.count_down();
  done.wait();

  EXPECT_OK(a);
  EXPECT_TRUE(absl::IsAborted(b)) << b;
  EXPECT_EQ(b.message(), "b gives up");
  EXPECT_OK(c);
  EXPECT_TRUE(GetVm(*store, "vm-a").has_value());
  EXPECT_FALSE(GetVm(*store, "vm-b").has_value());
  EXPECT_TRUE(GetVm(*store, "vm-c").has_value());
  EXPECT_TRUE(ChangesSince(*store, "hb", 0).vm_ids.empty());

  // A write after the batch runs after its observer call.
  ASSERT_TRUE(
      store->WriteSync([](Transaction&) { return absl::OkStatus(); }).ok());
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(observed.size(), 1u);
  EXPECT_THAT(observed[0], UnorderedElementsAre("ha", "hc"));
}

TEST_P(StoreContractTest, ConcurrentBatchesWithFailuresKeepOnlySuccesses) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 4;
  constexpr int kWrites = 100;
  std::latch done(kThreads * kWrites);
  std::atomic<int> wrong_status{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        const bool fail = i % 3 == 1;
        std::string id = absl::StrCat("vm-", t, "-", i);
        store->Write(
            [id, fail](Transaction& txn) -> absl::Status {
              RETURN_IF_ERROR(txn.PutVm(MakeVm(id, "t1", "h1")));
              RETURN_IF_ERROR(txn.RecordChange("h1", id));
              if (fail) return absl::FailedPreconditionError("planned failure");
              return absl::OkStatus();
            },
            [&, fail](absl::Status s) {
              if (fail ? !absl::IsFailedPrecondition(s) : !s.ok())
                ++wrong_status;
              done.count_down();
            });
      }
    });
  }
  for (std::thread& t : threads) t.join();
  done.wait();
  EXPECT_EQ(wrong_status.load(), 0);

  std::set<std::string> expected;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kWrites; ++i) {
      if (i % 3 != 1) expected.insert(absl::StrCat("vm-", t, "-", i));
    }
  }
  std::vector<std::string> present =
      VmIds(ListVms(*store, {}, {.after = "", .limit = 1000}));
  EXPECT_THAT(present, UnorderedElementsAreArray(expected));
  EXPECT_THAT(ChangesSince(*store, "h1", 0).vm_ids,
              UnorderedElementsAreArray(expected));
}

TEST_P(StoreContractTest, ManyConcurrentWritersAreAllAcknowledgedAndPresent) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  constexpr int kWrites = 500;
  const int64_t revision_before = store->CurrentRevision();
  std::atomic<int> failures{0};
  std::latch done(kThreads * kWrites);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        std::string id = absl::StrCat("vm-", t, "-", i);
        std::string host = absl::StrCat("h", t);
        auto fn = [id, host](Transaction& txn) -> absl::Status {
          RETURN_IF_ERROR(txn.PutVm(MakeVm(id, "t1", host)));
          return txn.RecordChange(host, id);
        };
        // Half wait for each write, half pipeline them.
        if (t % 2 == 0) {
          if (!store->WriteSync(fn).ok()) ++failures;
          done.count_down();
        } else {
          store->Write(fn, [&](absl::Status s) {
            if (!s.ok()) ++failures;
            done.count_down();
          });
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  done.wait();
  EXPECT_EQ(failures.load(), 0);
  // Every write took a revision; SQLite gives each its own, etcd one per
  // batch committed together.
  EXPECT_GE(store->CurrentRevision(), revision_before + 1);
  EXPECT_LE(store->CurrentRevision(), revision_before + kThreads * kWrites + 1);

  size_t count = 0;
  Page page{.after = "", .limit = 1000};
  while (true) {
    std::vector<v1::VM> vms = ListVms(*store, {}, page);
    if (vms.empty()) break;
    count += vms.size();
    page.after = vms.back().vm_id();
  }
  EXPECT_EQ(count, static_cast<size_t>(kThreads * kWrites));
  EXPECT_EQ(ChangesSince(*store, "h3", 0).vm_ids.size(),
            static_cast<size_t>(kWrites));
}

TEST_P(StoreContractTest, ReadersSeeWholeWritesOnly) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&] {
      while (!stop) {
        absl::Status status =
            store->Read([&](Transaction& txn) -> absl::Status {
              ASSIGN_OR_RETURN(auto vms,
                               txn.ListVms({}, {.after = "", .limit = 1000}));
              if (vms.size() % 2 != 0) ++torn;
              return absl::OkStatus();
            });
        if (!status.ok()) ++torn;
      }
    });
  }
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(store
                    ->WriteSync([i](Transaction& txn) -> absl::Status {
                      RETURN_IF_ERROR(txn.PutVm(MakeVm(absl::StrCat("a-", i))));
                      return txn.PutVm(MakeVm(absl::StrCat("b-", i)));
                    })
                    .ok());
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
}

TEST_P(StoreContractTest, DestructorCommitsPendingWrites) {
  std::atomic<int> acknowledged{0};
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 50; ++i) {
      store->Write(
          [i](Transaction& txn) {
            return txn.PutVm(MakeVm(absl::StrCat("vm-", i)));
          },
          [&](absl::Status s) {
            if (s.ok()) ++acknowledged;
          });
    }
  }
  EXPECT_EQ(acknowledged.load(), 50);
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ListVms(*store, {}, {.after = "", .limit = 100}).size(), 50u);
}

TEST_P(StoreContractTest, DoneCallbacksMayChainWritesWhileTheStoreCloses) {
  std::atomic<int> acknowledged{0};
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    Store* s = store.get();
    s->Write([](Transaction& txn) { return txn.PutVm(MakeVm("vm-first")); },
             [&, s](absl::Status first) {
               if (!first.ok()) return;
               ++acknowledged;
               s->Write([](Transaction& txn) { return txn.PutVm(MakeVm("vm-chained")); },
                        [&](absl::Status chained) {
                          if (chained.ok()) ++acknowledged;
                        });
             });
  }  // closes while the first answer may not have run yet
  EXPECT_EQ(acknowledged.load(), 2);
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(GetVm(*store, "vm-chained").has_value());
}


// Answers run apart from the writer: a slow done callback does not hold the
// next commit back, and answers still come in commit order.
TEST_P(StoreContractTest, WriterCommitsOnWhileAnAnswerRuns) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::mutex mu;
  std::vector<std::string> order;
  std::atomic<int64_t> revision_seen_in_first_answer{0};
  auto put = [](const std::string& id) {
    return [id](Transaction& txn) -> absl::Status {
      RETURN_IF_ERROR(txn.WriteRevision().status());
      return txn.PutVm(MakeVm(id));
    };
  };
  const int64_t base = store->CurrentRevision();
  // vm-1's own revision, taken in its transaction: by the time its answer
  // runs, vm-2 may already have committed, so CurrentRevision() there could
  // be vm-2's.
  std::atomic<int64_t> first_committed{0};
  auto put_first = [&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(const int64_t revision, txn.WriteRevision());
    first_committed = revision;
    return txn.PutVm(MakeVm("vm-1"));
  };
  // vm-2's revision, taken in its transaction: at most its commit's, above
  // vm-1's commit (on etcd vm-1's WriteRevision may be below its commit).
  std::atomic<int64_t> second_revision{0};
  store->Write(put_first, [&](absl::Status s) {
    ASSERT_OK(s);
    // Wait (bounded) for the second write to commit meanwhile.
    for (int i = 0; i < 500 && (second_revision == 0 ||
                                store->CurrentRevision() < second_revision);
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    revision_seen_in_first_answer = store->CurrentRevision();
    std::lock_guard<std::mutex> lock(mu);
    order.push_back("vm-1");
  });
  // Queued once the first batch is being answered.
  while (store->CurrentRevision() <= base) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(store->WriteSync([&](Transaction& txn) -> absl::Status {
                ASSIGN_OR_RETURN(second_revision, txn.WriteRevision());
                RETURN_IF_ERROR(put("vm-2")(txn));
                std::lock_guard<std::mutex> lock(mu);
                order.push_back("vm-2 written");
                return absl::OkStatus();
              }).ok());
  EXPECT_GT(revision_seen_in_first_answer.load(), first_committed.load());
  EXPECT_EQ(revision_seen_in_first_answer.load(), store->CurrentRevision());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<std::string>{"vm-2 written", "vm-1"}));
}

}  // namespace
}  // namespace cosched::store
