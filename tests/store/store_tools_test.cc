// `csd store backup|restore|migrate` (store/store_tools.h) against real
// SQLite files and a real etcd member: what a store holds is equal after
// the copy, order kept; a non-empty target and a bad backup are refused; and
// agents that resume with a revision from before the copy get a snapshot.
#include "store/store_tools.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/sqlite_store.h"
#include "tests/store/store_test_records.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::store {
namespace {

using ::cosched::testing::StatusIs;
using ::testing::HasSubstr;

// Everything a store holds, read through the Store interface.
struct Contents {
  std::vector<std::string> vms, policies, hosts, observations;
  // Oldest first, sequences left out (etcd numbers its own).
  std::vector<std::string> audit;
  // The staged rollout, serialized; empty when there is none.
  std::string rollout;
  bool operator==(const Contents&) const = default;
};

void PrintTo(const Contents& c, std::ostream* os) {
  *os << c.vms.size() << " VMs, " << c.policies.size() << " policies, " << c.hosts.size()
      << " hosts, " << c.observations.size() << " observations, " << c.audit.size()
      << " audit records, " << (c.rollout.empty() ? "no" : "a") << " rollout";
}

Contents ReadContents(Store& store) {
  Contents c;
  EXPECT_OK(store.Read([&](Transaction& txn) -> absl::Status {
    c = Contents{};
    std::vector<std::string> keys;
    for (Page page;;) {
      ASSIGN_OR_RETURN(auto vms, txn.ListVms({}, page));
      for (const v1::VM& vm : vms) {
        c.vms.push_back(vm.SerializeAsString());
        keys.push_back(vm.vm_id());
      }
      if (vms.empty()) break;
      page.after = vms.back().vm_id();
    }
    for (Page page;;) {
      ASSIGN_OR_RETURN(auto policies, txn.ListTenantPolicies(page));
      for (const auto& p : policies) c.policies.push_back(p.SerializeAsString());
      if (policies.empty()) break;
      page.after = policies.back().tenant_id();
    }
    for (Page page;;) {
      ASSIGN_OR_RETURN(auto hosts, txn.ListHosts(page));
      for (const auto& h : hosts) c.hosts.push_back(h.SerializeAsString());
      if (hosts.empty()) break;
      page.after = hosts.back().host_id();
    }
    ASSIGN_OR_RETURN(auto rollout, txn.GetRollout());
    if (rollout) c.rollout = rollout->SerializeAsString();
    keys.push_back("unplaced-vm");
    keys.push_back("uuid-of-a");
    for (const std::string& key : keys) {
      if (key.empty()) continue;
      ASSIGN_OR_RETURN(auto seen, txn.ListObservations(key));
      for (const Observation& o : seen) {
        c.observations.push_back(absl::StrCat(key, " on ", o.host_id, ": ", o.vm.ShortDebugString()));
      }
    }
    std::vector<std::string> newest_first;
    for (int64_t before = 0;;) {
      ASSIGN_OR_RETURN(auto records, txn.ListAudit({}, before, 1000));
      for (v1::AuditRecord r : records) {
        before = r.sequence();
        r.clear_sequence();
        newest_first.push_back(r.SerializeAsString());
      }
      if (records.empty()) break;
    }
    c.audit.assign(newest_first.rbegin(), newest_first.rend());
    return absl::OkStatus();
  }));
  return c;
}

// A store with every kind of record; `vms` VMs.
void Fill(Store& store, int vms = 12) {
  ASSERT_OK(store.WriteSync([&](Transaction& txn) -> absl::Status {
    for (const char* tenant : {"t1", "t2"}) {
      v1::TenantPolicy policy;
      policy.set_tenant_id(tenant);
      RETURN_IF_ERROR(txn.PutTenantPolicy(policy));
    }
    for (const char* host_id : {"h1", "h2"}) {
      v1::Host host;
      host.set_host_id(host_id);
      host.set_agent_version("1.2");
      RETURN_IF_ERROR(txn.PutHost(host));
    }
    v1::Rollout rollout;
    rollout.set_rollout_id("r-1");
    rollout.set_state(v1::Rollout::STATE_HALTED);
    for (int percent : {10, 50, 100}) rollout.add_stage_percents(percent);
    rollout.set_stage(1);
    rollout.add_enabled_hosts("h1");
    rollout.set_halt_reason("host h1 stopped reporting");
    return txn.PutRollout(rollout);
  }));
  for (int i = 0; i < vms; ++i) {
    ASSERT_OK(store.WriteSync([&](Transaction& txn) -> absl::Status {
      const std::string id = absl::StrCat("vm-", i);
      const std::string host = i % 2 ? "h2" : "h1";
      RETURN_IF_ERROR(txn.PutVm(MakeVm(id, i % 3 ? "t1" : "t2", host,
                                       absl::StrCat(i % 3 ? "t1" : "t2", "/g", i % 4))));
      return txn.RecordChange(host, id);
    }));
  }
  // h2 reports vm-0 after h1 does: the newest observation wins, and must
  // still win after the copy.
  ASSERT_OK(store.WriteSync([](Transaction& txn) {
    return store::ReplaceObservations(txn, "h1",
                                      {MakeObservation("vm-0", "uuid-of-a", "t2/g0"),
                                       MakeObservation("unplaced-vm", "", "")})
        .status();
  }));
  ASSERT_OK(store.WriteSync([](Transaction& txn) {
    return store::ReplaceObservations(txn, "h2", {MakeObservation("vm-0", "uuid-of-a", "")})
        .status();
  }));
  for (int i = 0; i < 7; ++i) {
    ASSERT_OK(store.WriteSync([&](Transaction& txn) {
      v1::AuditRecord record;
      record.set_who(absl::StrCat("spiffe://cosched/ops-", i % 2));
      record.set_method("TagVM");
      record.set_subject(absl::StrCat("vm-", i));
      record.set_time_unix_ns(1700000000000000000 + i);
      return txn.AppendAudit(record);
    }));
  }
}

// What Fill(store, vms) wrote, as ReadContents sees it: a copy that lost a
// kind of record must not compare equal by being empty.
void ExpectFilled(const Contents& c, size_t vms) {
  EXPECT_EQ(c.vms.size(), vms);
  EXPECT_EQ(c.policies.size(), 2u);
  EXPECT_EQ(c.hosts.size(), 2u);
  EXPECT_NE(c.rollout, "");
  // vm-0 on h2 then h1 (newest first), its UUID's the same, unplaced-vm.
  ASSERT_EQ(c.observations.size(), 5u);
  EXPECT_EQ(c.observations[0].rfind("vm-0 on h2", 0), 0u) << c.observations[0];
  EXPECT_EQ(c.audit.size(), 7u);
}

// Writes, until `stop`, VM vm-w<i> and host "counter" with agent_version i
// in one write function each: a consistent copy has as many such VMs as
// the counter says.
void WriteUntilStopped(Store& store, const std::atomic<bool>& stop) {
  for (int i = 1; !stop.load(); ++i) {
    absl::Status written = store.WriteSync([i](Transaction& txn) -> absl::Status {
      RETURN_IF_ERROR(txn.PutVm(MakeVm(absl::StrCat("vm-w", i))));
      v1::Host counter;
      counter.set_host_id("counter");
      counter.set_agent_version(std::to_string(i));
      return txn.PutHost(counter);
    });
    if (!written.ok()) {
      ADD_FAILURE() << written;
      return;
    }
  }
}

// The copy is of one instant: the counter equals the VMs written with it.
void ExpectConsistent(Store& store) {
  ASSERT_OK(store.Read([](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto counter, txn.GetHost("counter"));
    int vms = 0;
    for (Page page;;) {
      ASSIGN_OR_RETURN(auto listed, txn.ListVms({}, page));
      if (listed.empty()) break;
      vms += static_cast<int>(listed.size());
      page.after = listed.back().vm_id();
    }
    const int want = counter ? std::stoi(counter->agent_version()) : 0;
    EXPECT_GT(want, 0) << "the backup ran before any write";
    EXPECT_EQ(vms, want);
    return absl::OkStatus();
  }));
}

