// The audit trail's retention: SqliteStore deletes records older than
// options.audit_retention, oldest first, a bounded number per write batch,
// and never the newest (so sequences are never reused).
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "store/sqlite_store.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace cosched::store {
namespace {

v1::AuditRecord Record(const std::string& subject, absl::Time time) {
  v1::AuditRecord record;
  record.set_who("alice");
  record.set_role("admin");
  record.set_method("TagVM");
  record.set_subject(subject);
  record.set_time_unix_ns(absl::ToUnixNanos(time));
  return record;
}

class AuditRetentionTest : public ::testing::Test {
 protected:
  std::unique_ptr<SqliteStore> Open(absl::Duration retention, int64_t prune_rows = 10000,
                                    int64_t window = 0) {
    SqliteStoreOptions options;
    options.data_dir = dir_.Sub("data");
    options.audit_retention = retention;
    options.audit_prune_rows = prune_rows;
    options.audit_window_records = window;
    auto store = SqliteStore::Open(options);
    EXPECT_OK(store);
    return store.ok() ? std::move(*store) : nullptr;
  }

  // Appends records in one batch, in order.
  void Append(Store& store, const std::vector<v1::AuditRecord>& records) {
    absl::Status status = store.WriteSync([&](Transaction& txn) -> absl::Status {
      for (const v1::AuditRecord& r : records) RETURN_IF_ERROR(txn.AppendAudit(r));
      return absl::OkStatus();
    });
    ASSERT_OK(status);
  }

  // A write that changes nothing but the audit trail's pruning.
  void Touch(Store& store) {
    absl::Status status = store.WriteSync([](Transaction&) { return absl::OkStatus(); });
    ASSERT_OK(status);
  }

  // Subjects, oldest first, with their sequences.
  std::vector<std::pair<std::string, int64_t>> Trail(Store& store) {
    std::vector<v1::AuditRecord> records;
    absl::Status status = store.Read([&](Transaction& txn) -> absl::Status {
      ASSIGN_OR_RETURN(records, txn.ListAudit({}, 0, 1000));
      return absl::OkStatus();
    });
    EXPECT_OK(status);
    std::vector<std::pair<std::string, int64_t>> out;
    for (auto it = records.rbegin(); it != records.rend(); ++it) {
      out.emplace_back(it->subject(), it->sequence());
    }
    return out;
  }

  static std::vector<std::string> Subjects(const std::vector<std::pair<std::string, int64_t>>& t) {
    std::vector<std::string> out;
    for (const auto& [subject, sequence] : t) out.push_back(subject);
    return out;
  }

  cosched::testing::TempDir dir_;
};

TEST_F(AuditRetentionTest, RecordsPastTheRetentionGoAtTheNextWriteAndYoungOnesStay) {
  const absl::Time now = absl::Now();
  {
    auto store = Open(absl::InfiniteDuration());
    ASSERT_NE(store, nullptr);
    Append(*store, {Record("old-1", now - absl::Hours(24 * 40)),
                    Record("old-2", now - absl::Hours(24 * 31)),
                    Record("young", now - absl::Hours(24 * 29)),
                    Record("new", now)});
    Touch(*store);
    EXPECT_EQ(Trail(*store).size(), 4u) << "an infinite retention keeps everything";
  }
  auto store = Open(absl::Hours(24 * 30));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Trail(*store).size(), 4u) << "opening deletes nothing by itself";
  Touch(*store);
  EXPECT_EQ(Subjects(Trail(*store)), (std::vector<std::string>{"young", "new"}));
}

TEST_F(AuditRetentionTest, TheNewestRecordStaysSoNoSequenceIsHandedOutTwice) {
  const absl::Time long_ago = absl::Now() - absl::Hours(24 * 400);
  {
    auto store = Open(absl::InfiniteDuration());
    ASSERT_NE(store, nullptr);
    Append(*store, {Record("a", long_ago), Record("b", long_ago), Record("c", long_ago)});
  }
  auto store = Open(absl::Hours(24));
  ASSERT_NE(store, nullptr);
  Touch(*store);
  auto trail = Trail(*store);
  ASSERT_EQ(Subjects(trail), std::vector<std::string>{"c"});
  const int64_t newest = trail[0].second;
  Append(*store, {Record("d", absl::Now())});
  trail = Trail(*store);
  ASSERT_EQ(Subjects(trail), (std::vector<std::string>{"c", "d"}));
  EXPECT_GT(trail[1].second, newest);
}

