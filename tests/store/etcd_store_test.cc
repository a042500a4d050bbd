// What only EtcdStore does, against a real etcd member: its revisions,
// etcd's compaction, values that do not parse, etcd's request limits, etcd
// going away, lost answers, the index built at open, and the prefix rule.
// Replicas racing are in etcd_store_race_test.cc; the Store contract both
// backends keep is in store_contract_test.cc.
#include "store/etcd_store.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "cosched/store/etcd_records.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/store/etcd_store_fixture.h"
#include "tests/store/store_test_records.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_pki.h"

namespace cosched::store {
namespace {

using ::testing::HasSubstr;

TEST_F(EtcdStoreTest, RevisionsAreEtcdRevisionsOnEveryReplica) {
  auto a = OpenReplica();
  auto b = OpenReplica();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  int64_t written = 0;
  ASSERT_OK(a->WriteSync([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(written, txn.WriteRevision());
    RETURN_IF_ERROR(txn.PutVm(MakeVm("vm-1", "t1", "h1")));
    return txn.RecordChange("h1", "vm-1");
  }));
  auto head = a->client().Range("/cosched/meta", "");
  ASSERT_OK(head.status());
  const int64_t committed = head->kvs[0].mod_revision();
  EXPECT_EQ(a->CurrentRevision(), committed);
  // At most the commit's: the replicas' own keys (under leases) may have
  // changed between the snapshot and the commit.
  EXPECT_LE(written, committed);
  EXPECT_GT(written, 1);
  HostChanges changes = ChangesSince(*b, "h1", committed - 1);
  EXPECT_TRUE(changes.complete);
  EXPECT_THAT(changes.vm_ids, ::testing::ElementsAre("vm-1"));
  EXPECT_EQ(b->CurrentRevision(), committed);
  EXPECT_TRUE(ChangesSince(*b, "h1", committed).vm_ids.empty());
}

TEST_F(EtcdStoreTest, ChangesSinceACompactedRevisionIsIncomplete) {
  auto store = OpenReplica();
  ASSERT_NE(store, nullptr);
  std::vector<int64_t> revisions;
  for (int i = 0; i < 5; ++i) {
    revisions.push_back(PutAndRecord(*store, MakeVm(absl::StrCat("vm-", i), "t1", "h1")));
  }
  EXPECT_TRUE(ChangesSince(*store, "h1", revisions[0]).complete);
  ASSERT_OK(store->client().Compact(revisions[3]));
  EXPECT_FALSE(ChangesSince(*store, "h1", 0).complete);
  EXPECT_FALSE(ChangesSince(*store, "h1", revisions[1]).complete);
  HostChanges recent = ChangesSince(*store, "h1", revisions[3]);
  EXPECT_TRUE(recent.complete);
  EXPECT_THAT(recent.vm_ids, ::testing::ElementsAre("vm-4"));
}

TEST_F(EtcdStoreTest, AValueThatDoesNotParseIsDataLossNamingItsKey) {
  auto store = OpenReplica();
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->WriteSync([](Transaction& txn) { return txn.PutVm(MakeVm("vm-0")); }));
  ASSERT_OK(store->client().Put("/cosched/vms/vm-bad", "\xff\xff\xff not a VM").status());
  // A write outside csd's reaches the replica's cache through its watch.
  absl::Status got;
  EXPECT_TRUE(testing::Eventually([&] {
    got = store->Read([](Transaction& txn) { return txn.GetVm("vm-bad").status(); });
    return !got.ok();
  }));
  EXPECT_TRUE(absl::IsDataLoss(got)) << got;
  EXPECT_THAT(std::string(got.message()), HasSubstr("/cosched/vms/vm-bad"));
  absl::Status listed = store->Read([](Transaction& txn) {
    return txn.ListVms({}, {.after = "", .limit = 100}).status();
  });
  EXPECT_TRUE(absl::IsDataLoss(listed)) << listed;
  // A write that reads it fails the same way and writes nothing.
  absl::Status write = store->WriteSync([](Transaction& txn) -> absl::Status {
    RETURN_IF_ERROR(txn.PutVm(MakeVm("vm-2")));
    return txn.ListVms({}, {.after = "", .limit = 100}).status();
  });
  EXPECT_TRUE(absl::IsDataLoss(write)) << write;
  EXPECT_FALSE(GetVm(*store, "vm-2").has_value());

