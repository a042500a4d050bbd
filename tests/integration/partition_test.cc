// A network partition of minutes between cs-agent and csd, through a proxy
// that drops every byte without closing anything (only keepalives and
// deadlines notice). While cut off, the agent keeps enforcing what it has
// and a new VM fails closed; meanwhile csd takes changes. Once healed, the
// agent resumes from its revision and converges: every assignment message
// it applies carries a higher revision than the one before (none lost, none
// repeated), and it ends at csd's last revision with csd's assignments.
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "discovery/testing/static_vm_discovery.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "host/pseudo_fs.h"
#include "host/testing/core_sched_fake.h"
#include "host/testing/fake_host.h"
#include "host/testing/pseudo_fs_fake.h"
#include "server/csd_server.h"
#include "tests/testing/partition_proxy.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched {
namespace {

using namespace std::chrono_literals;

// Long enough for the agent's keepalive (30 s + 10 s) to give up on the
// stream and for several reconnects to hang: the agent's production
// settings, not shortened ones.
constexpr auto kPartition = 150s;

std::shared_ptr<host::FakePseudoFs> TwoCoresTwoSiblings() {
  return host::MakeFakeHost({.interleaved = false});
}

discovery::DiscoveredVm Vm(host::FakeCoreSched& kernel, const std::string& id, int pid) {
  discovery::DiscoveredVm vm;
  vm.vm_id = id;
  vm.qemu_pid = pid;
  using Kind = discovery::DiscoveredThread::Kind;
  vm.threads = {{pid, pid, "qemu-system-x86", Kind::kEmulator},
                {pid + 1, pid, "CPU 0/KVM", Kind::kVcpu},
                {pid + 2, pid, "CPU 1/KVM", Kind::kVcpu}};
  for (const auto& t : vm.threads) kernel.AddTask(t.tid, pid);
  return vm;
}

template <typename Condition>
bool Eventually(Condition condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return condition();
}

// The cookie every thread of the VM at `pid` holds, or 0 when they differ.
uint64_t VmCookie(host::FakeCoreSched& kernel, int pid) {
  const uint64_t c = kernel.CookieOf(pid);
  return kernel.CookieOf(pid + 1) == c && kernel.CookieOf(pid + 2) == c ? c : 0;
}

class PartitionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server::CsdOptions csd_options;
    csd_options.listen = "127.0.0.1:0";
    csd_options.data_dir = dir_.Sub("csd");
    auto csd = server::CsdServer::Start(csd_options);
    ASSERT_OK(csd);
    csd_ = std::move(*csd);
    stub_ = v1::ControlPlane::NewStub(
        grpc::CreateChannel(csd_->address(), grpc::InsecureChannelCredentials()));
    proxy_ = std::make_unique<testing::PartitionProxy>(csd_->port());
    ASSERT_NE(proxy_->port(), 0);

    vms_ = {Vm(*kernel_, "vm-1", 100), Vm(*kernel_, "vm-2", 200), Vm(*kernel_, "vm-3", 300)};
    discovery_->SetVms(vms_);
    agent::AgentOptions options;
    options.session.server_address = proxy_->address();
    options.host_id = "hv-1";
    options.state_dir = dir_.Sub("agent");
    options.session.report_interval = 1s;
    options.host_fs = TwoCoresTwoSiblings();
    options.core_sched = kernel_;
    options.loop.rescan_interval = 100ms;
    options.vm_discovery = discovery_;
    options.on_assignments_changed = [this](int64_t revision) {
      std::lock_guard<std::mutex> lock(mu_);
      applied_.push_back(revision);
    };
    agent_ = std::make_unique<agent::Agent>(options);
    ASSERT_OK(agent_->Start());
  }

  int64_t Tag(const std::string& vm, const std::string& tenant,
              v1::IsolationLevel level = v1::ISOLATION_LEVEL_VM) {
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id(tenant);
    request.set_isolation(level);
    v1::TagVMResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub_->TagVM(&context, request, &response);
    EXPECT_OK(status) << status.error_message();
    return response.vm().assignment().revision();
  }

  int64_t Untag(const std::string& vm) {
    v1::UntagVMRequest request;
    request.set_vm_id(vm);
    v1::UntagVMResponse response;
    grpc::ClientContext context;
    grpc::Status status = stub_->UntagVM(&context, request, &response);
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
    if (!stub_->GetVM(&context, request, &got).ok()) return false;
    return got.enforcement().state() == v1::ENFORCEMENT_STATE_ENFORCED &&
           got.enforcement().applied_trust_group() == got.assignment().trust_group();
  }

  std::vector<int64_t> Applied() {
    std::lock_guard<std::mutex> lock(mu_);
    return applied_;
  }

  cosched::testing::TempDir dir_;
  std::unique_ptr<server::CsdServer> csd_;
  std::unique_ptr<v1::ControlPlane::Stub> stub_;
  std::unique_ptr<testing::PartitionProxy> proxy_;
  std::shared_ptr<host::FakeCoreSched> kernel_ = std::make_shared<host::FakeCoreSched>();
  std::shared_ptr<discovery::StaticVmDiscovery> discovery_ =
      std::make_shared<discovery::StaticVmDiscovery>();
  std::vector<discovery::DiscoveredVm> vms_;
  std::unique_ptr<agent::Agent> agent_;
  std::mutex mu_;
  std::vector<int64_t> applied_;
};