std::unique_ptr<SqliteStore> OpenSqlite(const std::string& dir) {
  SqliteStoreOptions options;
  options.data_dir = dir;
  auto store = SqliteStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

StoreLocation Sqlite(const std::string& dir) {
  StoreLocation at;
  at.sqlite_dir = dir;
  return at;
}

void Truncate(const std::string& path) {
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
}

void FlipByte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x5A));
}

// ---- Locations -------------------------------------------------------------

TEST(StoreLocationTest, ParsesBothKinds) {
  ASSERT_OK_AND_ASSIGN(StoreLocation s, ParseStoreLocation("--from", "sqlite:/var/lib/cosched"));
  EXPECT_EQ(s.kind, StoreLocation::Kind::kSqlite);
  EXPECT_EQ(s.sqlite_dir, "/var/lib/cosched");
  ASSERT_OK_AND_ASSIGN(StoreLocation e,
                       ParseStoreLocation("--to", "etcd:127.0.0.1:2379,127.0.0.2:2379/cosched/a"));
  EXPECT_EQ(e.kind, StoreLocation::Kind::kEtcd);
  EXPECT_EQ(e.etcd.client.endpoints, (std::vector<std::string>{"127.0.0.1:2379", "127.0.0.2:2379"}));
  EXPECT_EQ(e.etcd.prefix, "/cosched/a");
  EXPECT_EQ(e.Describe(), "etcd:127.0.0.1:2379,127.0.0.2:2379/cosched/a");
}