  // Damaged metadata: the store does not open.
  ASSERT_OK(store->client().Put("/cosched/meta", "\xff\xff").status());
  EtcdStoreOptions options;
  options.client = etcd_.ClientOptions();
  absl::Status opened = EtcdStore::Open(options).status();
  EXPECT_TRUE(absl::IsDataLoss(opened)) << opened;
  EXPECT_THAT(std::string(opened.message()), HasSubstr("/cosched/meta"));
}

TEST_F(EtcdStoreTest, AWriteOverEtcdsLimitsIsRefusedNamingTheLimit) {
  auto store = OpenReplica();
  ASSERT_NE(store, nullptr);
  absl::Status many = store->WriteSync([](Transaction& txn) -> absl::Status {
    for (int i = 0; i < 200; ++i) RETURN_IF_ERROR(txn.PutVm(MakeVm(absl::StrCat("vm-", i))));
    return absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsResourceExhausted(many)) << many;
  EXPECT_THAT(std::string(many.message()), HasSubstr("limit of 128 operations"));
  EXPECT_THAT(std::string(many.message()), HasSubstr("--max-txn-ops"));
  EXPECT_FALSE(GetVm(*store, "vm-0").has_value());

  absl::Status big = store->WriteSync([](Transaction& txn) {
    v1::VM vm = MakeVm("vm-big");
    vm.set_conflict(std::string(2 << 20, 'x'));
    return txn.PutVm(vm);
  });
  EXPECT_TRUE(absl::IsResourceExhausted(big)) << big;
  EXPECT_THAT(std::string(big.message()), HasSubstr("--max-request-bytes"));
  EXPECT_FALSE(GetVm(*store, "vm-big").has_value());
}

// Many small writes queued together are more than one Txn can hold: the
// batch is committed in several, each write whole.
TEST_F(EtcdStoreTest, ABatchOverTheLimitsIsSplitBetweenWrites) {
  auto store = OpenReplica();
  ASSERT_NE(store, nullptr);
  std::latch started(1), release(1);
  store->Write([&](Transaction&) {
                 started.count_down();
                 release.wait();
                 return absl::OkStatus();
               },
               nullptr);
  started.wait();
  constexpr int kWrites = 60;  // 3 keys each: 180 operations
  std::latch done(kWrites);
  std::atomic<int> failed{0};
  for (int i = 0; i < kWrites; ++i) {
    store->Write(
        [i](Transaction& txn) -> absl::Status {
          std::string id = absl::StrCat("vm-", i);
          RETURN_IF_ERROR(txn.PutVm(MakeVm(id, "t1", "h1")));
          RETURN_IF_ERROR(txn.RecordChange("h1", id));
          return txn.AppendAudit(MakeAudit("alice", id, i));
        },
        [&](absl::Status s) {
          if (!s.ok()) ++failed;
          done.count_down();
        });
  }
  const int64_t before = store->CurrentRevision();
  release.count_down();
  done.wait();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(ListVms(*store, {}, {.after = "", .limit = 1000}).size(), size_t{kWrites});
  EXPECT_EQ(ChangesSince(*store, "h1", before).vm_ids.size(), size_t{kWrites});
  EXPECT_GE(store->CurrentRevision(), before + 2);  // at least two commits
}

TEST_F(EtcdStoreTest, WithEtcdGoneWritesFailUnavailableQuicklyNamingEtcd) {
  auto store = OpenReplica();
  ASSERT_NE(store, nullptr);
  std::atomic<bool> reachable{true};
  store->SetReachabilityObserver([&](bool up, const std::string&) { reachable = up; });
  ASSERT_OK(store->WriteSync([](Transaction& txn) { return txn.PutVm(MakeVm("vm-1")); }));
  etcd_.Kill();
  // The replica learns it from its watch at once; a write sent before
  // that would wait for its answer, and then for etcd to tell whether it
  // was applied.
  ASSERT_TRUE(testing::Eventually([&] { return !reachable.load(); }));
  const auto start = std::chrono::steady_clock::now();
  absl::Status write =
      store->WriteSync([](Transaction& txn) { return txn.PutVm(MakeVm("vm-2")); });
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(absl::IsUnavailable(write)) << write;
  EXPECT_THAT(std::string(write.message()), HasSubstr(absl::StrCat("etcd at ", etcd_.endpoint())));
  EXPECT_LT(took, std::chrono::milliseconds(2500));
  absl::Status read = store->Read([](Transaction& txn) { return txn.GetVm("vm-1").status(); });
  EXPECT_TRUE(absl::IsUnavailable(read)) << read;

  // Back once etcd is, and the watch with it.
  ASSERT_OK(etcd_.Restart());
  ASSERT_TRUE(testing::Eventually([&] { return reachable.load(); }));
  ASSERT_OK(store->WriteSync([](Transaction& txn) { return txn.PutVm(MakeVm("vm-3")); }));
  EXPECT_TRUE(GetVm(*store, "vm-1").has_value());
  EXPECT_FALSE(GetVm(*store, "vm-2").has_value());
}

// A loopback TCP proxy to etcd that can hold etcd's answers back (it stops
// reading them; nothing is lost or reordered, they arrive late): a commit
// then reaches etcd and is applied while its answer comes after the
// client's deadline, as when a network drops the way back.
class AnswerDelayProxy {
 public:
  explicit AnswerDelayProxy(int target_port) : target_port_(target_port) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    bind(listener_, reinterpret_cast<sockaddr*>(&addr), len);
    listen(listener_, 8);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~AnswerDelayProxy() {
    stop_ = true;
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    acceptor_.join();
    for (std::thread& t : links_) t.join();
  }
  std::string endpoint() const { return absl::StrCat("127.0.0.1:", port_); }
  void HoldAnswers(bool hold) { hold_ = hold; }

 private:
  void Accept() {
    while (!stop_) {
      int client = accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      int server = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(target_port_);
      if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close(client);
        close(server);
        continue;
      }
      links_.emplace_back([this, client, server] { Pump(client, server); });
    }
  }
  // One connection until either side closes or the proxy stops.
  void Pump(int client, int server) {
    char buf[65536];
    while (!stop_) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, static_cast<short>(hold_ ? 0 : POLLIN), 0}};
      if (poll(fds, 2, 20) < 0) break;
      bool open = true;
      for (int i = 0; i < 2 && open; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = read(fds[i].fd, buf, sizeof buf);
        if (n <= 0) open = false;
        for (ssize_t off = 0; open && off < n;) {
          ssize_t w = write(fds[1 - i].fd, buf + off, n - off);
          if (w <= 0) open = false;
          off += w;
        }
      }
      if (!open) break;
    }
    close(client);
    close(server);
  }

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false}, hold_{false};
  std::thread acceptor_;
  std::vector<std::thread> links_;  // the acceptor's only, until the destructor
};

