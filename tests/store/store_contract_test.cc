// The Store contract (store/store.h) on both backends: records, revisions,
// the change log, observations and the audit trail; the writer's batching
// and concurrency are in store_contract_writer_test.cc.
// Each test runs on SQLite (a fresh data dir) and on etcd (a real etcd
// member of its own, tests/testing/etcd_member.h). What only one backend
// does is in sqlite_store_test.cc and etcd_store_test.cc.
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "tests/store/store_contract_fixture.h"
#include "tests/testing/status_matchers.h"

namespace cosched::store {
namespace {

using ::cosched::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

TEST_P(StoreContractTest, PutGetDeleteRoundtrip) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);

  v1::VM vm = MakeVm("vm-1", "t1", "h1", "t1/g1");
  vm.mutable_enforcement()->set_last_error("not stored");
  ASSERT_TRUE(
      store->WriteSync([&](Transaction& txn) { return txn.PutVm(vm); }).ok());

  std::optional<v1::VM> got = GetVm(*store, "vm-1");
  ASSERT_TRUE(got.has_value());
  v1::VM expected = vm;
  expected.clear_enforcement();
  EXPECT_EQ(got->DebugString(), expected.DebugString());
  EXPECT_FALSE(GetVm(*store, "vm-2").has_value());

  ASSERT_TRUE(
      store->WriteSync([](Transaction& txn) { return txn.DeleteVm("vm-1"); })
          .ok());
  EXPECT_FALSE(GetVm(*store, "vm-1").has_value());
  absl::Status again =
      store->WriteSync([](Transaction& txn) { return txn.DeleteVm("vm-1"); });
  EXPECT_TRUE(absl::IsNotFound(again)) << again;

  v1::TenantPolicy policy;
  policy.set_tenant_id("t1");
  policy.set_default_isolation(v1::ISOLATION_LEVEL_TENANT);
  v1::Host host;
  host.set_host_id("h1");
  host.set_agent_version("1.2");
  host.set_connected(true);
  ASSERT_TRUE(store
                  ->WriteSync([&](Transaction& txn) -> absl::Status {
                    RETURN_IF_ERROR(txn.PutTenantPolicy(policy));
                    return txn.PutHost(host);
                  })
                  .ok());
  ASSERT_TRUE(
      store
          ->Read([&](Transaction& txn) -> absl::Status {
            ASSIGN_OR_RETURN(auto got_policy, txn.GetTenantPolicy("t1"));
            EXPECT_TRUE(got_policy.has_value());
            if (got_policy) {
              EXPECT_EQ(got_policy->DebugString(), policy.DebugString());
            }
            ASSIGN_OR_RETURN(auto got_host, txn.GetHost("h1"));
            EXPECT_TRUE(got_host.has_value());
            if (got_host) {
              EXPECT_EQ(got_host->agent_version(), "1.2");
              EXPECT_FALSE(got_host->connected());
            }
            ASSIGN_OR_RETURN(auto no_host, txn.GetHost("h2"));
            EXPECT_FALSE(no_host.has_value());
            return absl::OkStatus();
          })
          .ok());
}

