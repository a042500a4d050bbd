// A randomized history through three csd processes on a 3-member etcd
// cluster (issue #35's correctness test): client threads tag, untag and
// read three VMs and set and read one tenant policy through any replica,
// while an etcd member (the leader) and a csd replica are SIGKILLed
// midway. Each key is then checked as a register against real time: no
// read returns a value no write could have left, or one that an
// acknowledged write had already replaced before the read began, or one
// older than what an earlier read saw; every surviving replica ends on the
// same value, which no acknowledged write had replaced. A write whose
// answer was lost (the replica died, a deadline) may or may not have taken
// effect, and is allowed either way.
//
// The checker is small (CheckRegister below) and is itself tested on
// histories that break each rule.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/testing/csd_process.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/free_port.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
constexpr char kInitial[] = "(initial)";

// One operation on one key, as the client saw it. Times are nanoseconds on
// the steady clock.
struct Op {
  enum class Result { kOk, kFailed, kUnknown };
  bool write = false;
  std::string value;  // written, or read
  int64_t invoke = 0;
  int64_t complete = 0;  // kNever for a write whose answer was lost
  Result result = Result::kOk;
  std::string who;  // thread and replica, for messages
};

std::string Describe(const Op& op) {
  return absl::StrCat(op.write ? "write " : "read ", op.value, " by ", op.who, " [", op.invoke,
                      ", ", op.complete == kNever ? std::string("lost answer") : absl::StrCat(op.complete),
                      "]");
}

// The rules a history of one register must keep, each a consequence of
// linearizability. `history` holds its writes (acknowledged, or answer
// lost; failed ones had no effect and are skipped) and its answered reads.
// Values are unique per write, but for `repeatable` ones (an untag, which
// any number of writes leave, and the initial value): such a read may come
// from any write of it, or from the start. Answers every violation.
std::vector<std::string> CheckRegister(const std::string& key, const std::vector<Op>& history,
                                       const std::string& repeatable) {
  std::vector<const Op*> writes, reads;
  Op initial;
  initial.write = true;
  initial.value = repeatable;
  initial.invoke = initial.complete = std::numeric_limits<int64_t>::min();
  initial.who = "the start";
  writes.push_back(&initial);
  for (const Op& op : history) {
    if (op.result == Op::Result::kFailed) continue;
    (op.write ? writes : reads).push_back(&op);
  }
  // A definite write that began after `w` was acknowledged and was itself
  // acknowledged before `t`: `w` was replaced by then.
  auto replaced_before = [&](const Op* w, int64_t t) {
    return std::any_of(writes.begin(), writes.end(), [&](const Op* w2) {
      return w2 != w && w2->result == Op::Result::kOk && w2->complete != kNever &&
             w->complete != kNever && w->complete < w2->invoke && w2->complete < t;
    });
  };
  // The writes a read may have seen.
  auto sources = [&](const Op* r) {
    std::vector<const Op*> found;
    for (const Op* w : writes) {
      if (w->value == r->value && w->invoke < r->complete && !replaced_before(w, r->invoke)) {
        found.push_back(w);
      }
    }
    return found;
  };
  std::vector<std::string> violations;
  for (const Op* r : reads) {
    if (sources(r).empty()) {
      violations.push_back(absl::StrCat(key, ": ", Describe(*r),
                                        ": no write could have left it (from the future, "
                                        "replaced before the read began, or never written)"));
    }
  }
  // Reads in real-time order never go back: a later read does not see a
  // value whose (unique) write was acknowledged before the earlier read's
  // write began.
  std::map<std::string, const Op*> write_of;
  for (const Op* w : writes) {
    if (w->value != repeatable) write_of.emplace(w->value, w);
  }
  auto unique_write = [&](const Op* r) -> const Op* {
    auto it = write_of.find(r->value);
    return it == write_of.end() ? nullptr : it->second;
  };
  for (const Op* r1 : reads) {
    const Op* w1 = unique_write(r1);
    if (w1 == nullptr) continue;
    for (const Op* r2 : reads) {
      if (r1->complete >= r2->invoke) continue;
      const Op* w2 = unique_write(r2);
      if (w2 != nullptr && w2->complete != kNever && w2->complete < w1->invoke) {
        violations.push_back(absl::StrCat(key, ": ", Describe(*r2), " after ", Describe(*r1),
                                          ": went back in time"));
      }
    }
  }
  return violations;
}