TEST(StoreLocationTest, RefusesBadLocationsNamingTheFlagAndRule) {
  struct Case {
    const char* spec;
    const char* rule;
  };
  for (const Case& c : {Case{"", "must begin with sqlite:"}, Case{"mysql:x", "must begin with"},
                        Case{"sqlite:", "needs the store's data dir"},
                        Case{"etcd:127.0.0.1:2379", "HOST:PORT[,HOST:PORT...]/PREFIX"},
                        Case{"etcd:/cosched", "HOST:PORT[,HOST:PORT...]/PREFIX"},
                        Case{"etcd:127.0.0.1:2379/", "must be absolute, not '/'"},
                        Case{"etcd:127.0.0.1:2379/a/", "not end with '/'"},
                        Case{"etcd:127.0.0.1/a", "port of 1-65535"},
                        Case{"etcd:127.0.0.1:99999/a", "port of 1-65535"},
                        Case{"etcd:127.0.0.1:2379,/a", "port of 1-65535"}}) {
    auto parsed = ParseStoreLocation("--to", c.spec);
    EXPECT_THAT(parsed.status(), StatusIs(absl::StatusCode::kInvalidArgument, "")) << c.spec;
    EXPECT_THAT(parsed.status().message(), HasSubstr("--to: ")) << c.spec;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.rule)) << c.spec;
  }
}

// ---- SQLite ----------------------------------------------------------------

class StoreToolsSqliteTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(StoreToolsSqliteTest, BackupOfALiveStoreRestoresEqualAndOldRevisionsGetASnapshot) {
  auto source = OpenSqlite(dir_.Sub("a"));
  ASSERT_NE(source, nullptr);
  Fill(*source);
  const Contents before = ReadContents(*source);
  ExpectFilled(before, 12);
  const int64_t old_revision = source->CurrentRevision();
  const int64_t mid_revision = old_revision - 3;
  ASSERT_TRUE(ChangesSince(*source, "h1", mid_revision).complete);

  // The source stays open: the backup is taken while csd could write.
  const std::string file = dir_.Sub("cosched.backup");
  ASSERT_OK_AND_ASSIGN(ToolReport backed_up, BackupStore(Sqlite(dir_.Sub("a")), file));
  EXPECT_EQ(backed_up.revision, old_revision);
  EXPECT_FALSE(std::filesystem::exists(file + ".tmp"));