// One rollout record, replaced whole by each Put, kept across a reopen.
TEST_P(StoreContractTest, RolloutIsOneRecordReplacedWhole) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto get = [](Store& s) {
    std::optional<v1::Rollout> got;
    EXPECT_OK(s.Read([&](Transaction& txn) -> absl::Status {
      ASSIGN_OR_RETURN(got, txn.GetRollout());
      return absl::OkStatus();
    }));
    return got;
  };
  EXPECT_FALSE(get(*store).has_value());

  v1::Rollout first;
  first.set_rollout_id("r-1");
  first.set_selector("zone=a");
  for (int percent : {1, 10, 100}) first.add_stage_percents(percent);
  first.set_soak_seconds(1800);
  first.set_state(v1::Rollout::STATE_RUNNING);
  first.add_enabled_hosts("h1");
  first.mutable_stage_started_time()->set_seconds(1700000000);
  ASSERT_OK(store->WriteSync([&](Transaction& txn) { return txn.PutRollout(first); }));
  std::optional<v1::Rollout> got = get(*store);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->DebugString(), first.DebugString());

  v1::Rollout second;
  second.set_rollout_id("r-2");
  second.set_state(v1::Rollout::STATE_HALTED);
  second.set_halt_reason("host h2 stopped reporting");
  ASSERT_OK(store->WriteSync([&](Transaction& txn) -> absl::Status {
    RETURN_IF_ERROR(txn.PutRollout(second));
    ASSIGN_OR_RETURN(auto own, txn.GetRollout());
    if (!own || own->rollout_id() != "r-2") return absl::InternalError("own write not visible");
    return absl::OkStatus();
  }));
  got = get(*store);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->DebugString(), second.DebugString());

  // A started rollout has an id; a record that only holds the fleet's
  // new_hosts setting has neither id nor state.
  v1::Rollout nameless;
  nameless.set_state(v1::Rollout::STATE_RUNNING);
  EXPECT_THAT(store->WriteSync([&](Transaction& txn) { return txn.PutRollout(nameless); }),
              cosched::testing::StatusIs(absl::StatusCode::kInvalidArgument, "rollout_id"));
  EXPECT_THAT(store->Read([&](Transaction& txn) { return txn.PutRollout(first); }),
              cosched::testing::StatusIs(absl::StatusCode::kFailedPrecondition, ""));

  store.reset();
  store = OpenStore();
  ASSERT_NE(store, nullptr);
  got = get(*store);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->rollout_id(), "r-2");
}

TEST_P(StoreContractTest, TransactionReadsItsOwnWrites) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::Status status = store->WriteSync([](Transaction& txn) -> absl::Status {
    RETURN_IF_ERROR(txn.PutVm(MakeVm("vm-1")));
    ASSIGN_OR_RETURN(auto vm, txn.GetVm("vm-1"));
    if (!vm) return absl::InternalError("own write not visible");
    return absl::OkStatus();
  });
  EXPECT_OK(status);
}

TEST_P(StoreContractTest, DataSurvivesReopen) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 20; ++i) {
      PutAndRecord(*store, MakeVm(absl::StrCat("vm-", i), "t1", "h1", "t1/g1"));
    }
    std::vector<v1::VMObservation> vms = {MakeObservation("vm-1", "u-1", "g1")};
    ASSERT_TRUE(store
                    ->WriteSync([&](Transaction& txn) {
                      return store::ReplaceObservations(txn, "h1", vms).status();
                    })
                    .ok());
  }
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ListVms(*store, {}, {.after = "", .limit = 100}).size(), 20u);
  EXPECT_EQ(ChangesSince(*store, "h1", 0).vm_ids.size(), 20u);
  std::optional<Observation> observation = FindObservation(*store, "u-1");
  ASSERT_TRUE(observation.has_value());
  EXPECT_EQ(observation->host_id, "h1");
}

TEST_P(StoreContractTest, ChangesSinceIsCompleteWithinTheLog) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  int64_t r1 = PutAndRecord(*store, MakeVm("vm-1", "t1", "h1"));
  int64_t r2 = PutAndRecord(*store, MakeVm("vm-2", "t1", "h1"));
  PutAndRecord(*store, MakeVm("vm-3", "t1", "h2"));
  PutAndRecord(*store, MakeVm("vm-1", "t1", "h1"));  // vm-1 again

  HostChanges all = ChangesSince(*store, "h1", 0);
  EXPECT_TRUE(all.complete);
  EXPECT_THAT(all.vm_ids, UnorderedElementsAre("vm-1", "vm-2"));
  HostChanges after_r1 = ChangesSince(*store, "h1", r1);
  EXPECT_TRUE(after_r1.complete);
  EXPECT_THAT(after_r1.vm_ids, UnorderedElementsAre("vm-1", "vm-2"));
  HostChanges after_r2 = ChangesSince(*store, "h1", r2);
  EXPECT_THAT(after_r2.vm_ids, UnorderedElementsAre("vm-1"));
  HostChanges none = ChangesSince(*store, "h1", store->CurrentRevision());
  EXPECT_TRUE(none.complete);
  EXPECT_TRUE(none.vm_ids.empty());
  EXPECT_TRUE(ChangesSince(*store, "h-unknown", 0).complete);

  // A revision the store never reached means the agent saw another store.
  EXPECT_FALSE(
      ChangesSince(*store, "h1", store->CurrentRevision() + 1).complete);
}