// A commit applied by etcd whose answer came too late: the store finds its
// commit in etcd before it answers, so the write is OK (not UNAVAILABLE for
// something that was written), and it is written once.
TEST_F(EtcdStoreTest, ACommitWhoseAnswerWasLostIsFoundAndAnsweredOk) {
  AnswerDelayProxy proxy(std::stoi(etcd_.endpoint().substr(etcd_.endpoint().rfind(':') + 1)));
  EtcdStoreOptions options;
  options.client = etcd_.ClientOptions();
  options.client.endpoints = {proxy.endpoint()};
  options.client.timeout = absl::Milliseconds(500);
  auto store = EtcdStore::Open(options);
  ASSERT_OK(store.status());
  std::atomic<int> runs{0};
  std::thread release;
  absl::Status written = (*store)->WriteSync([&](Transaction& txn) -> absl::Status {
    // PutVm reads the VM it replaces (for its index keys).
    RETURN_IF_ERROR(txn.PutVm(MakeVm("vm-1", "t1", "h1")));
    if (runs++ == 0) {
      // Everything is read; hold back the answer to the commit, and let
      // answers through again once its deadline has passed.
      proxy.HoldAnswers(true);
      release = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(800));
        proxy.HoldAnswers(false);
      });
    }
    return txn.AppendAudit(MakeAudit("alice", "vm-1", 1));
  });
  release.join();
  EXPECT_OK(written);
  EXPECT_EQ(runs.load(), 1);  // found, not run again
  EXPECT_TRUE(GetVm(**store, "vm-1").has_value());
  std::vector<v1::AuditRecord> audit;
  ASSERT_OK((*store)->Read([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(audit, txn.ListAudit({}, 0, 10));
    return absl::OkStatus();
  }));
  EXPECT_EQ(audit.size(), 1u);
}