  ASSERT_OK_AND_ASSIGN(ToolReport restored, RestoreStore(file, Sqlite(dir_.Sub("b")), {}));
  EXPECT_EQ(restored.revision, old_revision + kRestoreRevisionGap);
  auto target = OpenSqlite(dir_.Sub("b"));
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(ReadContents(*target), before);
  EXPECT_EQ(target->CurrentRevision(), restored.revision);
  // Resume revisions of the old store, even ones it reached after the
  // backup, get a snapshot; the new store's own revisions get deltas.
  EXPECT_FALSE(ChangesSince(*target, "h1", mid_revision).complete);
  EXPECT_FALSE(ChangesSince(*target, "h1", old_revision + 1000).complete);
  const int64_t now = target->CurrentRevision();
  ASSERT_OK(target->WriteSync([](Transaction& txn) {
    RETURN_IF_ERROR(txn.PutVm(MakeVm("vm-new", "t1", "h1", "t1/g9")));
    return txn.RecordChange("h1", "vm-new");
  }));
  HostChanges delta = ChangesSince(*target, "h1", now);
  EXPECT_TRUE(delta.complete);
  EXPECT_EQ(delta.vm_ids, std::vector<std::string>{"vm-new"});
}

TEST_F(StoreToolsSqliteTest, BackupWhileCsdWritesIsOfOneInstant) {
  auto source = OpenSqlite(dir_.Sub("a"));
  ASSERT_NE(source, nullptr);
  std::atomic<bool> stop{false};
  std::thread writer([&] { WriteUntilStopped(*source, stop); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string file = dir_.Sub("backup");
  auto backed_up = BackupStore(Sqlite(dir_.Sub("a")), file);
  stop = true;
  writer.join();
  ASSERT_OK(backed_up.status());
  ASSERT_OK(RestoreStore(file, Sqlite(dir_.Sub("b")), {}).status());
  auto target = OpenSqlite(dir_.Sub("b"));
  ASSERT_NE(target, nullptr);
  ExpectConsistent(*target);
}

TEST_F(StoreToolsSqliteTest, RestoreRefusesANonEmptyTargetUnlessReplace) {
  auto source = OpenSqlite(dir_.Sub("a"));
  ASSERT_NE(source, nullptr);
  Fill(*source, 2);
  const Contents want = ReadContents(*source);
  const std::string file = dir_.Sub("backup");
  ASSERT_OK(BackupStore(Sqlite(dir_.Sub("a")), file).status());
  {
    auto other = OpenSqlite(dir_.Sub("b"));
    ASSERT_NE(other, nullptr);
    ASSERT_OK(other->WriteSync([](Transaction& txn) { return txn.PutVm(MakeVm("other")); }));
  }
  auto refused = RestoreStore(file, Sqlite(dir_.Sub("b")), {});
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(refused.status().message(), HasSubstr("is not empty"));
  {
    auto untouched = OpenSqlite(dir_.Sub("b"));
    ASSERT_NE(untouched, nullptr);
    EXPECT_TRUE(GetVm(*untouched, "other").has_value());
  }
  RestoreOptions replace;
  replace.replace = true;
  ASSERT_OK(RestoreStore(file, Sqlite(dir_.Sub("b")), replace).status());
  auto replaced = OpenSqlite(dir_.Sub("b"));
  ASSERT_NE(replaced, nullptr);
  EXPECT_EQ(ReadContents(*replaced), want);
}

TEST_F(StoreToolsSqliteTest, TruncatedOrCorruptBackupIsDataLossNamingTheFile) {
  auto source = OpenSqlite(dir_.Sub("a"));
  ASSERT_NE(source, nullptr);
  Fill(*source, 200);
  const std::string file = dir_.Sub("backup");
  ASSERT_OK(BackupStore(Sqlite(dir_.Sub("a")), file).status());
  Truncate(file);
  auto truncated = RestoreStore(file, Sqlite(dir_.Sub("b")), {});
  EXPECT_THAT(truncated.status(), StatusIs(absl::StatusCode::kDataLoss, ""));
  EXPECT_THAT(truncated.status().message(), HasSubstr(file));
  EXPECT_FALSE(std::filesystem::exists(dir_.Sub("b/cosched.db")));

  const std::string junk = dir_.Sub("junk");
  std::ofstream(junk) << "not a backup at all";
  auto refused = RestoreStore(junk, Sqlite(dir_.Sub("b")), {});
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kDataLoss, ""));
  EXPECT_THAT(refused.status().message(), HasSubstr(junk));

  EXPECT_THAT(RestoreStore(dir_.Sub("missing"), Sqlite(dir_.Sub("b")), {}).status(),
              StatusIs(absl::StatusCode::kNotFound, ""));
}