Op Write(std::string value, int64_t invoke, int64_t complete,
         Op::Result result = Op::Result::kOk) {
  return Op{true, std::move(value), invoke, complete, result, "t"};
}
Op Read(std::string value, int64_t invoke, int64_t complete) {
  return Op{false, std::move(value), invoke, complete, Op::Result::kOk, "t"};
}

TEST(CheckRegister, AcceptsWhatALinearizableRegisterCanDo) {
  EXPECT_TRUE(CheckRegister("k",
                            {Write("a", 0, 10), Read("a", 11, 12), Write("b", 5, 20),
                             Read("b", 13, 14), Read("a", 6, 19),
                             // a lost answer may have taken effect, later
                             Write("c", 21, kNever, Op::Result::kUnknown), Read("c", 30, 31),
                             // a failed write had no effect
                             Write("x", 32, 33, Op::Result::kFailed), Read("c", 34, 35),
                             Write("(none)", 36, 37), Read("(none)", 38, 39)},
                            "(none)")
                  .empty());
  EXPECT_TRUE(CheckRegister("k", {Read("(none)", 0, 1)}, "(none)").empty());
}

TEST(CheckRegister, FindsStaleFutureLostAndBackwardsReads) {
  // Stale: a was replaced by b before the read began.
  EXPECT_EQ(CheckRegister("k", {Write("a", 0, 1), Write("b", 2, 3), Read("a", 4, 5)}, "-").size(),
            1u);
  // From the future: c began after the read ended.
  EXPECT_EQ(CheckRegister("k", {Read("c", 0, 1), Write("c", 2, 3)}, "-").size(), 1u);
  // A failed write read back.
  EXPECT_EQ(CheckRegister("k", {Write("f", 0, 1, Op::Result::kFailed), Read("f", 2, 3)}, "-").size(),
            1u);
  // The start read after an acknowledged write: the write was lost.
  EXPECT_EQ(CheckRegister("k", {Write("a", 0, 1), Read("-", 2, 3)}, "-").size(), 1u);
  // Backwards: a later read sees a value replaced before the earlier one's
  // value was written (both reads alone would pass: b overlaps them).
  auto backwards = CheckRegister(
      "k", {Write("a", 0, 1), Write("b", 2, 50), Read("b", 10, 11), Read("a", 12, 13)}, "-");
  ASSERT_EQ(backwards.size(), 1u);
  EXPECT_NE(backwards[0].find("went back in time"), std::string::npos) << backwards[0];
}

// Status codes after which a write certainly did not happen; any other
// failure may have come after its commit.
bool Definite(grpc::StatusCode code) {
  return code == grpc::StatusCode::INVALID_ARGUMENT || code == grpc::StatusCode::NOT_FOUND ||
         code == grpc::StatusCode::FAILED_PRECONDITION ||
         code == grpc::StatusCode::PERMISSION_DENIED ||
         code == grpc::StatusCode::UNAUTHENTICATED;
}

class EtcdHistoryTest : public ::testing::Test {
 protected:
  static constexpr int kReplicas = 3;
  static constexpr int kThreads = 6;
  static constexpr int kVms = 3;
  static constexpr char kTenant[] = "acme";

  void SetUp() override { ASSERT_OK(etcd_.Start()); }

