// SqliteStore and its file on disk: schema versions and migration, damaged
// or truncated files, data dirs it cannot create or write, a full disk, and
// how SQLite's result codes map to statuses.
#include "store/sqlite_store.h"

#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/sqlite_db.h"
#include "tests/store/sqlite_store_fixture.h"
#include "tests/testing/status_matchers.h"

namespace cosched::store {
namespace {

using ::testing::HasSubstr;

TEST_F(SqliteStoreTest, NewerSchemaIsRefused) {
  { ASSERT_NE(OpenStore(), nullptr); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(DbPath().c_str(), &db), SQLITE_OK);
  std::string sql = absl::StrCat(
      "UPDATE meta SET value = ", SqliteStore::LatestSchemaVersion() + 1,
      " WHERE key = 'schema_version'");
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);

  absl::Status status = OpenError();
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("schema version"));
  EXPECT_THAT(std::string(status.message()), HasSubstr(DbPath()));
}

TEST_F(SqliteStoreTest, SchemaVersionOneStoreIsMigratedKeepingItsData) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->WriteSync([](Transaction& txn) {
                      return txn.PutVm(MakeVm("vm-old"));
                    }).ok());
  }
  // Make it what version 1 wrote: no audit table, an index by trust group.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(DbPath().c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db,
                         "DROP TABLE audit; DROP TABLE vm_presence; DROP TABLE rollout; "
                         "CREATE INDEX vms_by_trust_group ON vms (trust_group, vm_id); "
                         "UPDATE meta SET value = 1 WHERE key = 'schema_version'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);

  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(SqliteStore::LatestSchemaVersion(), 5);
  ASSERT_TRUE(store->WriteSync([](Transaction& txn) -> absl::Status {
                    RETURN_IF_ERROR(txn.AppendAudit(MakeAudit("alice", "vm-old", 1)));
                    // Version 5 added the rollout.
                    v1::Rollout rollout;
                    rollout.set_rollout_id("r-1");
                    return txn.PutRollout(rollout);
                  }).ok());
  ASSERT_TRUE(store
                  ->Read([](Transaction& txn) -> absl::Status {
                    ASSIGN_OR_RETURN(auto vm, txn.GetVm("vm-old"));
                    EXPECT_TRUE(vm.has_value());
                    ASSIGN_OR_RETURN(auto audit, txn.ListAudit({}, 0, 10));
                    EXPECT_EQ(audit.size(), 1u);
                    return absl::OkStatus();
                  })
                  .ok());
  store.reset();
  ASSERT_EQ(sqlite3_open(DbPath().c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "SELECT value FROM meta WHERE key = 'schema_version'",
                               -1, &stmt, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(stmt, 0), 5);
  sqlite3_finalize(stmt);
  // Version 4 added the hosts that report each VM.
  ASSERT_EQ(sqlite3_prepare_v2(
                db, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'vm_presence'", -1,
                &stmt, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(stmt, 0), 1);
  sqlite3_finalize(stmt);
  // Version 3 dropped the index by trust group.
  ASSERT_EQ(sqlite3_prepare_v2(
                db, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'vms_by_trust_group'", -1,
                &stmt, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(stmt, 0), 0);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST_F(SqliteStoreTest, GarbageFileIsRefusedAsCorrupt) {
  std::filesystem::create_directories(data_dir_);
  {
    std::ofstream out(DbPath(), std::ios::binary);
    for (int i = 0; i < 512; ++i) out << "this is not a database ";
  }
  absl::Status status = OpenError();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("corrupt"));
  EXPECT_THAT(std::string(status.message()), HasSubstr(DbPath()));
  // Nothing was started over on top of it.
  EXPECT_EQ(std::filesystem::file_size(DbPath()), 512u * 23u);
}

TEST_F(SqliteStoreTest, DamagedPagesAreRefusedAsCorrupt) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 200; ++i) {
      PutAndRecord(*store, MakeVm(absl::StrCat("vm-", i), "t1", "h1", "t1/g1"));
    }
  }
  auto size = std::filesystem::file_size(DbPath());
  ASSERT_GT(size, 3 * 4096u);
  {
    std::fstream file(DbPath(),
                      std::ios::binary | std::ios::in | std::ios::out);
    file.seekp(4096);
    std::string junk(size - 4096, '\x5a');
    file.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  absl::Status status = OpenError();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("corrupt"));
}