// Issue #32 item 10: when other writers changed meta more than the walk
// back looks (64 versions) while a commit's answer was lost, the store
// cannot tell whether the commit applied. Before, it answered as if it had
// not; now it says that the outcome is unknown.
TEST_F(EtcdStoreTest, ACommitWhoseAnswerWasLostBehindManyOthersIsOfUnknownOutcome) {
  AnswerDelayProxy proxy(std::stoi(etcd_.endpoint().substr(etcd_.endpoint().rfind(':') + 1)));
  EtcdStoreOptions options;
  options.client = etcd_.ClientOptions();
  options.client.endpoints = {proxy.endpoint()};
  options.client.timeout = absl::Milliseconds(2500);
  options.replicas.name = "slow";
  auto store = EtcdStore::Open(options);
  ASSERT_OK(store.status());
  EtcdStoreOptions direct_options;
  direct_options.client = etcd_.ClientOptions();
  direct_options.replicas.name = "busy";
  auto other = EtcdStore::Open(direct_options);
  ASSERT_OK(other.status());
  std::atomic<int> runs{0};
  std::thread busy;
  absl::Status written = (*store)->WriteSync([&](Transaction& txn) -> absl::Status {
    RETURN_IF_ERROR(txn.PutVm(MakeVm("vm-1", "t1", "h1")));
    if (runs++ == 0) {
      // The commit reaches etcd, its answer does not; meanwhile another
      // replica commits 70 times, all before this store's fence.
      // Answers come back 3 s later: after the commit's 2.5 s deadline,
      // within the fence's that follows it.
      proxy.HoldAnswers(true);
      const auto held = std::chrono::steady_clock::now();
      busy = std::thread([&, held] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        for (int i = 0; i < 70; ++i) {
          EXPECT_OK((*other)->WriteSync([i](Transaction& t) {
            return t.PutVm(MakeVm(absl::StrCat("other-", i), "t2", "h2"));
          }));
        }
        std::this_thread::sleep_until(held + std::chrono::seconds(3));
        proxy.HoldAnswers(false);
      });
    }
    return absl::OkStatus();
  });
  busy.join();
  EXPECT_TRUE(absl::IsUnavailable(written)) << written;
  EXPECT_NE(written.message().find("whether the write was applied is unknown"),
            std::string::npos)
      << written;
  EXPECT_NE(written.message().find("more than 64 times"), std::string::npos) << written;
}

// A store of layout 1 (no vm_by/ index: written before it existed) gets
// its index built at open, then lists by host and tenant from it; a VM that
// moves leaves no index key behind.
TEST_F(EtcdStoreTest, AStoreWithoutTheVmIndexGetsItAtOpen) {
  auto client = etcd::Client::Create(etcd_.ClientOptions());
  ASSERT_OK(client);
  EtcdMeta meta;
  meta.set_layout_version(1);
  ASSERT_OK((*client)->Put("/cosched/meta", meta.SerializeAsString()).status());
  for (int i = 0; i < 50; ++i) {
    v1::VM vm = MakeVm(absl::StrCat("vm-", 100 + i), i % 2 ? "t1" : "t2", i < 30 ? "h1" : "h2");
    vm.add_presence()->set_host_id(vm.host_id());
    ASSERT_OK((*client)->Put(absl::StrCat("/cosched/vms/", vm.vm_id()), vm.SerializeAsString())
                  .status());
  }
  auto store = OpenReplica();
  ASSERT_NE(store, nullptr);
  auto meta_kv = (*client)->Range("/cosched/meta", "");
  ASSERT_OK(meta_kv);
  ASSERT_TRUE(meta.ParseFromString(meta_kv->kvs[0].value()));
  EXPECT_EQ(meta.layout_version(), 2);
  auto index = (*client)->Range("/cosched/vm_by/", etcd::PrefixEnd("/cosched/vm_by/"));
  ASSERT_OK(index);
  EXPECT_EQ(index->kvs.size(), 150u);  // host, reported and tenant of each

  // One filter's VMs, with every field named (the others empty).
  auto count = [&](std::string tenant_id, std::string host_id,
                   std::string reported_on = "") -> size_t {
    VmFilter filter;
    filter.tenant_id = std::move(tenant_id);
    filter.host_id = std::move(host_id);
    filter.reported_on = std::move(reported_on);
    std::vector<v1::VM> all;
    absl::Status read = store->Read([&](Transaction& txn) -> absl::Status {
      Page page;
      page.limit = 7;  // several pages, by the index
      while (true) {
        ASSIGN_OR_RETURN(auto batch, txn.ListVms(filter, page));
        all.insert(all.end(), batch.begin(), batch.end());
        if (static_cast<int>(batch.size()) < page.limit) break;
        page.after = batch.back().vm_id();
      }
      return absl::OkStatus();
    });
    EXPECT_OK(read);
    return all.size();
  };
  EXPECT_EQ(count("", "h1"), 30u);
  EXPECT_EQ(count("", "h2"), 20u);
  EXPECT_EQ(count("", "", "h1"), 30u);
  EXPECT_EQ(count("t1", ""), 25u);
  EXPECT_EQ(count("t1", "h1"), 15u);

  // vm-100 moves to h2, vm-101 goes: their old keys go with them.
  ASSERT_OK(store->WriteSync([](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto vm, txn.GetVm("vm-100"));
    vm->set_host_id("h2");
    vm->mutable_presence(0)->set_host_id("h2");
    RETURN_IF_ERROR(txn.PutVm(*vm));
    return txn.DeleteVm("vm-101");
  }));
  EXPECT_EQ(count("", "h1"), 28u);
  EXPECT_EQ(count("", "h2"), 21u);
  EXPECT_EQ(count("", "", "h2"), 21u);
  index = (*client)->Range("/cosched/vm_by/", etcd::PrefixEnd("/cosched/vm_by/"));
  ASSERT_OK(index);
  EXPECT_EQ(index->kvs.size(), 147u);
  for (const auto& kv : index->kvs) {
    EXPECT_EQ(kv.key().find("vm-101"), std::string::npos) << kv.key();
    EXPECT_NE(kv.key(), "/cosched/vm_by/host/h1/vm-100");
  }
}

