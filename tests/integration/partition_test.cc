// A network partition of minutes between cs-agent and csd, through a proxy
// that drops every byte without closing anything (only keepalives and
// deadlines notice). While cut off, the agent keeps enforcing what it has
// and a new VM fails closed; meanwhile csd takes changes. Once healed, the
// agent resumes from its revision and converges: every assignment message
// it applies carries a higher revision than the one before (none lost, none
// repeated), and it ends at csd's last revision with csd's assignments.
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "agent/server_session.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/mini_cluster.h"
#include "tests/testing/partition_proxy.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using namespace std::chrono_literals;

// Long enough for the agent's keepalive (30 s + 10 s) to give up on the
// stream and for several reconnects to hang: the agent's production
// settings, not shortened ones.
constexpr auto kPartition = 150s;

using testing::Eventually;

class PartitionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = testing::MiniCluster::Start();
    ASSERT_OK(cluster);
    cluster_ = std::move(*cluster);
    proxy_ = std::make_unique<testing::PartitionProxy>(cluster_->csd().port());
    ASSERT_NE(proxy_->port(), 0);
    // The agent's production reconnect backoff: the partition must hold
    // against it, not against shortened settings.
    const agent::ServerSessionOptions production;
    testing::MiniHostOptions options;
    options.host_id = "hv-1";
    options.server_address = proxy_->address();
    options.report_interval = std::chrono::seconds(1);
    options.backoff_initial = production.backoff_initial;
    options.backoff_max = production.backoff_max;
    options.on_assignments_changed = [this](int64_t revision) {
      std::lock_guard<std::mutex> lock(mu_);
      applied_.push_back(revision);
    };
    auto host = cluster_->AddHost(std::move(options));
    ASSERT_OK(host);
    host_ = *host;
    for (auto [id, pid] : {std::pair{"vm-1", 100}, {"vm-2", 200}, {"vm-3", 300}}) {
      host_->AddVm(id, pid);
    }
  }

  agent::Agent& agent() { return host_->agent(); }
  uint64_t VmCookie(int pid) { return host_->VmCookie(pid); }
  v1::ControlPlane::Stub& stub() { return cluster_->control(); }

  int64_t Tag(const std::string& vm, const std::string& tenant,
              v1::IsolationLevel level = v1::ISOLATION_LEVEL_VM) {
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id(tenant);
    request.set_isolation(level);
    v1::TagVMResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub().TagVM(&context, request, &response);
    EXPECT_OK(status) << status.error_message();
    return response.vm().assignment().revision();
  }

  int64_t Untag(const std::string& vm) {
    v1::UntagVMRequest request;
    request.set_vm_id(vm);
    v1::UntagVMResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub().UntagVM(&context, request, &response);
    EXPECT_OK(status) << status.error_message();
    return response.revision();
  }

  // csd shows the VM enforced in the group it assigned (so the agent's
  // reconcile pass has run since the assignment arrived).
  bool Enforced(const std::string& vm) {
    v1::GetVMRequest request;
    request.set_vm_id(vm);
    v1::VM got;
    grpc::ClientContext context;
    if (!stub().GetVM(&context, request, &got).ok()) return false;
    return got.enforcement().state() == v1::ENFORCEMENT_STATE_ENFORCED &&
           got.enforcement().applied_trust_group() == got.assignment().trust_group();
  }

  std::vector<int64_t> Applied() {
    std::lock_guard<std::mutex> lock(mu_);
    return applied_;
  }

  // The proxy outlives the cluster, so agents stop before it does.
  std::unique_ptr<testing::PartitionProxy> proxy_;
  std::unique_ptr<testing::MiniCluster> cluster_;
  testing::MiniHost* host_ = nullptr;
  std::mutex mu_;
  std::vector<int64_t> applied_;
};