TEST_F(AuditRetentionTest, ALongTrailIsPrunedABoundedNumberPerBatch) {
  const absl::Time long_ago = absl::Now() - absl::Hours(24 * 400);
  {
    auto store = Open(absl::InfiniteDuration());
    ASSERT_NE(store, nullptr);
    std::vector<v1::AuditRecord> records;
    for (int i = 0; i < 5; ++i) records.push_back(Record("old-" + std::to_string(i), long_ago));
    records.push_back(Record("new", absl::Now()));
    Append(*store, records);
  }
  auto store = Open(absl::Hours(24), /*prune_rows=*/2);
  ASSERT_NE(store, nullptr);
  Touch(*store);
  EXPECT_EQ(Subjects(Trail(*store)),
            (std::vector<std::string>{"old-2", "old-3", "old-4", "new"}));
  // A batch that deleted its whole allowance lets the next one go on.
  Touch(*store);
  EXPECT_EQ(Subjects(Trail(*store)), (std::vector<std::string>{"old-4", "new"}));
  Touch(*store);
  EXPECT_EQ(Subjects(Trail(*store)), std::vector<std::string>{"new"});
}

TEST_F(AuditRetentionTest, AFailedWriteInTheBatchTakesItsRecordAndLeavesThePrune) {
  const absl::Time long_ago = absl::Now() - absl::Hours(24 * 400);
  {
    auto store = Open(absl::InfiniteDuration());
    ASSERT_NE(store, nullptr);
    Append(*store, {Record("old", long_ago), Record("new", absl::Now())});
  }
  auto store = Open(absl::Hours(24));
  ASSERT_NE(store, nullptr);
  // A failing write is undone with its record; the rest of its batch,
  // the prune, still commits.
  absl::Status failed = store->WriteSync([](Transaction& txn) -> absl::Status {
    RETURN_IF_ERROR(txn.AppendAudit(Record("refused", absl::Now())));
    return absl::AbortedError("refused");
  });
  EXPECT_TRUE(absl::IsAborted(failed)) << failed;
  EXPECT_EQ(Subjects(Trail(*store)), std::vector<std::string>{"new"});
}

// The window: every batch that appends records deletes those beyond the
// newest audit_window_records, whatever their age; ListAuditAfter reads what
// is left oldest first, and the next sequences go on.
TEST_F(AuditRetentionTest, TheWindowKeepsTheNewestRecordsOnly) {
  auto store = Open(absl::InfiniteDuration(), 10000, /*window=*/5);
  ASSERT_NE(store, nullptr);
  const absl::Time now = absl::Now();
  std::vector<v1::AuditRecord> records;
  for (int i = 0; i < 8; ++i) records.push_back(Record(absl::StrCat("vm-", i), now));
  Append(*store, records);
  EXPECT_EQ(Subjects(Trail(*store)),
            (std::vector<std::string>{"vm-3", "vm-4", "vm-5", "vm-6", "vm-7"}));
  Append(*store, {Record("vm-8", now)});
  std::vector<int64_t> after;
  ASSERT_OK(store->Read([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto listed, txn.ListAuditAfter(5, 1000));
    for (const v1::AuditRecord& r : listed) after.push_back(r.sequence());
    return absl::OkStatus();
  }));
  EXPECT_EQ(after, (std::vector<int64_t>{6, 7, 8, 9}));
  // Not in a write: what it lists is what is committed.
  absl::Status in_write = store->WriteSync(
      [](Transaction& txn) { return txn.ListAuditAfter(0, 10).status(); });
  EXPECT_TRUE(absl::IsFailedPrecondition(in_write)) << in_write;
}

// A long trail (a store from before the window) goes audit_prune_rows a
// batch, as the retention's pruning does.
TEST_F(AuditRetentionTest, TheWindowTrimsABoundedNumberPerBatch) {
  auto store = Open(absl::InfiniteDuration(), /*prune_rows=*/3, /*window=*/5);
  ASSERT_NE(store, nullptr);
  const absl::Time now = absl::Now();
  std::vector<v1::AuditRecord> records;
  for (int i = 1; i <= 10; ++i) records.push_back(Record(absl::StrCat("vm-", i), now));
  Append(*store, records);
  EXPECT_EQ(Trail(*store).size(), 7u);  // 1-3 went
  Touch(*store);                        // appends nothing: no trim
  EXPECT_EQ(Trail(*store).size(), 7u);
  Append(*store, {Record("vm-11", now)});
  EXPECT_EQ(Subjects(Trail(*store)),
            (std::vector<std::string>{"vm-7", "vm-8", "vm-9", "vm-10", "vm-11"}));
}

TEST(AuditRetentionOptions, ANonPositiveRetentionOrBatchIsRefused) {
  cosched::testing::TempDir dir;
  SqliteStoreOptions options;
  options.data_dir = dir.Sub("data");
  options.audit_retention = absl::ZeroDuration();
  absl::Status status = SqliteStore::Open(options).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("audit_retention must be positive"), std::string::npos)
      << status;
  options.audit_retention = absl::Hours(1);
  options.audit_prune_rows = 0;
  status = SqliteStore::Open(options).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("audit_prune_rows"), std::string::npos) << status;
}

}  // namespace
}  // namespace cosched::store