TEST_F(EtcdStoreTest, PrefixMustBeAbsolute) {
  for (const char* prefix : {"", "cosched", "/cosched/", "/"}) {
    EtcdStoreOptions options;
    options.client = etcd_.ClientOptions();
    options.prefix = prefix;
    absl::Status opened = EtcdStore::Open(options).status();
    EXPECT_TRUE(absl::IsInvalidArgument(opened)) << prefix << ": " << opened;
    EXPECT_THAT(std::string(opened.message()), HasSubstr("store.etcd.prefix"));
  }
}

// Two prefixes on one etcd are two stores.
TEST_F(EtcdStoreTest, PrefixesKeepStoresApart) {
  auto a = OpenReplica("/a");
  auto ab = OpenReplica("/ab");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(ab, nullptr);
  ASSERT_OK(ab->WriteSync([](Transaction& txn) { return txn.PutVm(MakeVm("vm-1")); }));
  EXPECT_TRUE(ListVms(*a, {}, {.after = "", .limit = 10}).empty());
  EXPECT_EQ(ListVms(*ab, {}, {.after = "", .limit = 10}).size(), 1u);
}


// Mutual TLS to etcd, as the agent link: with the CA and a client
// certificate the store works; without the certificate, or in plaintext, the
// member refuses it and the error names etcd.
TEST(EtcdStoreTlsTest, MutualTlsToEtcd) {
  testing::TempDir dir;
  testing::TestPki pki(dir.path());
  ASSERT_TRUE(pki.MakeCa("ca"));
  ASSERT_TRUE(pki.MakeCert("ca", "server", "IP:127.0.0.1"));
  ASSERT_TRUE(pki.MakeCert("ca", "csd", "URI:spiffe://cosched/csd"));
  testing::EtcdMemberOptions member_options;
  member_options.ca = dir.Sub("ca.crt");
  member_options.server_cert = dir.Sub("server.crt");
  member_options.server_key = dir.Sub("server.key");
  member_options.client_cert = dir.Sub("csd.crt");
  member_options.client_key = dir.Sub("csd.key");
  testing::EtcdMember etcd(member_options);
  ASSERT_OK(etcd.Start());

  EtcdStoreOptions options;
  options.client = etcd.ClientOptions();
  auto store = EtcdStore::Open(options);
  ASSERT_OK(store.status());
  ASSERT_OK((*store)->WriteSync([](Transaction& txn) { return txn.PutVm(MakeVm("vm-1")); }));
  EXPECT_TRUE(GetVm(**store, "vm-1").has_value());

  options.client.timeout = absl::Milliseconds(500);
  options.client.tls.clear_cert_file();
  options.client.tls.clear_key_file();
  absl::Status no_cert = EtcdStore::Open(options).status();
  EXPECT_TRUE(absl::IsUnavailable(no_cert)) << no_cert;
  EXPECT_THAT(std::string(no_cert.message()), HasSubstr("etcd at " + etcd.endpoint()));

  options.client.tls.Clear();
  absl::Status plaintext = EtcdStore::Open(options).status();
  EXPECT_TRUE(absl::IsUnavailable(plaintext)) << plaintext;
}

}  // namespace
}  // namespace cosched::store