TEST_P(StoreContractTest, ObservationsFoundByIdAndUuidLatestHostWins) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto report = [&](const std::string& host,
                    std::vector<v1::VMObservation> vms) {
    absl::Status status = store->WriteSync(
        [&](Transaction& txn) { return store::ReplaceObservations(txn, host, vms).status(); });
    ASSERT_OK(status);
  };

  report("h1", {MakeObservation("vm-a", "uuid-a", "g-h1"),
                MakeObservation("vm-b", "", "g-b")});
  for (const char* key : {"vm-a", "uuid-a"}) {
    std::optional<Observation> found = FindObservation(*store, key);
    ASSERT_TRUE(found.has_value()) << key;
    EXPECT_EQ(found->host_id, "h1");
    EXPECT_EQ(found->vm.enforcement().applied_trust_group(), "g-h1");
    EXPECT_EQ(found->vm.enforcement().state(), v1::ENFORCEMENT_STATE_ENFORCED);
  }
  EXPECT_TRUE(FindObservation(*store, "vm-b").has_value());
  EXPECT_FALSE(FindObservation(*store, "").has_value());

  // vm-a migrated to h2.
  report("h2", {MakeObservation("vm-a", "uuid-a", "g-h2")});
  EXPECT_EQ(FindObservation(*store, "uuid-a")->host_id, "h2");
  EXPECT_EQ(FindObservation(*store, "vm-a")->vm.enforcement().applied_trust_group(),
            "g-h2");

  // h1's next report replaces its earlier one.
  report("h1", {MakeObservation("vm-c", "", "g-c")});
  EXPECT_FALSE(FindObservation(*store, "vm-b").has_value());
  EXPECT_TRUE(FindObservation(*store, "vm-c").has_value());
  EXPECT_EQ(FindObservation(*store, "vm-a")->host_id, "h2");

  report("h2", {});
  EXPECT_FALSE(FindObservation(*store, "vm-a").has_value());
  EXPECT_FALSE(FindObservation(*store, "uuid-a").has_value());
}

TEST_P(StoreContractTest, ObservationsAreWrittenOneVmAtATime) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto host_vms = [&](const std::string& host) {
    std::vector<std::string> ids;
    EXPECT_OK(store->Read([&](Transaction& txn) -> absl::Status {
      ids.clear();
      ASSIGN_OR_RETURN(std::vector<v1::VMObservation> vms, txn.ListHostObservations(host));
      for (const v1::VMObservation& vm : vms) ids.push_back(vm.vm_id());
      return absl::OkStatus();
    }));
    return ids;
  };
  ASSERT_OK(store->WriteSync([](Transaction& txn) -> absl::Status {
    RETURN_IF_ERROR(txn.PutObservation("h1", MakeObservation("vm-b", "", "g-b")));
    RETURN_IF_ERROR(txn.PutObservation("h1", MakeObservation("vm-a", "uuid-a", "g-a")));
    // Seen by the function that wrote it.
    ASSIGN_OR_RETURN(std::optional<Observation> found, txn.FindObservation("uuid-a"));
    if (!found || found->host_id != "h1") return absl::InternalError("own put not found");
    return txn.PutObservation("h2", MakeObservation("vm-a", "uuid-a", "g-a2"));
  }));
  EXPECT_EQ(host_vms("h1"), (std::vector<std::string>{"vm-a", "vm-b"}));
  EXPECT_EQ(host_vms("h2"), (std::vector<std::string>{"vm-a"}));
  EXPECT_TRUE(host_vms("h3").empty());

  // A new UUID replaces the one the VM was found by.
  ASSERT_OK(store->WriteSync([](Transaction& txn) {
    return txn.PutObservation("h1", MakeObservation("vm-a", "uuid-a1", "g-a"));
  }));
  EXPECT_EQ(FindObservation(*store, "uuid-a1")->host_id, "h1");
  std::vector<Observation> by_old_uuid;
  ASSERT_OK(store->Read([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(by_old_uuid, txn.ListObservations("uuid-a"));
    return absl::OkStatus();
  }));
  ASSERT_EQ(by_old_uuid.size(), 1u);
  EXPECT_EQ(by_old_uuid[0].host_id, "h2");

  ASSERT_OK(store->WriteSync([](Transaction& txn) { return txn.DeleteObservation("h1", "vm-b"); }));
  EXPECT_EQ(host_vms("h1"), (std::vector<std::string>{"vm-a"}));
  EXPECT_FALSE(FindObservation(*store, "vm-b").has_value());
  EXPECT_THAT(store->WriteSync(
                  [](Transaction& txn) { return txn.DeleteObservation("h1", "vm-b"); }),
              StatusIs(absl::StatusCode::kNotFound, "vm-b"));
  EXPECT_THAT(store->WriteSync([](Transaction& txn) {
                return txn.PutObservation("h1", MakeObservation("", "", ""));
              }),
              StatusIs(absl::StatusCode::kInvalidArgument, "vm_id"));
}

