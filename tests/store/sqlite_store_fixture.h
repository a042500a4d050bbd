// The fixture of the SqliteStore tests: a store in a fresh temporary
// directory. Records and reads are in store_test_records.h.
#ifndef COSCHED_TESTS_STORE_SQLITE_STORE_FIXTURE_H_
#define COSCHED_TESTS_STORE_SQLITE_STORE_FIXTURE_H_

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "store/sqlite_store.h"
#include "tests/store/store_test_records.h"

namespace cosched::store {

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/cosched-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    data_dir_ = root_ + "/data";
  }

  void TearDown() override { std::filesystem::remove_all(root_); }

  std::unique_ptr<SqliteStore> OpenStore(int64_t retention = 100000) {
    SqliteStoreOptions options;
    options.data_dir = data_dir_;
    options.changelog_retention = retention;
    absl::StatusOr<std::unique_ptr<SqliteStore>> store =
        SqliteStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  absl::Status OpenError() {
    SqliteStoreOptions options;
    options.data_dir = data_dir_;
    return SqliteStore::Open(options).status();
  }

  std::string DbPath() const { return data_dir_ + "/cosched.db"; }

  std::string root_;
  std::string data_dir_;
};

}  // namespace cosched::store

#endif  // COSCHED_TESTS_STORE_SQLITE_STORE_FIXTURE_H_
