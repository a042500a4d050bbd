// What only SqliteStore does: its data dir, revisions that only writes
// which take one use, and the change log's retention. The Store contract
// both backends keep is in store_contract_test.cc; the file on disk
// (schema, damage, data dir, full disk) is in sqlite_store_file_test.cc.
#include "store/sqlite_store.h"

#include <atomic>
#include <filesystem>
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
#include "tests/store/sqlite_store_fixture.h"
#include "tests/testing/status_matchers.h"

namespace cosched::store {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

TEST_F(SqliteStoreTest, DataDirIsTheOwnersOnly) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(std::filesystem::exists(DbPath()));
  EXPECT_EQ(std::filesystem::status(data_dir_).permissions() &
                std::filesystem::perms::all,
            std::filesystem::perms::owner_all);
}

TEST_F(SqliteStoreTest, RevisionsIncreaseAndPersist) {
  int64_t last = 0;
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->CurrentRevision(), 0);
    for (int i = 0; i < 10; ++i) {
      int64_t first = 0, second = 0;
      ASSERT_TRUE(store
                      ->WriteSync([&](Transaction& txn) -> absl::Status {
                        ASSIGN_OR_RETURN(first, txn.WriteRevision());
                        ASSIGN_OR_RETURN(second, txn.WriteRevision());
                        return absl::OkStatus();
                      })
                      .ok());
      EXPECT_EQ(first, second);
      EXPECT_GT(first, last);
      EXPECT_EQ(store->CurrentRevision(), first);
      last = first;
    }
    // A failed write does not move the committed revision.
    absl::Status failed =
        store->WriteSync([](Transaction& txn) -> absl::Status {
          RETURN_IF_ERROR(txn.WriteRevision().status());
          return absl::AbortedError("no");
        });
    EXPECT_TRUE(absl::IsAborted(failed));
    EXPECT_EQ(store->CurrentRevision(), last);
    // Writes that never ask for a revision do not use one.
    ASSERT_TRUE(store
                    ->WriteSync([](Transaction& txn) {
                      return txn.PutVm(MakeVm("vm-1"));
                    })
                    .ok());
    EXPECT_EQ(store->CurrentRevision(), last);
  }
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->CurrentRevision(), last);
  int64_t next = PutAndRecord(*store, MakeVm("vm-2", "t1", "h1"));
  EXPECT_GT(next, last);
}

TEST_F(SqliteStoreTest, ChangesSinceIsIncompleteAfterCompaction) {
  constexpr int64_t kRetention = 4;
  std::vector<int64_t> revisions;
  {
    auto store = OpenStore(kRetention);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 20; ++i) {
      revisions.push_back(
          PutAndRecord(*store, MakeVm(absl::StrCat("vm-", i), "t1", "h1")));
    }
    EXPECT_FALSE(ChangesSince(*store, "h1", 0).complete);
    EXPECT_FALSE(ChangesSince(*store, "h1", revisions[10]).complete);
    HostChanges recent = ChangesSince(*store, "h1", revisions[17]);
    EXPECT_TRUE(recent.complete);
    EXPECT_THAT(recent.vm_ids, UnorderedElementsAre("vm-18", "vm-19"));
  }
  // The horizon is durable.
  auto store = OpenStore(kRetention);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(ChangesSince(*store, "h1", 0).complete);
  EXPECT_TRUE(ChangesSince(*store, "h1", revisions[17]).complete);
}

}  // namespace
}  // namespace cosched::store