// A host's agent could report a VM whose UUID is another VM's name (a
// process posing as a VM can say anything of itself): the name wins, and
// the VM of that name stays what the host reports under it.
TEST_P(StoreContractTest, AVmWhoseUuidIsAnothersNameDoesNotHideIt) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  for (int round = 0; round < 2; ++round) {
    ASSERT_OK(store->WriteSync([&](Transaction& txn) {
      return ReplaceObservations(txn, "h1",
                                 std::vector<v1::VMObservation>{
                                     MakeObservation("vm-a", "", "g-a"),
                                     MakeObservation("vm-b", "vm-a", "g-b")})
          .status();
    }));
    std::optional<Observation> found = FindObservation(*store, "vm-a");
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->vm.vm_id(), "vm-a") << "round " << round;
    std::vector<std::string> ids;
    ASSERT_OK(store->Read([&](Transaction& txn) -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<v1::VMObservation> vms, txn.ListHostObservations("h1"));
      for (const v1::VMObservation& vm : vms) ids.push_back(vm.vm_id());
      return absl::OkStatus();
    }));
    EXPECT_EQ(ids, (std::vector<std::string>{"vm-a", "vm-b"}));
  }
  // And the second Report wrote nothing: neither overwrote the other.
  size_t written = 99;
  ASSERT_OK(store->WriteSync([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<std::string> ids,
                     ReplaceObservations(txn, "h1",
                                         std::vector<v1::VMObservation>{
                                             MakeObservation("vm-a", "", "g-a"),
                                             MakeObservation("vm-b", "vm-a", "g-b")}));
    written = ids.size();
    return absl::OkStatus();
  }));
  EXPECT_EQ(written, 0u);
}

TEST_P(StoreContractTest, ReplaceObservationsWritesOnlyWhatChanged) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto replace = [&](std::vector<v1::VMObservation> vms, int64_t stamp_ns) {
    size_t written = 99;
    const google::protobuf::Timestamp stamp =
        google::protobuf::util::TimeUtil::NanosecondsToTimestamp(stamp_ns);
    google::protobuf::RepeatedPtrField<v1::VMObservation> field(vms.begin(), vms.end());
    EXPECT_OK(store->WriteSync([&](Transaction& txn) -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<std::string> ids,
                       ReplaceObservations(txn, "h1", field, &stamp));
      written = ids.size();
      return absl::OkStatus();
    }));
    return written;
  };
  EXPECT_EQ(replace({MakeObservation("vm-a", "uuid-a", "g"), MakeObservation("vm-b", "", "g")},
                    1000),
            2u);
  // Only the stamp differs: nothing is written, and the stored stamp stays.
  EXPECT_EQ(replace({MakeObservation("vm-a", "uuid-a", "g"), MakeObservation("vm-b", "", "g")},
                    2000),
            0u);
  EXPECT_EQ(google::protobuf::util::TimeUtil::TimestampToNanoseconds(
                FindObservation(*store, "vm-b")->vm.enforcement().report_time()),
            1000);
  // vm-a changed, vm-b went, vm-c came: three writes.
  EXPECT_EQ(replace({MakeObservation("vm-a", "uuid-a", "g2"), MakeObservation("vm-c", "", "g")},
                    3000),
            3u);
  EXPECT_EQ(google::protobuf::util::TimeUtil::TimestampToNanoseconds(
                FindObservation(*store, "uuid-a")->vm.enforcement().report_time()),
            3000);
  EXPECT_FALSE(FindObservation(*store, "vm-b").has_value());

  absl::Status twice = store->WriteSync([](Transaction& txn) {
    return ReplaceObservations(txn, "h1",
                               std::vector<v1::VMObservation>{MakeObservation("vm-d", "", "g"),
                                                              MakeObservation("vm-d", "", "g")})
        .status();
  });
  EXPECT_THAT(twice, StatusIs(absl::StatusCode::kInvalidArgument, "vm-d twice"));
  EXPECT_FALSE(FindObservation(*store, "vm-d").has_value());
}

