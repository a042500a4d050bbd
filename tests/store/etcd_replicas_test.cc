// Leadership among csd replicas on one prefix, and the leader's jobs
// (issue #16, part 3), against a real etcd member: one leader at a time, a
// quick handover when it resigns, fenced writes that never commit once the
// leadership moved (also when it moves between a write's check and its
// commit), and compaction, the change-log sweep and audit pruning.
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/etcd_store.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace cosched::store {
namespace {

using ::testing::HasSubstr;

class EtcdReplicasTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(etcd_.Start()); }

  std::unique_ptr<EtcdStore> Open(const std::string& name,
                                  absl::Duration audit_retention = absl::InfiniteDuration(),
                                  int64_t prune_rows = 10000, bool compact = true,
                                  int64_t audit_window = 0) {
    EtcdStoreOptions options;
    options.client = etcd_.ClientOptions();
    options.maintenance.compact = compact;
    options.prefix = "/cosched";
    options.replicas.name = name;
    options.replicas.ttl = absl::Seconds(3);
    options.replicas.poll = absl::Milliseconds(100);
    options.replicas.seen_interval = absl::Milliseconds(200);
    // The tests run the jobs themselves (RunOnce).
    options.maintenance.interval = absl::ZeroDuration();
    options.maintenance.audit_retention = audit_retention;
    options.maintenance.prune_rows = prune_rows;
    options.maintenance.audit_window_records = audit_window;
    if (tweak_) tweak_(options);
    auto store = EtcdStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // A write that needs leadership: host `id`.
  static absl::Status FencedPutHost(Transaction& txn, const std::string& id) {
    RETURN_IF_ERROR(txn.RequireLeadership());
    v1::Host host;
    host.set_host_id(id);
    return txn.PutHost(host);
  }

  static bool HasHost(Store& store, const std::string& id) {
    bool found = false;
    EXPECT_OK(store.Read([&](Transaction& txn) -> absl::Status {
      ASSIGN_OR_RETURN(auto host, txn.GetHost(id));
      found = host.has_value();
      return absl::OkStatus();
    }));
    return found;
  }

  // Ends `store`'s leadership as an expired lease would: its lease is
  // revoked behind its back.
  void RevokeLeaderLease() {
    auto client = etcd::Client::Create(etcd_.ClientOptions());
    ASSERT_OK(client);
    auto leader = (*client)->Range("/cosched/leader", "");
    ASSERT_OK(leader);
    ASSERT_EQ(leader->kvs.size(), 1u);
    ASSERT_OK((*client)->LeaseRevoke(leader->kvs[0].lease()));
  }

  // The lease of the leader key as etcd holds it now; 0 when there is none.
  int64_t LeaderLease() {
    auto client = etcd::Client::Create(etcd_.ClientOptions());
    EXPECT_OK(client);
    if (!client.ok()) return -1;
    auto leader = (*client)->Range("/cosched/leader", "");
    EXPECT_OK(leader);
    if (!leader.ok() || leader->kvs.empty()) return 0;
    return leader->kvs[0].lease();
  }

  testing::EtcdMember etcd_;
  // Applied to the options of every store Open opens after it is set.
  std::function<void(EtcdStoreOptions&)> tweak_;
};

TEST_F(EtcdReplicasTest, OneReplicaLeadsAndTheNextTakesOverWhenItResigns) {
  auto a = Open("a");
  auto b = Open("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // The first to open leads at once; the other sees who does.
  EXPECT_TRUE(a->Leads());
  EXPECT_FALSE(b->Leads());
  EXPECT_EQ(b->replicas().leader(), "a");
  auto listed = a->replicas().List();
  ASSERT_OK(listed);
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].name(), "a");
  EXPECT_EQ((*listed)[1].name(), "b");

  std::atomic<int> b_became_leader{0};
  b->SetLeadershipObserver([&](bool leading) {
    if (leading) ++b_became_leader;
  });
  const int64_t a_lease = LeaderLease();
  ASSERT_NE(a_lease, 0);
  const auto resigned = std::chrono::steady_clock::now();
  a.reset();  // resigns: its lease, and both its keys, go at once
  // At once means before the destructor returns, not when the 3-s lease ttl
  // runs out: the leader key a held is gone (or already b's). Checked on
  // etcd rather than by a deadline on b, which a loaded machine can miss.
  EXPECT_NE(LeaderLease(), a_lease) << "a's resignation left its leader key behind";
  ASSERT_TRUE(testing::Eventually([&] { return b->Leads(); }, std::chrono::seconds(10)))
      << "b did not take over after a's resignation";
  const auto took_over = std::chrono::steady_clock::now() - resigned;
  // The observer runs after Leads() turns true (outside the replicas' lock).
  EXPECT_TRUE(testing::Eventually([&] { return b_became_leader.load() > 0; },
                                  std::chrono::seconds(5)));
  EXPECT_EQ(b_became_leader.load(), 1);
  RecordProperty("takeover_ms", static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(took_over).count()));
  listed = b->replicas().List();
  ASSERT_OK(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name(), "b");
}