TEST_F(StoreToolsSqliteTest, BackupOfAMissingStoreIsNotFound) {
  auto missing = BackupStore(Sqlite(dir_.Sub("none")), dir_.Sub("backup"));
  EXPECT_THAT(missing.status(), StatusIs(absl::StatusCode::kNotFound, ""));
  EXPECT_THAT(missing.status().message(), HasSubstr(dir_.Sub("none/cosched.db")));
}

// ---- etcd ------------------------------------------------------------------

class StoreToolsEtcdTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(etcd_.Start()); }

  StoreLocation Etcd(const std::string& prefix) {
    StoreLocation at;
    at.kind = StoreLocation::Kind::kEtcd;
    at.etcd.client = etcd_.ClientOptions();
    at.etcd.prefix = prefix;
    return at;
  }
  std::unique_ptr<EtcdStore> OpenEtcd(const std::string& prefix) {
    auto store = EtcdStore::Open(Etcd(prefix).etcd);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }
  std::unique_ptr<etcd::Client> Client() {
    auto client = etcd::Client::Create(etcd_.ClientOptions());
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  testing::EtcdMember etcd_;
  testing::TempDir dir_;
};

TEST_F(StoreToolsEtcdTest, MigrateCopiesEveryRecordInOrder) {
  int64_t sqlite_revision = 0;
  Contents want;
  {
    auto source = OpenSqlite(dir_.Sub("a"));
    ASSERT_NE(source, nullptr);
    Fill(*source);
    want = ReadContents(*source);
    ExpectFilled(want, 12);
    sqlite_revision = source->CurrentRevision();
  }
  ASSERT_OK_AND_ASSIGN(ToolReport report, MigrateStore(Sqlite(dir_.Sub("a")), Etcd("/cosched"), {}));
  EXPECT_GE(report.resume_horizon, sqlite_revision + 1);
  EXPECT_GT(report.resume_horizon, report.revision - 1);
  auto target = OpenEtcd("/cosched");
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(ReadContents(*target), want);

  // The change log keeps its order: vm-i changed before vm-(i+1) in SQLite,
  // and its key's mod_revision in etcd is below the next one's.
  auto client = Client();
  ASSERT_NE(client, nullptr);
  std::map<std::string, int64_t> changed_at;
  ASSERT_OK_AND_ASSIGN(etcd::RangeResult changes,
                       client->Range("/cosched/changes/", etcd::PrefixEnd("/cosched/changes/")));
  for (const auto& kv : changes.kvs) changed_at[kv.key()] = kv.mod_revision();
  ASSERT_EQ(changed_at.size(), 12u);
  for (int i = 0; i + 1 < 12; ++i) {
    const auto key = [](int n) { return absl::StrCat("/cosched/changes/", n % 2 ? "h2" : "h1", "/vm-", n); };
    EXPECT_LT(changed_at[key(i)], changed_at[key(i + 1)]) << i;
  }
  // An agent resuming with its SQLite revision (or one of etcd's from
  // during the copy) gets a snapshot.
  EXPECT_FALSE(ChangesSince(*target, "h1", sqlite_revision).complete);
  EXPECT_FALSE(ChangesSince(*target, "h1", 3).complete);
  EXPECT_FALSE(ChangesSince(*target, "h1", report.resume_horizon - 1).complete);
}