TEST_P(StoreContractTest, TrustGroupMustBelongToTheVmsTenant) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  for (const char* group : {"g1", "t2/vm/vm-1", "t1", "t1x/vm/vm-1", "/t1"}) {
    absl::Status s = store->WriteSync(
        [&](Transaction& txn) { return txn.PutVm(MakeVm("vm-1", "t1", "h1", group)); });
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << group << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("does not begin with its tenant 't1/'"));
  }
  EXPECT_FALSE(GetVm(*store, "vm-1").has_value());
  for (const char* group : {"", "t1/vm/vm-1", "t1/tenant"}) {
    EXPECT_TRUE(store
                    ->WriteSync([&](Transaction& txn) {
                      return txn.PutVm(MakeVm("vm-1", "t1", "h1", group));
                    })
                    .ok())
        << group;
  }
}

TEST_P(StoreContractTest, ListsPageAndFilter) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store
                  ->WriteSync([](Transaction& txn) -> absl::Status {
                    for (int i = 0; i < 25; ++i) {
                      std::string id =
                          absl::StrCat("vm-", i < 10 ? "0" : "", i);
                      const std::string tenant = i % 2 ? "odd" : "even";
                      RETURN_IF_ERROR(txn.PutVm(MakeVm(id, tenant, absl::StrCat("h", i % 3),
                                                       absl::StrCat(tenant, "/g", i % 5))));
                    }
                    for (const char* id : {"t-b", "t-a", "t-c"}) {
                      v1::TenantPolicy policy;
                      policy.set_tenant_id(id);
                      RETURN_IF_ERROR(txn.PutTenantPolicy(policy));
                      v1::Host host;
                      host.set_host_id(absl::StrCat("host-", id));
                      RETURN_IF_ERROR(txn.PutHost(host));
                    }
                    return absl::OkStatus();
                  })
                  .ok());

  std::vector<std::string> all;
  Page page{.after = "", .limit = 10};
  std::vector<size_t> sizes;
  while (true) {
    std::vector<v1::VM> vms = ListVms(*store, {}, page);
    if (vms.empty()) break;
    sizes.push_back(vms.size());
    for (const v1::VM& vm : vms) all.push_back(vm.vm_id());
    page.after = vms.back().vm_id();
  }
  EXPECT_THAT(sizes, ::testing::ElementsAre(10u, 10u, 5u));
  ASSERT_EQ(all.size(), 25u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  EXPECT_EQ(all.front(), "vm-00");

  EXPECT_EQ(ListVms(*store, {}, {.after = "", .limit = 0}).size(), 1u);
  EXPECT_EQ(ListVms(*store, {}, {.after = "", .limit = -5}).size(), 1u);
  EXPECT_EQ(ListVms(*store, {}, {.after = "", .limit = 1000000}).size(), 25u);

  EXPECT_EQ(ListVms(*store, Filter("odd", "", ""), {.after = "", .limit = 100})
                .size(),
            12u);
  EXPECT_THAT(VmIds(ListVms(*store, Filter("odd", "h0", ""),
                            {.after = "", .limit = 100})),
              ::testing::ElementsAre("vm-03", "vm-09", "vm-15", "vm-21"));
  EXPECT_THAT(VmIds(ListVms(*store, Filter("", "", "even/g4"),
                            {.after = "vm-04", .limit = 100})),
              ::testing::ElementsAre("vm-14", "vm-24"));
  EXPECT_THAT(VmIds(ListVms(*store, Filter("", "", "odd/g4"), {.after = "", .limit = 100})),
              ::testing::ElementsAre("vm-09", "vm-19"));
  EXPECT_THAT(VmIds(ListVms(*store, Filter("even", "h2", "even/g0"),
                            {.after = "", .limit = 100})),
              ::testing::ElementsAre("vm-20"));
  // A group is one tenant's: with another tenant, or a name that is no
  // tenant's group, nothing matches.
  EXPECT_TRUE(
      ListVms(*store, Filter("odd", "", "even/g0"), {.after = "", .limit = 100}).empty());
  EXPECT_TRUE(ListVms(*store, Filter("", "", "g0"), {.after = "", .limit = 100}).empty());
  EXPECT_TRUE(
      ListVms(*store, Filter("nobody", "", ""), {.after = "", .limit = 100})
          .empty());

  ASSERT_TRUE(store
                  ->Read([](Transaction& txn) -> absl::Status {
                    ASSIGN_OR_RETURN(
                        auto policies,
                        txn.ListTenantPolicies({.after = "t-a", .limit = 1}));
                    EXPECT_EQ(policies.size(), 1u);
                    if (!policies.empty()) {
                      EXPECT_EQ(policies[0].tenant_id(), "t-b");
                    }
                    ASSIGN_OR_RETURN(auto hosts,
                                     txn.ListHosts({.after = "", .limit = 10}));
                    EXPECT_EQ(hosts.size(), 3u);
                    if (hosts.size() == 3) {
                      EXPECT_EQ(hosts[2].host_id(), "host-t-c");
                    }
                    return absl::OkStatus();
                  })
                  .ok());
}