TEST_F(EtcdReplicasTest, AFencedWriteOfAReplicaThatDoesNotLeadIsRefusedNamingTheLeader) {
  auto a = Open("a");
  auto b = Open("b");
  ASSERT_NE(b, nullptr);
  absl::Status refused = b->WriteSync([](Transaction& txn) { return FencedPutHost(txn, "h1"); });
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("(b) does not lead"));
  EXPECT_THAT(refused.message(), HasSubstr("a does"));
  EXPECT_FALSE(HasHost(*b, "h1"));
  // The leader's commits; unfenced writes commit on every replica.
  EXPECT_OK(a->WriteSync([](Transaction& txn) { return FencedPutHost(txn, "h1"); }));
  EXPECT_OK(b->WriteSync([](Transaction& txn) {
    v1::Host host;
    host.set_host_id("h2");
    return txn.PutHost(host);
  }));
  EXPECT_TRUE(HasHost(*b, "h1"));
  EXPECT_TRUE(HasHost(*a, "h2"));
}

TEST_F(EtcdReplicasTest, ALeaderWhoseLeaseExpiredCommitsNoFencedWriteAndStepsDown) {
  auto a = Open("a");
  auto b = Open("b");
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a->Leads());
  ASSERT_NO_FATAL_FAILURE(RevokeLeaderLease());
  ASSERT_TRUE(testing::Eventually([&] { return b->Leads(); }, std::chrono::seconds(10)));
  // a may not have noticed yet; its write does, by the fence.
  absl::Status refused = a->WriteSync([](Transaction& txn) { return FencedPutHost(txn, "h1"); });
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("b does"));
  EXPECT_FALSE(a->Leads());
  EXPECT_FALSE(HasHost(*a, "h1"));
  // It takes a new lease and stands by under b.
  ASSERT_TRUE(testing::Eventually(
      [&] {
        auto listed = b->replicas().List();
        return listed.ok() && listed->size() == 2;
      },
      std::chrono::seconds(10)));
  EXPECT_FALSE(a->Leads());
  EXPECT_EQ(a->replicas().leader(), "b");
}

TEST_F(EtcdReplicasTest, LeadershipLostBetweenTheCheckAndTheCommitFailsTheCommit) {
  auto a = Open("a");
  auto b = Open("b");
  ASSERT_NE(b, nullptr);
  int runs = 0;
  absl::Status status = a->WriteSync([&](Transaction& txn) -> absl::Status {
    ++runs;
    RETURN_IF_ERROR(txn.RequireLeadership());
    if (runs == 1) {
      // After the check: b takes over before this write's Txn is sent.
      RevokeLeaderLease();
      if (!testing::Eventually([&] { return b->Leads(); }, std::chrono::seconds(10))) {
        return absl::InternalError("b did not take over");
      }
    }
    v1::Host host;
    host.set_host_id("h1");
    return txn.PutHost(host);
  });
  // The Txn's compare on the leader key failed; the rerun's check refused.
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_EQ(runs, 2);
  EXPECT_FALSE(HasHost(*b, "h1"));
}

