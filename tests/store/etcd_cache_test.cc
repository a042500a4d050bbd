// EtcdCache on its own, fed by hand as the watch and the writer feed it:
// which keys it holds, snapshots that read as of their revision while the
// cache moves on, one version per commit however it arrives, deletions the
// watch cannot undo, and versions pruned once nothing reads them. What it
// does inside EtcdStore, against etcd, is in etcd_store_test.cc.
#include "store/etcd_cache.h"

#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/store/watch_events.h"

namespace cosched::store {
namespace {

using ::testing::ElementsAre;

// One revision's events, as the watch applies them.
void Watched(EtcdCache& cache, int64_t revision, std::vector<mvccpb::Event> events) {
  google::protobuf::RepeatedPtrField<mvccpb::Event> all(events.begin(), events.end());
  cache.ApplyEvents(revision, all, 0, all.size());
}

std::string Value(const EtcdCache::Snapshot& view, const std::string& key) {
  std::optional<CachedKv> kv = view.Get(key);
  return kv ? kv->value : "<absent>";
}

std::vector<std::string> Keys(const EtcdCache::Snapshot& view, const std::string& begin,
                              const std::string& end) {
  std::vector<std::string> keys;
  for (const CachedKv& kv : view.Range(begin, end, 100)) keys.push_back(kv.key);
  return keys;
}

TEST(EtcdCache, HoldsTheRecordsWriteFunctionsReadOnly) {
  EtcdCache cache("/p");
  for (const char* key : {"/p/meta", "/p/rollout", "/p/vms/vm-1", "/p/vm_by/host/h1/vm-1",
                          "/p/policies/t1", "/p/hosts/h1", "/p/reports/h1", "/p/obs/vm-1/h1",
                          "/p/changes/h1/vm-1"}) {
    EXPECT_TRUE(cache.Holds(key)) << key;
  }
  for (const char* key : {"/p/audit/ff", "/p/leader", "/p/compact", "/p/replicas/a",
                          "/p/seen/a/0", "/p/restore-in-progress", "/pq/vms/vm-1", "/p",
                          "/p/vmsx/1", "/other/vms/vm-1"}) {
    EXPECT_FALSE(cache.Holds(key)) << key;
  }
  EXPECT_TRUE(cache.HoldsRange("/p/vms/", "/p/vms0"));
  EXPECT_TRUE(cache.HoldsRange("/p/vm_by/tenant/t1/", "/p/vm_by/tenant/t10"));
  EXPECT_FALSE(cache.HoldsRange("/p/vms/", "/p/vn"));  // beyond vms/
  EXPECT_FALSE(cache.HoldsRange("/p/audit/", "/p/audit0"));
  EXPECT_FALSE(cache.HoldsRange("/p/vms/a", ""));
}

TEST(EtcdCache, ASnapshotReadsAsOfItsRevisionWhileTheCacheMovesOn) {
  EtcdCache cache("/p");
  cache.ApplyCommit(5, {{"/p/vms/a", "a1"}, {"/p/vms/c", "c1"}});
  std::unique_ptr<EtcdCache::Snapshot> at5 = cache.Take();
  cache.ApplyCommit(6, {{"/p/vms/a", "a2"}, {"/p/vms/b", "b1"}});
  Watched(cache, 7, {DeleteEvent("/p/vms/c", 7)});
  std::unique_ptr<EtcdCache::Snapshot> at7 = cache.Take();

  EXPECT_EQ(at5->revision(), 5);
  EXPECT_EQ(Value(*at5, "/p/vms/a"), "a1");
  EXPECT_EQ(Value(*at5, "/p/vms/b"), "<absent>");
  EXPECT_THAT(Keys(*at5, "/p/vms/", "/p/vms0"), ElementsAre("/p/vms/a", "/p/vms/c"));
  EXPECT_EQ(at7->revision(), 7);
  EXPECT_EQ(Value(*at7, "/p/vms/a"), "a2");
  EXPECT_EQ(at7->Get("/p/vms/a")->mod_revision, 6);
  EXPECT_THAT(Keys(*at7, "/p/vms/", "/p/vms0"), ElementsAre("/p/vms/a", "/p/vms/b"));
  EXPECT_EQ(Keys(*at7, "/p/vms/", "/p/vms/b").size(), 1u);  // the end is excluded
}

TEST(EtcdCache, AnOwnCommitAndTheWatchsCopyOfItAreOneVersion) {
  EtcdCache cache("/p");
  cache.ApplyCommit(5, {{"/p/vms/a", "a1"}, {"/p/meta", "m5"}});
  const size_t versions = cache.versions();
  Watched(cache, 5, {PutEvent("/p/vms/a", "a1", 5), PutEvent("/p/meta", "m5", 5)});
  EXPECT_EQ(cache.versions(), versions);
  EXPECT_EQ(cache.revision(), 5);
}

TEST(EtcdCache, TheWatchCannotBringBackWhatAnOwnCommitDeleted) {
  EtcdCache cache("/p");
  // The writer commits twice before the watch delivers the first.
  cache.ApplyCommit(5, {{"/p/vms/a", "a1"}});
  cache.ApplyCommit(6, {{"/p/vms/a", std::nullopt}});
  Watched(cache, 5, {PutEvent("/p/vms/a", "a1", 5)});
  EXPECT_EQ(Value(*cache.Take(), "/p/vms/a"), "<absent>");
  Watched(cache, 6, {DeleteEvent("/p/vms/a", 6)});
  EXPECT_EQ(Value(*cache.Take(), "/p/vms/a"), "<absent>");
  // Once the watch is past the deletion and nothing reads older, it goes.
  EXPECT_EQ(cache.keys(), 0u);
  EXPECT_EQ(cache.versions(), 0u);
}

TEST(EtcdCache, VersionsArePrunedOnceNoSnapshotReadsThem) {
  EtcdCache cache("/p");
  Watched(cache, 1, {PutEvent("/p/meta", "m1", 1)});
  std::unique_ptr<EtcdCache::Snapshot> old = cache.Take();
  for (int r = 2; r <= 50; ++r) Watched(cache, r, {PutEvent("/p/meta", "m" + std::to_string(r), r)});
  // The snapshot at 1 keeps its version; the ones between nobody can read.
  EXPECT_EQ(Value(*old, "/p/meta"), "m1");
  EXPECT_LE(cache.versions(), 50u);
  old.reset();
  Watched(cache, 51, {PutEvent("/p/meta", "m51", 51)});
  EXPECT_EQ(cache.versions(), 1u);
  EXPECT_EQ(Value(*cache.Take(), "/p/meta"), "m51");
}

TEST(EtcdCache, EventsOfKeysItDoesNotHoldMoveOnlyItsRevision) {
  EtcdCache cache("/p");
  Watched(cache, 3, {PutEvent("/p/leader", "x", 3), PutEvent("/p/audit/ff", "y", 3)});
  EXPECT_EQ(cache.revision(), 3);
  EXPECT_EQ(cache.keys(), 0u);
  cache.ApplyProgress(9);
  EXPECT_EQ(cache.revision(), 9);
}

TEST(EtcdCache, WaitForReturnsOnceTheRevisionIsReached) {
  EtcdCache cache("/p");
  EXPECT_FALSE(cache.WaitFor(4, absl::Milliseconds(20)));
  std::thread watch([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Watched(cache, 4, {PutEvent("/p/vms/a", "a", 4)});
  });
  EXPECT_TRUE(cache.WaitFor(4, absl::Seconds(10)));
  watch.join();
  EXPECT_TRUE(cache.WaitFor(2, absl::ZeroDuration()));
}

}  // namespace
}  // namespace cosched::store