TEST_F(StoreToolsEtcdTest, MigrateRefusesANonEmptyPrefixUnlessReplace) {
  {
    auto source = OpenSqlite(dir_.Sub("a"));
    ASSERT_NE(source, nullptr);
    Fill(*source, 3);
  }
  {
    auto other = OpenEtcd("/cosched");
    ASSERT_NE(other, nullptr);
    ASSERT_OK(other->WriteSync([](Transaction& txn) { return txn.PutVm(MakeVm("other")); }));
  }
  auto refused = MigrateStore(Sqlite(dir_.Sub("a")), Etcd("/cosched"), {});
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(refused.status().message(), HasSubstr("/cosched is not empty"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--replace"));
  {
    auto untouched = OpenEtcd("/cosched");
    ASSERT_NE(untouched, nullptr);
    EXPECT_TRUE(GetVm(*untouched, "other").has_value());
  }
  MigrateOptions replace;
  replace.replace = true;
  ASSERT_OK(MigrateStore(Sqlite(dir_.Sub("a")), Etcd("/cosched"), replace).status());
  auto replaced = OpenEtcd("/cosched");
  ASSERT_NE(replaced, nullptr);
  EXPECT_FALSE(GetVm(*replaced, "other").has_value());
  EXPECT_TRUE(GetVm(*replaced, "vm-2").has_value());
  // A SQLite target is a usage error, not a copy.
  EXPECT_THAT(MigrateStore(Sqlite(dir_.Sub("a")), Sqlite(dir_.Sub("b")), {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ""));
}

// A host that reports more VMs than one etcd Txn of 128 operations holds:
// the migration stops there, says so, and leaves the prefix refused.
TEST_F(StoreToolsEtcdTest, MigrationThatStopsHalfWayLeavesThePrefixRefused) {
  {
    auto source = OpenSqlite(dir_.Sub("a"));
    ASSERT_NE(source, nullptr);
    Fill(*source, 3);
    std::vector<v1::VMObservation> many;
    for (int i = 0; i < 100; ++i) {
      many.push_back(MakeObservation(absl::StrCat("big-", i), absl::StrCat("uuid-", i), ""));
    }
    ASSERT_OK(source->WriteSync([&](Transaction& txn) {
      return store::ReplaceObservations(txn, "h-big", many).status();
    }));
  }
  auto failed = MigrateStore(Sqlite(dir_.Sub("a")), Etcd("/cosched"), {});
  EXPECT_THAT(failed.status(), StatusIs(absl::StatusCode::kResourceExhausted, ""));
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("/cosched is half-written"));
  EXPECT_THAT(failed.status().message(), HasSubstr("--replace"));
  auto refused = EtcdStore::Open(Etcd("/cosched").etcd);
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                         "/cosched/restore-in-progress"));
}