// Writes `n` hosts, each a commit.
void WriteHosts(Store& store, const std::string& prefix, int n) {
  for (int i = 0; i < n; ++i) {
    ASSERT_OK(store.WriteSync([&](Transaction& txn) {
      v1::Host host;
      host.set_host_id(absl::StrCat(prefix, i));
      return txn.PutHost(host);
    }));
  }
}

TEST_F(EtcdReplicasTest, TheLeaderCompactsToThePreviousRunsRevisionAndOnlyTheLeader) {
  auto a = Open("a");
  auto b = Open("b");
  ASSERT_NE(b, nullptr);
  ASSERT_NO_FATAL_FAILURE(WriteHosts(*a, "h", 3));
  auto client = etcd::Client::Create(etcd_.ClientOptions());
  ASSERT_OK(client);

  // The first run of a leadership only notes where history stands.
  auto first = a->maintenance().RunOnce();
  ASSERT_OK(first);
  EXPECT_TRUE(first->led);
  EXPECT_EQ(first->compacted_to, 0);
  auto noted = (*client)->Range("/cosched/meta", "");
  ASSERT_OK(noted);
  const int64_t kept_from = noted->revision;
  ASSERT_NO_FATAL_FAILURE(WriteHosts(*a, "later", 2));

  auto not_leader = b->maintenance().RunOnce();
  ASSERT_OK(not_leader);
  EXPECT_FALSE(not_leader->led);

  auto second = a->maintenance().RunOnce();
  ASSERT_OK(second);
  EXPECT_EQ(second->compacted_to, kept_from);
  EXPECT_EQ(second->oldest_revision, kept_from);
  EXPECT_EQ(a->maintenance().oldest_revision(), kept_from);
  // History before it is gone; from it on, it is kept.
  EXPECT_EQ((*client)->Range("/cosched/meta", "", kept_from - 1).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_OK((*client)->Range("/cosched/meta", "", kept_from).status());
  auto record = (*client)->Range("/cosched/compact", "");
  ASSERT_OK(record);
  ASSERT_EQ(record->kvs.size(), 1u);
  EtcdCompaction compaction;
  ASSERT_TRUE(compaction.ParseFromString(record->kvs[0].value()));
  EXPECT_EQ(compaction.revision(), kept_from);

  // A new leader waits a whole run before it compacts.
  a.reset();
  ASSERT_TRUE(testing::Eventually([&] { return b->Leads(); }, std::chrono::seconds(10)));
  ASSERT_NO_FATAL_FAILURE(WriteHosts(*b, "more", 1));
  auto takeover = b->maintenance().RunOnce();
  ASSERT_OK(takeover);
  EXPECT_TRUE(takeover->led);
  EXPECT_EQ(takeover->compacted_to, 0);
  // The store still reads and writes after the compaction.
  EXPECT_TRUE(HasHost(*b, "later1"));
}

TEST_F(EtcdReplicasTest, TheSweepDeletesChangeRecordsBelowTheCompactionAndKeepsNewerOnes) {
  auto a = Open("a");
  ASSERT_NE(a, nullptr);
  auto record_change = [&](const std::string& host, const std::string& vm) {
    ASSERT_OK(a->WriteSync([&](Transaction& txn) { return txn.RecordChange(host, vm); }));
  };
  record_change("h1", "gone-1");
  record_change("h1", "gone-2");
  record_change("h2", "gone-3");
  ASSERT_OK(a->maintenance().RunOnce().status());  // notes the revision
  record_change("h1", "recent");
  const int64_t after_recent = a->CurrentRevision();
  auto run = a->maintenance().RunOnce();
  ASSERT_OK(run);
  EXPECT_GT(run->compacted_to, 0);
  EXPECT_EQ(run->changes_swept, 3);

  auto client = etcd::Client::Create(etcd_.ClientOptions());
  ASSERT_OK(client);
  auto left = (*client)->Range("/cosched/changes/", etcd::PrefixEnd("/cosched/changes/"));
  ASSERT_OK(left);
  ASSERT_EQ(left->kvs.size(), 1u);
  EXPECT_EQ(left->kvs[0].key(), "/cosched/changes/h1/recent");

  // An agent from before the compaction gets a snapshot; one after it, the
  // changes since.
  ASSERT_OK(a->Read([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(HostChanges old, txn.ChangesSince("h1", run->compacted_to - 1));
    EXPECT_FALSE(old.complete);
    ASSIGN_OR_RETURN(HostChanges fresh, txn.ChangesSince("h1", run->compacted_to));
    EXPECT_TRUE(fresh.complete);
    EXPECT_THAT(fresh.vm_ids, ::testing::ElementsAre("recent"));
    ASSIGN_OR_RETURN(HostChanges none, txn.ChangesSince("h1", after_recent));
    EXPECT_TRUE(none.complete);
    EXPECT_TRUE(none.vm_ids.empty());
    return absl::OkStatus();
  }));
}

// Issue #32 item 10: with compaction off (a shared etcd that something else
// compacts, or none does), the change log is still swept: the leader raises
// the change-log horizon instead of compacting, never touches etcd's
// history, and reads the records to sweep a page (one Txn) at a time.
TEST_F(EtcdReplicasTest, WithCompactionOffTheSweepRaisesTheHorizonInPagesAndKeepsHistory) {
  auto a = Open("a", absl::InfiniteDuration(), 10000, /*compact=*/false);
  ASSERT_NE(a, nullptr);
  // 300 records: three pages of at most 127 (max_txn_ops 128, one compare
  // is the fence).
  for (int w = 0; w < 3; ++w) {
    ASSERT_OK(a->WriteSync([&](Transaction& txn) -> absl::Status {
      for (int i = 0; i < 100; ++i) {
        RETURN_IF_ERROR(txn.RecordChange(i % 2 == 0 ? "h1" : "h2",
                                         absl::StrCat("gone-", w, "-", i)));
      }
      return absl::OkStatus();
    }));
  }
  auto client = etcd::Client::Create(etcd_.ClientOptions());
  ASSERT_OK(client);
  const int64_t early = (*client)->Range("/cosched/meta", "")->revision;
  auto noted = a->maintenance().RunOnce();  // notes the revision
  ASSERT_OK(noted);
  EXPECT_EQ(noted->horizon_raised_to, 0);
  ASSERT_OK(a->WriteSync([&](Transaction& txn) { return txn.RecordChange("h1", "recent"); }));

  auto run = a->maintenance().RunOnce();
  ASSERT_OK(run);
  EXPECT_EQ(run->compacted_to, 0);
  EXPECT_GE(run->horizon_raised_to, early);
  EXPECT_EQ(run->changes_swept, 300);
  auto left = (*client)->Range("/cosched/changes/", etcd::PrefixEnd("/cosched/changes/"));
  ASSERT_OK(left);
  ASSERT_EQ(left->kvs.size(), 1u);
  EXPECT_EQ(left->kvs[0].key(), "/cosched/changes/h1/recent");
  // etcd's history is as it was: nothing compacted.
  EXPECT_OK((*client)->Range("/cosched/meta", "", 2).status());
  EXPECT_EQ((*client)->Range("/cosched/compact", "")->kvs.size(), 0u);

  // Below the horizon an agent gets a snapshot; from it, the changes since.
  ASSERT_OK(a->Read([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(HostChanges old, txn.ChangesSince("h1", run->horizon_raised_to - 1));
    EXPECT_FALSE(old.complete);
    ASSIGN_OR_RETURN(HostChanges fresh, txn.ChangesSince("h1", run->horizon_raised_to));
    EXPECT_TRUE(fresh.complete);
    EXPECT_THAT(fresh.vm_ids, ::testing::ElementsAre("recent"));
    return absl::OkStatus();
  }));
  // The store writes on after the leader rewrote meta.
  ASSERT_NO_FATAL_FAILURE(WriteHosts(*a, "after", 2));
  EXPECT_TRUE(HasHost(*a, "after1"));
}

// Issue #37 item 4: csd compacts only a cluster it is told is its own, and
// finds every run where etcd's history begins, whoever compacts it; a
// history that grows past the bound and has not moved for the time allowed
// is warned of.
TEST_F(EtcdReplicasTest, TheLeaderFindsWhereEtcdsHistoryBeginsAndWarnsWhenItStaysPut) {
  tweak_ = [](EtcdStoreOptions& options) {
    // Well above what the replicas' own liveness writes (every 200 ms
    // here) add between two steps of the test.
    options.maintenance.uncompacted_revisions = 50;
    options.maintenance.uncompacted_warning = absl::ZeroDuration();
  };
  auto a = Open("a", absl::InfiniteDuration(), 10000, /*compact=*/false);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->maintenance().oldest_revision(), 0);  // not measured yet
  ASSERT_NO_FATAL_FAILURE(WriteHosts(*a, "h", 60));
  auto client = etcd::Client::Create(etcd_.ClientOptions());
  ASSERT_OK(client);

  // Nothing compacted etcd: it serves every revision from 1, more than
  // the bound after it.
  auto first = a->maintenance().RunOnce();
  ASSERT_OK(first);
  EXPECT_EQ(first->compacted_to, 0);
  EXPECT_EQ(first->oldest_revision, 1);
  EXPECT_TRUE(first->uncompacted);
  EXPECT_OK((*client)->Range("/cosched/meta", "", 1).status());  // csd did not compact

  // etcd's own compaction (as --auto-compaction would): found exactly,
  // and with the history after it under the bound, no warning.
  const int64_t now = (*client)->Range("/cosched/meta", "")->revision;
  ASSERT_OK((*client)->Compact(now - 1));
  auto second = a->maintenance().RunOnce();
  ASSERT_OK(second);
  EXPECT_EQ(second->oldest_revision, now - 1);
  EXPECT_EQ(a->maintenance().oldest_revision(), now - 1);
  EXPECT_FALSE(second->uncompacted);
  // The store reads and writes on.
  ASSERT_NO_FATAL_FAILURE(WriteHosts(*a, "after", 1));
  EXPECT_TRUE(HasHost(*a, "h1"));
}