TEST_F(PartitionTest, AgentKeepsEnforcingThenConvergesByRevision) {
  Tag("vm-1", "acme");
  Tag("vm-2", "globex");
  const int64_t before = Tag("vm-3", "acme");
  ASSERT_TRUE(agent().WaitForRevision(before, 20s));
  ASSERT_TRUE(Eventually([&] {
    return Enforced("vm-1") && Enforced("vm-2") && Enforced("vm-3");
  }, 20s));
  const std::map<int, uint64_t> cookies{{100, VmCookie(100)},
                                        {200, VmCookie(200)},
                                        {300, VmCookie(300)}};
  const int snapshots = agent().cache().snapshots_applied();
  const int watches = agent().session()->watch_count();

  proxy_->Partition();
  const auto cut = std::chrono::steady_clock::now();
  // csd takes changes the agent cannot hear about: a regroup, an untag, a
  // new VM tagged.
  Tag("vm-2", "globex", v1::ISOLATION_LEVEL_TENANT);
  Untag("vm-3");
  Tag("vm-9", "acme", v1::ISOLATION_LEVEL_TENANT);
  const int64_t last = Tag("vm-1", "acme", v1::ISOLATION_LEVEL_TENANT);
  // A VM that starts on the host meanwhile fails closed at once.
  host_->AddVm("vm-9", 900);
  agent().TriggerReconcile();
  ASSERT_TRUE(Eventually([&] { return VmCookie(900) != 0; }, 5s))
      << "the new VM did not fail closed while csd was unreachable";
  const uint64_t closed = VmCookie(900);
  for (const auto& [pid, cookie] : cookies) EXPECT_NE(closed, cookie);

  // For the whole partition the agent keeps what it enforces.
  while (std::chrono::steady_clock::now() - cut < kPartition) {
    for (const auto& [pid, cookie] : cookies) {
      ASSERT_EQ(VmCookie(pid), cookie) << "VM at pid " << pid << " changed cookie while cut off";
    }
    ASSERT_EQ(VmCookie(900), closed);
    ASSERT_LT(agent().applied_revision(), last);
    std::this_thread::sleep_for(500ms);
  }

  proxy_->Heal();
  const auto healed = std::chrono::steady_clock::now();
  ASSERT_TRUE(agent().WaitForRevision(last, 60s)) << "the agent did not catch up after the partition";
  const auto caught_up = std::chrono::steady_clock::now() - healed;
  std::cout << "caught up "
            << std::chrono::duration_cast<std::chrono::milliseconds>(caught_up).count()
            << " ms after the partition healed; " << proxy_->connections()
            << " connections through the proxy" << std::endl;
  // vm-9, reported on the host once csd hears the agent again, is placed
  // there: one more revision, which the agent receives as well.
  ASSERT_TRUE(Eventually([&] { return agent().applied_revision() == cluster_->csd().revision(); }, 20s))
      << "agent at revision " << agent().applied_revision() << ", csd at " << cluster_->csd().revision();
  // It reconnected (the old stream died in the partition) and resumed from
  // its revision: deltas, no snapshot.
  EXPECT_GT(agent().session()->watch_count(), watches);
  EXPECT_EQ(agent().cache().snapshots_applied(), snapshots);
  const std::vector<int64_t> applied = Applied();
  for (size_t i = 1; i < applied.size(); ++i) {
    EXPECT_LT(applied[i - 1], applied[i]) << "revision applied twice or backwards at " << i;
  }

  // csd's assignments, and the kernel follows them: vm-1 and vm-9 share
  // acme's tenant cookie, vm-2 has globex's, vm-3 (untagged) fails closed.
  ASSERT_TRUE(Eventually([&] {
    auto a1 = agent().FindAssignment("vm-1");
    auto a2 = agent().FindAssignment("vm-2");
    auto a9 = agent().FindAssignment("vm-9");
    return a1 && a1->trust_group() == "acme/tenant" && a2 &&
           a2->trust_group() == "globex/tenant" && a9 && !agent().FindAssignment("vm-3");
  }, 10s));
  ASSERT_TRUE(Eventually([&] {
    const uint64_t c1 = VmCookie(100), c9 = VmCookie(900);
    const uint64_t c2 = VmCookie(200), c3 = VmCookie(300);
    return c1 != 0 && c9 == c1 && c2 != 0 && c2 != c1 && c3 != 0 && c3 != c1 && c3 != c2;
  }, 10s));
}

}  // namespace
}  // namespace cosched
