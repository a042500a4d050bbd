// The fixture of the EtcdStore tests: an etcd member of the test's own and
// replicas on it, each a store of its own on a shared prefix.
#ifndef COSCHED_TESTS_STORE_ETCD_STORE_FIXTURE_H_
#define COSCHED_TESTS_STORE_ETCD_STORE_FIXTURE_H_

#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "store/etcd_store.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/status_matchers.h"

namespace cosched::store {

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(etcd_.Start()); }

  // A replica: a store of its own on the shared prefix.
  std::unique_ptr<EtcdStore> OpenReplica(const std::string& prefix = "/cosched") {
    EtcdStoreOptions options;
    options.client = etcd_.ClientOptions();
    options.prefix = prefix;
    auto store = EtcdStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  testing::EtcdMember etcd_;
};

}  // namespace cosched::store

#endif  // COSCHED_TESTS_STORE_ETCD_STORE_FIXTURE_H_