// What an exporter of the trail reads: after a sequence, oldest first, at
// most `limit`; committed records only.
TEST_P(StoreContractTest, AuditListsAfterASequenceOldestFirst) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store
                  ->WriteSync([](Transaction& txn) -> absl::Status {
                    for (int i = 1; i <= 5; ++i) {
                      RETURN_IF_ERROR(txn.AppendAudit(MakeAudit("alice", "vm-1", 100 * i)));
                    }
                    return absl::OkStatus();
                  })
                  .ok());
  ASSERT_TRUE(store
                  ->Read([](Transaction& txn) -> absl::Status {
                    ASSIGN_OR_RETURN(auto first, txn.ListAuditAfter(0, 2));
                    EXPECT_EQ(first.size(), 2u);
                    if (first.size() != 2u) return absl::OkStatus();
                    EXPECT_EQ(first[0].time_unix_ns(), 100);
                    EXPECT_EQ(first[1].time_unix_ns(), 200);
                    EXPECT_LT(first[0].sequence(), first[1].sequence());
                    ASSIGN_OR_RETURN(auto rest, txn.ListAuditAfter(first[1].sequence(), 10));
                    EXPECT_EQ(rest.size(), 3u);
                    if (rest.size() != 3u) return absl::OkStatus();
                    EXPECT_EQ(rest[0].time_unix_ns(), 300);
                    EXPECT_EQ(rest[2].time_unix_ns(), 500);
                    ASSIGN_OR_RETURN(auto none, txn.ListAuditAfter(rest[2].sequence(), 10));
                    EXPECT_TRUE(none.empty());
                    return absl::OkStatus();
                  })
                  .ok());
  absl::Status in_write = store->WriteSync(
      [](Transaction& txn) { return txn.ListAuditAfter(0, 10).status(); });
  EXPECT_TRUE(absl::IsFailedPrecondition(in_write)) << in_write;
}