  // csd replica `i` as a process of its own, its etcd client starting at
  // member `i`.
  void StartReplica(int i) {
    std::vector<std::string> endpoints;
    for (const std::string& e : etcd_.Endpoints(i)) endpoints.push_back(absl::StrCat("\"", e, "\""));
    const std::string config = dir_.Sub(absl::StrCat("csd-", i, ".yaml"));
    std::ofstream(config) << "plaintext_role: admin\n"
                          << "store:\n  etcd:\n    endpoints: [" << absl::StrJoin(endpoints, ", ")
                          << "]\n    prefix: /cosched\n    replica_name: csd-" << i << "\n";
    const std::string address = absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort());
    csd_[i] = std::make_unique<testing::CsdProcess>(CSD_BINARY, address,
                                                    dir_.Sub(absl::StrCat("data-", i)), config);
    ASSERT_TRUE(csd_[i]->WaitServing()) << "replica " << i << " on " << address;
    control_[i] = v1::ControlPlane::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }

  static int64_t Now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
  }

  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + seconds(5));
    return context;
  }

  // One random operation through replica `r`; appends it to `history` under
  // its key (failed reads are dropped: they saw nothing).
  void RandomOp(int r, int thread, int n, std::mt19937& pick,
                std::map<std::string, std::vector<Op>>& history, std::mutex& mu) {
    const int which = std::uniform_int_distribution<int>(0, 9)(pick);
    const std::string vm = absl::StrCat("vm-", std::uniform_int_distribution<int>(0, kVms - 1)(pick));
    Op op;
    op.who = absl::StrCat("thread ", thread, " via csd-", r);
    op.invoke = Now();
    grpc::Status s;
    std::string key;
    if (which < 3) {  // TagVM with a class of its own: the VM's value
      key = vm;
      op.write = true;
      op.value = absl::StrCat("m", thread, "-", n);
      v1::TagVMRequest request;
      request.set_vm_id(vm);
      request.set_tenant_id(kTenant);
      request.add_interference_classes(op.value);
      v1::TagVMResponse response;
      s = control_[r]->TagVM(Context().get(), request, &response);
    } else if (which < 5) {  // UntagVM
      key = vm;
      op.write = true;
      op.value = kInitial;
      v1::UntagVMRequest request;
      request.set_vm_id(vm);
      v1::UntagVMResponse response;
      s = control_[r]->UntagVM(Context().get(), request, &response);
    } else if (which < 6) {  // SetTenantPolicy with a budget of its own
      key = "policy";
      op.write = true;
      v1::SetTenantPolicyRequest request;
      v1::TenantPolicy* policy = request.mutable_policy();
      policy->set_tenant_id(kTenant);
      policy->set_default_isolation(v1::ISOLATION_LEVEL_VM);
      policy->add_allowed_isolation(v1::ISOLATION_LEVEL_VM);
      policy->add_allowed_isolation(v1::ISOLATION_LEVEL_TENANT);
      policy->set_forced_idle_budget_pct((thread * 2000 + n) / 200.0);
      op.value = absl::StrFormat("%.3f", policy->forced_idle_budget_pct());
      v1::TenantPolicy response;
      s = control_[r]->SetTenantPolicy(Context().get(), request, &response);
    } else if (which < 9) {  // GetVM
      key = vm;
      v1::GetVMRequest request;
      request.set_vm_id(vm);
      v1::VM response;
      s = control_[r]->GetVM(Context().get(), request, &response);
      if (s.ok()) {
        op.value = response.interference_classes_size() == 1 ? response.interference_classes(0)
                                                              : "(no single class)";
      } else if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
        op.value = kInitial;
        s = grpc::Status::OK;
      }
    } else {  // GetTenantPolicy
      key = "policy";
      v1::GetTenantPolicyRequest request;
      request.set_tenant_id(kTenant);
      v1::TenantPolicy response;
      s = control_[r]->GetTenantPolicy(Context().get(), request, &response);
      op.value = response.explicitly_set()
                     ? absl::StrFormat("%.3f", response.forced_idle_budget_pct())
                     : kInitial;
    }
    op.complete = Now();
    if (!s.ok()) {
      if (!op.write) return;
      if (Definite(s.error_code())) {
        op.result = Op::Result::kFailed;
      } else {
        op.result = Op::Result::kUnknown;
        op.complete = kNever;
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    history[key].push_back(std::move(op));
  }

  testing::EtcdCluster etcd_{3};
  testing::TempDir dir_;
  std::unique_ptr<testing::CsdProcess> csd_[kReplicas];
  std::unique_ptr<v1::ControlPlane::Stub> control_[kReplicas];
};