TEST_F(SqliteStoreTest, TruncatedFileIsRefusedAsCorrupt) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 200; ++i) {
      PutAndRecord(*store, MakeVm(absl::StrCat("vm-", i), "t1", "h1", "t1/g1"));
    }
  }
  const auto size = std::filesystem::file_size(DbPath());
  ASSERT_GT(size, 4 * 4096u);
  // A copy cut short, as a full disk or an interrupted copy leaves it: the
  // header still says how many pages there should be.
  std::filesystem::resize_file(DbPath(), size / 2);
  absl::Status status = OpenError();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("corrupt"));
  // Refused, not repaired or started over.
  EXPECT_EQ(std::filesystem::file_size(DbPath()), size / 2);
}

TEST_F(SqliteStoreTest, UncreatableDataDirGivesAClearError) {
  std::string file = root_ + "/a-file";
  { std::ofstream out(file); }
  data_dir_ = file + "/data";
  absl::Status status = OpenError();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("cannot create store data dir"));
  EXPECT_THAT(std::string(status.message()), HasSubstr(data_dir_));
}

// Run by tests/store/with_small_fs.sh, which provides a read-only file
// system (root writes to any directory, so a mode bit would not do).
TEST_F(SqliteStoreTest, UnwritableDataDirGivesAClearError) {
  const char* read_only = getenv("COSCHED_TEST_READONLY_FS");
  ASSERT_NE(read_only, nullptr) << "run through tests/store/with_small_fs.sh";
  data_dir_ = read_only;
  absl::Status status = OpenError();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("not writable"));
  EXPECT_THAT(std::string(status.message()), HasSubstr(data_dir_));
}

TEST_F(SqliteStoreTest, InvalidOptionsAreRefused) {
  SqliteStoreOptions options;
  EXPECT_TRUE(absl::IsInvalidArgument(SqliteStore::Open(options).status()));
  options.data_dir = data_dir_;
  options.max_batch = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(SqliteStore::Open(options).status()));
}

// Run by tests/store/with_small_fs.sh, which mounts a small file system.
TEST_F(SqliteStoreTest, DiskFullFailsTheCommitAndKeepsAcknowledgedWrites) {
  const char* small_fs = getenv("COSCHED_TEST_SMALL_FS");
  ASSERT_NE(small_fs, nullptr) << "run through tests/store/with_small_fs.sh";
  data_dir_ = absl::StrCat(small_fs, "/store-", getpid());
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::Status status;
  int acknowledged = 0;
  int64_t last_revision = 0;
  for (int i = 0; i < 100000 && status.ok(); ++i) {
    v1::VM vm = MakeVm(absl::StrCat("vm-", i), "t1", "h1");
    vm.add_interference_classes(std::string(8192, 'x'));
    int64_t revision = 0;
    status = store->WriteSync([&](Transaction& txn) -> absl::Status {
      ASSIGN_OR_RETURN(revision, txn.WriteRevision());
      RETURN_IF_ERROR(txn.PutVm(vm));
      return txn.RecordChange("h1", vm.vm_id());
    });
    if (status.ok()) {
      ++acknowledged;
      last_revision = revision;
    }
  }
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("store disk full"));
  EXPECT_EQ(store->CurrentRevision(), last_revision);
  for (int i = 0; i < acknowledged; ++i) {
    EXPECT_TRUE(GetVm(*store, absl::StrCat("vm-", i)).has_value()) << i;
  }
  EXPECT_FALSE(GetVm(*store, absl::StrCat("vm-", acknowledged)).has_value());
  store.reset();
  std::filesystem::remove_all(data_dir_);
}

TEST(SqliteStatusTest, MapsResultCodes) {
  absl::Status full = SqliteStatus(SQLITE_FULL, "database or disk is full",
                                   "commit", "/d/x.db");
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_THAT(std::string(full.message()), HasSubstr("store disk full"));
  absl::Status corrupt =
      SqliteStatus(SQLITE_NOTADB, "file is not a database", "open", "/d/x.db");
  EXPECT_TRUE(absl::IsDataLoss(corrupt));
  EXPECT_THAT(std::string(corrupt.message()),
              HasSubstr("store at /d/x.db is corrupt"));
  absl::Status io =
      SqliteStatus(SQLITE_IOERR_FSYNC, "disk I/O error", "commit", "/d/x.db");
  EXPECT_TRUE(absl::IsUnavailable(io)) << io;
  EXPECT_THAT(std::string(io.message()),
              HasSubstr("commit failed on store /d/x.db"));
  EXPECT_TRUE(
      absl::IsUnavailable(SqliteStatus(SQLITE_READONLY, "ro", "commit", "/d")));
  EXPECT_OK(SqliteStatus(SQLITE_OK, "", "x", "/d"));
}

}  // namespace
}  // namespace cosched::store