// 300 VMs and their change keys: more than one Txn of 128 operations.
TEST_F(StoreToolsEtcdTest, BackupRestoresEqualUnderAnotherPrefixAndOldRevisionsGetASnapshot) {
  auto source = OpenEtcd("/a");
  ASSERT_NE(source, nullptr);
  Fill(*source, 300);
  const Contents want = ReadContents(*source);
  ExpectFilled(want, 300);
  const int64_t old_revision = source->CurrentRevision();
  const std::string file = dir_.Sub("etcd.backup");
  ASSERT_OK_AND_ASSIGN(ToolReport backed_up, BackupStore(Etcd("/a"), file));
  EXPECT_EQ(backed_up.revision, old_revision);
  // Written after the backup: not in it.
  ASSERT_OK(source->WriteSync([](Transaction& txn) { return txn.PutVm(MakeVm("later")); }));

  RestoreOptions options;
  options.resume_floor = old_revision + 5000;  // the old store went on after the backup
  ASSERT_OK_AND_ASSIGN(ToolReport restored, RestoreStore(file, Etcd("/b"), options));
  EXPECT_GT(restored.resume_horizon, old_revision + 5000);
  auto target = OpenEtcd("/b");
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(ReadContents(*target), want);
  EXPECT_FALSE(GetVm(*target, "later").has_value());
  // The source's leader and replica keys (under its lease) were left out:
  // restored, they would keep every replica of /b from leading.
  EXPECT_TRUE(target->Leads());
  EXPECT_FALSE(ChangesSince(*target, "h1", old_revision).complete);
  EXPECT_FALSE(ChangesSince(*target, "h1", old_revision - 10).complete);
  auto client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_OK_AND_ASSIGN(etcd::RangeResult marker, client->Range("/b/restore-in-progress", ""));
  EXPECT_TRUE(marker.kvs.empty());

  // Restoring again into the now non-empty prefix is refused.
  auto refused = RestoreStore(file, Etcd("/b"), {});
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  // A SQLite target of an etcd backup is refused, naming both.
  auto wrong_kind = RestoreStore(file, Sqlite(dir_.Sub("s")), {});
  EXPECT_THAT(wrong_kind.status(), StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(wrong_kind.status().message(), HasSubstr("etcd store"));
}

TEST_F(StoreToolsEtcdTest, BackupWhileReplicasWriteIsOfOneRevision) {
  auto source = OpenEtcd("/a");
  ASSERT_NE(source, nullptr);
  std::atomic<bool> stop{false};
  std::thread writer([&] { WriteUntilStopped(*source, stop); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string file = dir_.Sub("etcd.backup");
  auto backed_up = BackupStore(Etcd("/a"), file);
  stop = true;
  writer.join();
  ASSERT_OK(backed_up.status());
  ASSERT_OK(RestoreStore(file, Etcd("/b"), {}).status());
  auto target = OpenEtcd("/b");
  ASSERT_NE(target, nullptr);
  ExpectConsistent(*target);
}

TEST_F(StoreToolsEtcdTest, HalfWrittenPrefixIsRefusedByCsdUntilARestoreWithReplace) {
  auto source = OpenEtcd("/a");
  ASSERT_NE(source, nullptr);
  Fill(*source, 3);
  const Contents want = ReadContents(*source);
  const std::string file = dir_.Sub("etcd.backup");
  ASSERT_OK(BackupStore(Etcd("/a"), file).status());
  // A restore that died after its marker and some keys.
  auto client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_OK(client->Put("/b/restore-in-progress", "").status());
  ASSERT_OK(client->Put("/b/vms/vm-0", "half").status());

  auto refused = EtcdStore::Open(Etcd("/b").etcd);
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(refused.status().message(), HasSubstr("/b/restore-in-progress"));
  EXPECT_THAT(BackupStore(Etcd("/b"), dir_.Sub("other")).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(RestoreStore(file, Etcd("/b"), {}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, ""));

  RestoreOptions replace;
  replace.replace = true;
  ASSERT_OK(RestoreStore(file, Etcd("/b"), replace).status());
  auto target = OpenEtcd("/b");
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(ReadContents(*target), want);
}

TEST_F(StoreToolsEtcdTest, CorruptOrTruncatedBackupIsDataLossNamingTheFile) {
  auto source = OpenEtcd("/a");
  ASSERT_NE(source, nullptr);
  Fill(*source, 3);
  const std::string file = dir_.Sub("etcd.backup");
  ASSERT_OK(BackupStore(Etcd("/a"), file).status());
  const std::string flipped = dir_.Sub("flipped");
  std::filesystem::copy_file(file, flipped);
  FlipByte(flipped, 40);
  Truncate(file);
  for (const std::string& bad : {file, flipped}) {
    auto refused = RestoreStore(bad, Etcd("/b"), {});
    EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kDataLoss, "")) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr(bad));
  }
  // Nothing was written: not even the marker.
  auto client = Client();
  ASSERT_NE(client, nullptr);
  ASSERT_OK_AND_ASSIGN(etcd::RangeResult under_b, client->Range("/b/", etcd::PrefixEnd("/b/")));
  EXPECT_TRUE(under_b.kvs.empty());
}

}  // namespace
}  // namespace cosched::store
