// The agent on a fake host (tests/agent/agent*_test.cc): a 2-core, 2-sibling
// host, a fake kernel and a static VM list, and the options that point an
// agent at them and at a csd.
#ifndef COSCHED_TESTS_AGENT_AGENT_FIXTURE_H_
#define COSCHED_TESTS_AGENT_AGENT_FIXTURE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "agent/agent.h"
#include "discovery/testing/static_vm_discovery.h"
#include "gtest/gtest.h"
#include "host/testing/core_sched_fake.h"
#include "host/testing/fake_host.h"
#include "host/testing/pseudo_fs_fake.h"
#include "tests/testing/temp_dir.h"

namespace cosched::agent::agent_testing {

inline std::shared_ptr<host::FakePseudoFs> TwoByTwoHost() {
  return host::MakeFakeHost({.schedstats = true});
}

class AgentTest : public ::testing::Test {
 protected:
  AgentOptions Options(const std::string& server) {
    using namespace std::chrono_literals;
    AgentOptions options;
    options.session.server_address = server;
    options.host_id = "host-a";
    options.state_dir = dir_.path() + "/state";
    options.session.report_interval = 100ms;
    options.session.backoff_initial = 10ms;
    options.session.backoff_max = 200ms;
    options.host_fs = host_fs_;
    options.core_sched = kernel_;
    options.vm_discovery = discovery_;
    return options;
  }

  cosched::testing::TempDir dir_;
  std::shared_ptr<host::FakePseudoFs> host_fs_ = TwoByTwoHost();
  std::shared_ptr<host::FakeCoreSched> kernel_ = std::make_shared<host::FakeCoreSched>();
  std::shared_ptr<discovery::StaticVmDiscovery> discovery_ =
      std::make_shared<discovery::StaticVmDiscovery>();
};

// vm-1: its QEMU (pid 100) with a vCPU thread and a helper process (150),
// each holding `cookie` in `kernel`.
inline discovery::DiscoveredVm TaggedVm(host::FakeCoreSched& kernel, uint64_t cookie) {
  discovery::DiscoveredVm vm;
  vm.vm_id = "vm-1";
  vm.qemu_pid = 100;
  vm.threads = {{100, 100, "qemu-system-x86", discovery::DiscoveredThread::Kind::kEmulator},
                {101, 100, "CPU 0/KVM", discovery::DiscoveredThread::Kind::kVcpu},
                {150, 150, "virtiofsd", discovery::DiscoveredThread::Kind::kHelper}};
  for (const discovery::DiscoveredThread& t : vm.threads) kernel.AddTask(t.tid, t.pid, t.pid, cookie);
  return vm;
}

}  // namespace cosched::agent::agent_testing

#endif  // COSCHED_TESTS_AGENT_AGENT_FIXTURE_H_
