// The fixture of the Store contract tests, parameterized by backend:
// "sqlite" (a fresh data dir) or "etcd" (a real etcd member started for the
// test, and a prefix of its own). OpenStore opens the same store again each
// time it is called, as a restart would.
#ifndef COSCHED_TESTS_STORE_STORE_CONTRACT_FIXTURE_H_
#define COSCHED_TESTS_STORE_STORE_CONTRACT_FIXTURE_H_

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "store/etcd_store.h"
#include "store/sqlite_store.h"
#include "tests/store/store_test_records.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/temp_dir.h"

namespace cosched::store {

class StoreContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "etcd") {
      etcd_ = std::make_unique<testing::EtcdMember>();
      absl::Status started = etcd_->Start();
      ASSERT_TRUE(started.ok()) << started;
    }
  }

  std::unique_ptr<Store> OpenStore() {
    if (GetParam() == "etcd") {
      EtcdStoreOptions options;
      options.client = etcd_->ClientOptions();
      options.prefix = "/contract";
      auto store = EtcdStore::Open(options);
      EXPECT_TRUE(store.ok()) << store.status();
      return store.ok() ? std::move(*store) : nullptr;
    }
    SqliteStoreOptions options;
    options.data_dir = dir_.Sub("data");
    auto store = SqliteStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  testing::TempDir dir_;
  std::unique_ptr<testing::EtcdMember> etcd_;
};

}  // namespace cosched::store

#endif  // COSCHED_TESTS_STORE_STORE_CONTRACT_FIXTURE_H_