TEST_F(EtcdReplicasTest, AHistoryThatHasNotStayedPutLongEnoughIsNotWarnedOf) {
  tweak_ = [](EtcdStoreOptions& options) {
    options.maintenance.uncompacted_revisions = 50;
    options.maintenance.uncompacted_warning = absl::Hours(1);
  };
  auto a = Open("a", absl::InfiniteDuration(), 10000, /*compact=*/false);
  ASSERT_NE(a, nullptr);
  ASSERT_NO_FATAL_FAILURE(WriteHosts(*a, "h", 60));
  auto run = a->maintenance().RunOnce();
  ASSERT_OK(run);
  EXPECT_EQ(run->oldest_revision, 1);
  EXPECT_FALSE(run->uncompacted);  // first seen there just now
}

// Issue #37 item 3: names are stable (csd's default is the host name), so
// two replicas could be given one: the second does not start, naming the
// setting, and a name held by a predecessor that was killed is taken once
// that one's lease expires.
TEST_F(EtcdReplicasTest, ANameAnotherLiveReplicaHoldsIsRefusedAtOpenNamingTheSetting) {
  auto a = Open("a");
  ASSERT_NE(a, nullptr);
  EtcdStoreOptions options;
  options.client = etcd_.ClientOptions();
  options.prefix = "/cosched";
  options.replicas.name = "a";
  options.replicas.ttl = absl::Seconds(3);
  options.replicas.poll = absl::Milliseconds(100);
  options.maintenance.interval = absl::ZeroDuration();
  auto twin = EtcdStore::Open(options);
  ASSERT_FALSE(twin.ok());
  EXPECT_EQ(twin.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(twin.status().message(), HasSubstr("replica name 'a' is held by another replica"));
  EXPECT_THAT(twin.status().message(), HasSubstr("store.etcd.replica_name"));
  // The first one's records are its own still.
  auto listed = a->replicas().List();
  ASSERT_OK(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name(), "a");
  EXPECT_TRUE(a->Leads());
}

TEST_F(EtcdReplicasTest, ANameHeldByAReplicaThatDiedIsTakenOnceItsLeaseExpires) {
  // What a SIGKILLed "a" leaves: its key under a lease nobody renews.
  auto client = etcd::Client::Create(etcd_.ClientOptions());
  ASSERT_OK(client);
  auto lease = (*client)->LeaseGrant(3);
  ASSERT_OK(lease);
  EtcdReplica dead;
  dead.set_name("a");
  ASSERT_OK((*client)->Put("/cosched/replicas/a", dead.SerializeAsString(), *lease).status());
  auto a = Open("a");  // waits for the lease to expire
  ASSERT_NE(a, nullptr);
  auto registered = (*client)->Range("/cosched/replicas/a", "");
  ASSERT_OK(registered);
  ASSERT_EQ(registered->kvs.size(), 1u);
  EXPECT_NE(registered->kvs[0].lease(), *lease);
  ASSERT_TRUE(testing::Eventually([&] { return a->Leads(); }, std::chrono::seconds(5)));
}

TEST_F(EtcdReplicasTest, AuditPruningDeletesOnlyRecordsOlderThanTheRetentionOldestFirst) {
  auto a = Open("a", absl::Hours(24), /*prune_rows=*/3);
  ASSERT_NE(a, nullptr);
  const int64_t now = absl::ToUnixNanos(absl::Now());
  const int64_t old = absl::ToUnixNanos(absl::Now() - absl::Hours(48));
  auto append = [&](const std::string& subject, int64_t at) {
    ASSERT_OK(a->WriteSync([&](Transaction& txn) {
      v1::AuditRecord record;
      record.set_who("tester");
      record.set_method("TagVM");
      record.set_subject(subject);
      record.set_time_unix_ns(at);
      return txn.AppendAudit(record);
    }));
  };
  for (int i = 0; i < 5; ++i) append(absl::StrCat("old-", i), old + i);
  for (int i = 0; i < 2; ++i) append(absl::StrCat("new-", i), now + i);
  auto subjects = [&] {
    std::vector<std::string> out;
    EXPECT_OK(a->Read([&](Transaction& txn) -> absl::Status {
      ASSIGN_OR_RETURN(auto records, txn.ListAudit(AuditFilter(), 0, 100));
      for (const auto& r : records) out.push_back(r.subject());
      return absl::OkStatus();
    }));
    return out;
  };

  // At most prune_rows a run, the oldest first.
  auto first = a->maintenance().RunOnce();
  ASSERT_OK(first);
  EXPECT_EQ(first->audit_pruned, 3);
  EXPECT_THAT(subjects(), ::testing::ElementsAre("new-1", "new-0", "old-4", "old-3"));
  auto second = a->maintenance().RunOnce();
  ASSERT_OK(second);
  EXPECT_EQ(second->audit_pruned, 2);
  EXPECT_THAT(subjects(), ::testing::ElementsAre("new-1", "new-0"));
  auto third = a->maintenance().RunOnce();
  ASSERT_OK(third);
  EXPECT_EQ(third->audit_pruned, 0);
  // Sequences go on from where they were.
  append("newest", now + 10);
  EXPECT_THAT(subjects(), ::testing::ElementsAre("newest", "new-1", "new-0"));
}

// The audit window: the leader keeps the newest audit_window_records
// records, deleting the rest prune_rows a Txn until none is left, whatever
// their age; a replica that does not lead deletes nothing.
TEST_F(EtcdReplicasTest, TheAuditWindowKeepsTheNewestRecordsOnly) {
  auto a = Open("a", absl::InfiniteDuration(), /*prune_rows=*/7, /*compact=*/true,
                /*audit_window=*/10);
  ASSERT_NE(a, nullptr);
  auto b = Open("b", absl::InfiniteDuration(), 7, true, 10);
  ASSERT_NE(b, nullptr);
  auto append = [&](int n) {
    ASSERT_OK(a->WriteSync([&](Transaction& txn) -> absl::Status {
      for (int i = 0; i < n; ++i) {
        v1::AuditRecord record;
        record.set_who("tester");
        record.set_method("TagVM");
        record.set_subject(absl::StrCat("vm-", i));
        record.set_time_unix_ns(absl::ToUnixNanos(absl::Now()));
        RETURN_IF_ERROR(txn.AppendAudit(record));
      }
      return absl::OkStatus();
    }));
  };
  auto sequences = [&] {
    std::vector<int64_t> out;
    EXPECT_OK(a->Read([&](Transaction& txn) -> absl::Status {
      ASSIGN_OR_RETURN(auto records, txn.ListAuditAfter(0, 1000));
      for (const auto& r : records) out.push_back(r.sequence());
      return absl::OkStatus();
    }));
    return out;
  };
  append(40);
  auto not_leader = b->maintenance().TrimAuditWindowOnce();
  ASSERT_OK(not_leader);
  EXPECT_EQ(*not_leader, 0);
  auto trimmed = a->maintenance().TrimAuditWindowOnce();
  ASSERT_OK(trimmed);
  EXPECT_EQ(*trimmed, 30);  // in Txns of 7, until none was left
  std::vector<int64_t> kept = sequences();
  ASSERT_EQ(kept.size(), 10u);
  EXPECT_EQ(kept.front(), 31);
  EXPECT_EQ(kept.back(), 40);
  // New records push the oldest out; a run with nothing beyond the window
  // deletes nothing.
  append(3);
  auto run = a->maintenance().RunOnce();
  ASSERT_OK(run);
  EXPECT_EQ(run->audit_trimmed, 3);
  EXPECT_EQ(sequences().front(), 34);
  auto again = a->maintenance().TrimAuditWindowOnce();
  ASSERT_OK(again);
  EXPECT_EQ(*again, 0);
  EXPECT_EQ(sequences().size(), 10u);
}

// Which hosts each replica hears (the seen records): a replica reads the
// others' and not its own, a record too big for one etcd request is
// written in parts and read back whole, a shorter one leaves no part of
// the longer one behind, and a replica's record goes with it.
TEST_F(EtcdReplicasTest, EachReplicaReadsWhichHostsTheOthersHearAndTheRecordGoesWithIt) {
  std::unique_ptr<EtcdStore> a = Open("a");
  std::unique_ptr<EtcdStore> b = Open("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto hosts = [](int n, const std::string& problem) {
    std::vector<EtcdSeenHost> list(n);
    for (int i = 0; i < n; ++i) {
      list[i].set_host_id(absl::StrCat("hypervisor-", i));
      list[i].set_last_report_unix_ns(1700000000000000000 + i);
      list[i].set_connected(i % 2 == 0);
      list[i].set_problem(problem);
    }
    return list;
  };
  // Over three parts: 6 000 hosts of about 230 bytes each.
  const std::string problem(200, 'p');
  ASSERT_OK(a->replicas().PublishSeen(hosts(6000, problem)));
  auto parts = a->client().Range("/cosched/seen/a/", etcd::PrefixEnd("/cosched/seen/a/"));
  ASSERT_OK(parts.status());
  EXPECT_GE(parts->kvs.size(), 3u);
  for (const auto& kv : parts->kvs) {
    EXPECT_LE(kv.value().size(), EtcdReplicas::kSeenPartBytes) << kv.key();
  }

  auto seen_by_b = b->replicas().ListSeen();
  ASSERT_OK(seen_by_b.status());
  ASSERT_EQ(seen_by_b->size(), 1u);
  const EtcdSeen& record = (*seen_by_b)[0];
  EXPECT_EQ(record.replica(), "a");
  ASSERT_EQ(record.hosts_size(), 6000);
  EXPECT_EQ(record.hosts(5999).host_id(), "hypervisor-5999");
  EXPECT_EQ(record.hosts(5999).last_report_unix_ns(), 1700000000000000000 + 5999);
  EXPECT_FALSE(record.hosts(5999).connected());
  EXPECT_TRUE(record.hosts(5998).connected());
  EXPECT_EQ(record.hosts(0).problem(), problem);
  // Its own is not among what a reads.
  auto seen_by_a = a->replicas().ListSeen();
  ASSERT_OK(seen_by_a.status());
  EXPECT_TRUE(seen_by_a->empty());

  // Shorter: one part, nothing of the longer record left.
  ASSERT_OK(a->replicas().PublishSeen(hosts(2, "")));
  seen_by_b = b->replicas().ListSeen();
  ASSERT_OK(seen_by_b.status());
  ASSERT_EQ(seen_by_b->size(), 1u);
  EXPECT_EQ((*seen_by_b)[0].hosts_size(), 2);

  // A replica that hears nobody says so: an empty record, not none.
  ASSERT_OK(b->replicas().PublishSeen({}));
  seen_by_a = a->replicas().ListSeen();
  ASSERT_OK(seen_by_a.status());
  ASSERT_EQ(seen_by_a->size(), 1u);
  EXPECT_EQ((*seen_by_a)[0].replica(), "b");
  EXPECT_EQ((*seen_by_a)[0].hosts_size(), 0);

  // Backups leave the records out: they live only as long as the replica.
  EXPECT_TRUE(IsReplicaKey("seen/a/0000"));

  // a resigns: its record goes with its lease.
  a.reset();
  seen_by_b = b->replicas().ListSeen();
  ASSERT_OK(seen_by_b.status());
  EXPECT_TRUE(seen_by_b->empty());
}

// The exchange runs on the campaign's thread every seen_interval: what
// the source says is written, and the sink gets the others' records.
TEST_F(EtcdReplicasTest, TheExchangeWritesTheSourceAndHandsTheOthersToTheSink) {
  std::unique_ptr<EtcdStore> a = Open("a");
  std::unique_ptr<EtcdStore> b = Open("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::mutex mu;
  std::vector<EtcdSeen> seen_by_b;
  a->replicas().SetSeenExchange(
      [] {
        EtcdSeenHost host;
        host.set_host_id("hv-1");
        host.set_connected(true);
        return std::vector<EtcdSeenHost>{host};
      },
      [](std::vector<EtcdSeen>) {});
  b->replicas().SetSeenExchange([] { return std::vector<EtcdSeenHost>(); },
                                [&](std::vector<EtcdSeen> others) {
                                  std::lock_guard<std::mutex> lock(mu);
                                  seen_by_b = std::move(others);
                                });
  EXPECT_TRUE(testing::Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen_by_b.size() == 1 && seen_by_b[0].hosts_size() == 1 &&
           seen_by_b[0].hosts(0).host_id() == "hv-1" && seen_by_b[0].hosts(0).connected();
  }));
  // Stopped: neither is called after SetSeenExchange returns.
  b->replicas().SetSeenExchange(nullptr, nullptr);
  {
    std::lock_guard<std::mutex> lock(mu);
    seen_by_b.clear();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_TRUE(seen_by_b.empty());
}

TEST(EtcdReplicasOptionsTest, BadOptionsNameTheirField) {
  EtcdReplicasOptions options;
  options.name = "has space";
  EXPECT_THAT(ValidateEtcdReplicasOptions(options).message(),
              HasSubstr("store.etcd.replica_name 'has space'"));
  options.name = "ok";
  options.ttl = absl::Seconds(1);
  EXPECT_THAT(ValidateEtcdReplicasOptions(options).message(),
              HasSubstr("store.etcd.lease_ttl_s must be 2 to 300"));
  options.ttl = absl::Seconds(10);
  options.seen_interval = absl::Milliseconds(100);
  EXPECT_THAT(ValidateEtcdReplicasOptions(options).message(),
              HasSubstr("store.etcd.liveness_interval_ms must be 200 to 60000"));
  options.seen_interval = absl::Seconds(61);
  EXPECT_THAT(ValidateEtcdReplicasOptions(options).message(),
              HasSubstr("store.etcd.liveness_interval_ms must be 200 to 60000"));
  options.seen_interval = absl::Seconds(5);
  EXPECT_OK(ValidateEtcdReplicasOptions(options));
}

}  // namespace
}  // namespace cosched::store