TEST_F(EtcdHistoryTest, AcknowledgedOperationsStayLinearizableThroughKills) {
  for (int i = 0; i < kReplicas; ++i) ASSERT_NO_FATAL_FAILURE(StartReplica(i));
  std::mutex mu;
  std::map<std::string, std::vector<Op>> history;
  std::atomic<bool> stop{false}, killed{false};
  constexpr int kKilledReplica = 1;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 pick(1000 + t);
      for (int n = 0; !stop.load(); ++n) {
        int r = std::uniform_int_distribution<int>(0, kReplicas - 1)(pick);
        // Clients move off a replica that died, as csctl and agents do
        // (the ops already sent to it are in the history, answer lost).
        if (killed.load() && r == kKilledReplica) r = (r + 1) % kReplicas;
        RandomOp(r, t, n, pick, history, mu);
      }
    });
  }
  std::this_thread::sleep_for(seconds(5));
  auto leader = etcd_.Leader();
  ASSERT_OK(leader);
  etcd_.member(*leader).Kill();
  csd_[kKilledReplica]->Kill();
  killed = true;
  const int64_t killed_at = Now();
  std::this_thread::sleep_for(seconds(8));
  stop = true;
  for (std::thread& t : threads) t.join();

  // The end state, read from each surviving replica after every client
  // stopped: the replicas agree, and it is a value the history allows.
  std::map<std::string, std::string> final_value;
  for (int r = 0; r < kReplicas; ++r) {
    if (r == kKilledReplica) continue;
    for (int k = 0; k < kVms; ++k) {
      const std::string vm = absl::StrCat("vm-", k);
      Op op;
      op.who = absl::StrCat("the end via csd-", r);
      op.invoke = Now();
      v1::GetVMRequest request;
      request.set_vm_id(vm);
      v1::VM response;
      grpc::Status s = control_[r]->GetVM(Context().get(), request, &response);
      ASSERT_TRUE(s.ok() || s.error_code() == grpc::StatusCode::NOT_FOUND)
          << vm << " on csd-" << r << ": " << s.error_message();
      op.value = s.ok() && response.interference_classes_size() == 1
                     ? response.interference_classes(0)
                     : kInitial;
      op.complete = Now();
      auto [it, first] = final_value.emplace(vm, op.value);
      EXPECT_EQ(it->second, op.value) << "the replicas disagree on " << vm;
      history[vm].push_back(op);
    }
  }

  size_t ops = 0, lost = 0, failed = 0, reads = 0, after_kill = 0;
  std::vector<std::string> violations;
  for (const auto& [key, ops_of_key] : history) {
    for (const Op& op : ops_of_key) {
      ++ops;
      lost += op.result == Op::Result::kUnknown;
      failed += op.result == Op::Result::kFailed;
      reads += !op.write;
      after_kill += op.invoke > killed_at && op.result == Op::Result::kOk;
    }
    for (std::string& v : CheckRegister(key, ops_of_key, kInitial)) {
      violations.push_back(std::move(v));
    }
  }
  for (const std::string& v : violations) ADD_FAILURE() << v;
  // The history must have exercised something on both sides of the kills.
  EXPECT_GT(after_kill, 50u) << "too few operations succeeded after the kills";
  std::cout << ops << " operations on " << history.size() << " keys (" << reads
            << " reads; writes: " << failed << " refused, " << lost
            << " with the answer lost), " << after_kill
            << " acknowledged after etcd member m" << *leader << " and csd-" << kKilledReplica
            << " were SIGKILLed; " << violations.size() << " violations\n";
}

}  // namespace
}  // namespace cosched