TEST_F(PartitionTest, AgentKeepsEnforcingThenConvergesByRevision) {
  Tag("vm-1", "acme");
  Tag("vm-2", "globex");
  const int64_t before = Tag("vm-3", "acme");
  ASSERT_TRUE(agent_->WaitForRevision(before, 20s));
  ASSERT_TRUE(Eventually([&] {
    return Enforced("vm-1") && Enforced("vm-2") && Enforced("vm-3");
  }, 20s));
  const std::map<int, uint64_t> cookies{{100, VmCookie(*kernel_, 100)},
                                        {200, VmCookie(*kernel_, 200)},
                                        {300, VmCookie(*kernel_, 300)}};
  const int snapshots = agent_->cache().snapshots_applied();
  const int watches = agent_->session()->watch_count();

  proxy_->Partition();
  const auto cut = std::chrono::steady_clock::now();
  // csd takes changes the agent cannot hear about: a regroup, an untag, a
  // new VM tagged.
  Tag("vm-2", "globex", v1::ISOLATION_LEVEL_TENANT);
  Untag("vm-3");
  Tag("vm-9", "acme", v1::ISOLATION_LEVEL_TENANT);
  const int64_t last = Tag("vm-1", "acme", v1::ISOLATION_LEVEL_TENANT);
  // A VM that starts on the host meanwhile fails closed at once.
  vms_.push_back(Vm(*kernel_, "vm-9", 900));
  discovery_->SetVms(vms_);
  agent_->TriggerReconcile();
  ASSERT_TRUE(Eventually([&] { return VmCookie(*kernel_, 900) != 0; }, 5s))
      << "the new VM did not fail closed while csd was unreachable";
  const uint64_t closed = VmCookie(*kernel_, 900);
  for (const auto& [pid, cookie] : cookies) EXPECT_NE(closed, cookie);

  // For the whole partition the agent keeps what it enforces.
  while (std::chrono::steady_clock::now() - cut < kPartition) {
    for (const auto& [pid, cookie] : cookies) {
      ASSERT_EQ(VmCookie(*kernel_, pid), cookie) << "VM at pid " << pid << " changed cookie while cut off";
    }
    ASSERT_EQ(VmCookie(*kernel_, 900), closed);
    ASSERT_LT(agent_->applied_revision(), last);
    std::this_thread::sleep_for(500ms);
  }

  proxy_->Heal();
  const auto healed = std::chrono::steady_clock::now();
  ASSERT_TRUE(agent_->WaitForRevision(last, 60s)) << "the agent did not catch up after the partition";
  const auto caught_up = std::chrono::steady_clock::now() - healed;
  std::cout << "caught up "
            << std::chrono::duration_cast<std::chrono::milliseconds>(caught_up).count()
            << " ms after the partition healed; " << proxy_->connections()
            << " connections through the proxy" << std::endl;
  // vm-9, reported on the host once csd hears the agent again, is placed
  // there: one more revision, which the agent receives as well.
  ASSERT_TRUE(Eventually([&] { return agent_->applied_revision() == csd_->revision(); }, 20s))
      << "agent at revision " << agent_->applied_revision() << ", csd at " << csd_->revision();
  // It reconnected (the old stream died in the partition) and resumed from
  // its revision: deltas, no snapshot.
  EXPECT_GT(agent_->session()->watch_count(), watches);
  EXPECT_EQ(agent_->cache().snapshots_applied(), snapshots);
  const std::vector<int64_t> applied = Applied();
  for (size_t i = 1; i < applied.size(); ++i) {
    EXPECT_LT(applied[i - 1], applied[i]) << "revision applied twice or backwards at " << i;
  }

  // csd's assignments, and the kernel follows them: vm-1 and vm-9 share
  // acme's tenant cookie, vm-2 has globex's, vm-3 (untagged) fails closed.
  ASSERT_TRUE(Eventually([&] {
    auto a1 = agent_->FindAssignment("vm-1");
    auto a2 = agent_->FindAssignment("vm-2");
    auto a9 = agent_->FindAssignment("vm-9");
    return a1 && a1->trust_group() == "acme/tenant" && a2 &&
           a2->trust_group() == "globex/tenant" && a9 && !agent_->FindAssignment("vm-3");
  }, 10s));
  ASSERT_TRUE(Eventually([&] {
    const uint64_t c1 = VmCookie(*kernel_, 100), c9 = VmCookie(*kernel_, 900);
    const uint64_t c2 = VmCookie(*kernel_, 200), c3 = VmCookie(*kernel_, 300);
    return c1 != 0 && c9 == c1 && c2 != 0 && c2 != c1 && c3 != 0 && c3 != c1 && c3 != c2;
  }, 10s));
}

}  // namespace
}  // namespace cosched
