// What the CookieReconciler tests share: a fake QEMU's threads in a fake
// kernel, assignments by VM id, and a fixture that reads cookies back.
#ifndef COSCHED_TESTS_AGENT_COOKIE_RECONCILER_FIXTURE_H_
#define COSCHED_TESTS_AGENT_COOKIE_RECONCILER_FIXTURE_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/cookie_reconciler.h"
#include "gtest/gtest.h"
#include "host/testing/core_sched_fake.h"

namespace cosched::agent::reconciler_testing {

using Kind = discovery::DiscoveredThread::Kind;

inline constexpr int kAgentTid = 1;

// A fake QEMU: main thread, `vcpus` vCPU threads, an IO thread and a vhost
// worker, with tids pid, pid+1, ...
inline discovery::DiscoveredVm FakeVm(host::FakeCoreSched& kernel, const std::string& id, int pid,
                    int vcpus = 2, uint64_t cookie = 0) {
  discovery::DiscoveredVm vm;
  vm.vm_id = id;
  vm.qemu_pid = pid;
  auto add = [&](int tid, const std::string& name, Kind kind) {
    vm.threads.push_back(discovery::DiscoveredThread{tid, pid, name, kind});
    kernel.AddTask(tid, pid, pid, cookie);
  };
  add(pid, "qemu-system-x86", Kind::kEmulator);
  for (int i = 0; i < vcpus; ++i) {
    add(pid + 1 + i, "CPU " + std::to_string(i) + "/KVM", Kind::kVcpu);
  }
  add(pid + 1 + vcpus, "IO iothread0", Kind::kIothread);
  add(pid + 2 + vcpus, "vhost-" + std::to_string(pid), Kind::kVhostWorker);
  return vm;
}

inline v1::Assignment Assign(const std::string& vm, const std::string& group,
                      v1::IsolationLevel level = v1::ISOLATION_LEVEL_VM,
                      v1::ThreadScope scope = v1::THREAD_SCOPE_EMULATOR) {
  v1::Assignment a;
  a.set_vm_id(vm);
  a.set_trust_group(group);
  a.set_isolation(level);
  a.set_thread_scope(scope);
  return a;
}

class CookieReconcilerTest : public ::testing::Test {
 protected:
  ReconcilerOptions Options() {
    ReconcilerOptions o;
    o.probe.support = v1::CORE_SCHED_SUPPORT_SUPPORTED;
    return o;
  }

  AssignmentLookup Lookup() {
    return [this](const discovery::DiscoveredVm& vm) -> std::optional<v1::Assignment> {
      auto it = assignments_.find(vm.vm_id);
      if (it == assignments_.end()) return std::nullopt;
      return it->second;
    };
  }

  std::set<uint64_t> CookiesOf(const discovery::DiscoveredVm& vm) {
    std::set<uint64_t> cookies;
    for (const auto& t : vm.threads) cookies.insert(kernel_.CookieOf(t.tid));
    return cookies;
  }

  uint64_t OnlyCookie(const discovery::DiscoveredVm& vm) {
    auto cookies = CookiesOf(vm);
    EXPECT_EQ(cookies.size(), 1u) << vm.vm_id;
    return cookies.empty() ? 0 : *cookies.begin();
  }

  // Options whose hazards are hazards_, which a test sets between passes.
  ReconcilerOptions WithHazards(bool clear_on_hazard = false) {
    ReconcilerOptions o = Options();
    o.hazards = [this] { return hazards_; };
    o.clear_on_hazard = clear_on_hazard;
    return o;
  }

  host::FakeCoreSched kernel_{kAgentTid};
  std::map<std::string, v1::Assignment> assignments_;
  std::vector<v1::Hazard> hazards_;
};

}  // namespace cosched::agent::reconciler_testing

#endif  // COSCHED_TESTS_AGENT_COOKIE_RECONCILER_FIXTURE_H_