TEST_P(StoreContractTest, AuditAppendsAndListsNewestFirstWithFilters) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store
                  ->WriteSync([](Transaction& txn) -> absl::Status {
                    RETURN_IF_ERROR(txn.AppendAudit(MakeAudit("alice", "vm-1", 100)));
                    RETURN_IF_ERROR(txn.AppendAudit(MakeAudit("bob", "vm-2", 200)));
                    return txn.AppendAudit(MakeAudit("alice", "vm-2", 300));
                  })
                  .ok());
  // A failed write takes its audit record with it.
  EXPECT_FALSE(store
                   ->WriteSync([](Transaction& txn) -> absl::Status {
                     RETURN_IF_ERROR(txn.AppendAudit(MakeAudit("eve", "vm-3", 400)));
                     return absl::AbortedError("change failed");
                   })
                   .ok());
  ASSERT_TRUE(store
                  ->Read([](Transaction& txn) -> absl::Status {
                    ASSIGN_OR_RETURN(auto all, txn.ListAudit({}, 0, 10));
                    EXPECT_EQ(all.size(), 3u);
                    if (all.size() != 3u) return absl::OkStatus();
                    EXPECT_EQ(all[0].time_unix_ns(), 300);
                    EXPECT_EQ(all[2].time_unix_ns(), 100);
                    EXPECT_GT(all[0].sequence(), all[1].sequence());
                    ASSIGN_OR_RETURN(auto older, txn.ListAudit({}, all[0].sequence(), 1));
                    EXPECT_EQ(older.size(), 1u);
                    if (!older.empty()) {
                      EXPECT_EQ(older[0].time_unix_ns(), 200);
                    }
                    AuditFilter alice;
                    alice.who = "alice";
                    ASSIGN_OR_RETURN(auto by_who, txn.ListAudit(alice, 0, 10));
                    EXPECT_EQ(by_who.size(), 2u);
                    AuditFilter vm2_since;
                    vm2_since.subject = "vm-2";
                    vm2_since.since_unix_ns = 250;
                    ASSIGN_OR_RETURN(auto recent, txn.ListAudit(vm2_since, 0, 10));
                    EXPECT_EQ(recent.size(), 1u);
                    EXPECT_FALSE(txn.AppendAudit(MakeAudit("x", "y", 1)).ok());
                    return absl::OkStatus();
                  })
                  .ok());
}

TEST_P(StoreContractTest, ReadOnlyTransactionRefusesWrites) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::vector<absl::Status> results;
  ASSERT_TRUE(store
                  ->Read([&](Transaction& txn) {
                    results.push_back(txn.WriteRevision().status());
                    results.push_back(txn.PutVm(MakeVm("vm-1")));
                    results.push_back(txn.DeleteVm("vm-1"));
                    results.push_back(txn.PutTenantPolicy(v1::TenantPolicy()));
                    results.push_back(txn.PutHost(v1::Host()));
                    results.push_back(txn.PutObservation("h1", MakeObservation("vm-1", "", "")));
                    results.push_back(txn.DeleteObservation("h1", "vm-1"));
                    results.push_back(txn.RecordChange("h1", "vm-1"));
                    return absl::OkStatus();
                  })
                  .ok());
  for (const absl::Status& status : results) {
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  }
  EXPECT_FALSE(GetVm(*store, "vm-1").has_value());
}

TEST_P(StoreContractTest, CommitObserverGetsHostsAndRevision) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::mutex mu;
  std::vector<std::pair<std::vector<std::string>, int64_t>> calls;
  store->SetCommitObserver(
      [&](const std::vector<std::string>& hosts, int64_t revision) {
        std::lock_guard<std::mutex> lock(mu);
        calls.emplace_back(hosts, revision);
      });
  ASSERT_TRUE(store
                  ->WriteSync([](Transaction& txn) -> absl::Status {
                    RETURN_IF_ERROR(txn.RecordChange("h1", "vm-1"));
                    RETURN_IF_ERROR(txn.RecordChange("h2", "vm-2"));
                    return txn.RecordChange("h1", "vm-3");
                  })
                  .ok());
  const int64_t revision = store->CurrentRevision();
  // Neither a write without changes nor a failed one is observed; each
  // WriteSync also waits for the observer call of the batch before it.
  ASSERT_TRUE(store
                  ->WriteSync([](Transaction& txn) {
                    return txn.PutVm(MakeVm("vm-9"));
                  })
                  .ok());
  EXPECT_FALSE(store
                   ->WriteSync([](Transaction& txn) -> absl::Status {
                     RETURN_IF_ERROR(txn.RecordChange("h3", "vm-4"));
                     return absl::AbortedError("no");
                   })
                   .ok());
  ASSERT_TRUE(
      store->WriteSync([](Transaction&) { return absl::OkStatus(); }).ok());

  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_THAT(calls[0].first, UnorderedElementsAre("h1", "h2"));
  EXPECT_EQ(calls[0].second, revision);
  EXPECT_GT(revision, 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreContractTest, ::testing::Values("sqlite", "etcd"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace cosched::store
