// A whole cosched deployment in one test process: a real csd (durable
// SQLite store, ephemeral loopback port) and any number of real cs-agents,
// each on a fake SMT host whose kernel and VMs the test controls. Only the
// kernel, /proc and /sys are fakes; every RPC crosses a real gRPC channel.
#ifndef COSCHED_TESTS_TESTING_MINI_CLUSTER_H_
#define COSCHED_TESTS_TESTING_MINI_CLUSTER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/agent.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "discovery/testing/static_vm_discovery.h"
#include "grpcpp/channel.h"
#include "host/testing/core_sched_fake.h"
#include "host/testing/fake_host.h"
#include "host/testing/pseudo_fs_fake.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/trusted_plaintext.h"

namespace cosched::testing {

// One hypervisor of a MiniCluster. The defaults make a test fast: reports,
// rescans and reconnects every tenth of a second or so.
struct MiniHostOptions {
  std::string host_id = "hv-1";
  // Cores listed sibling by sibling (0,1 on core 0) unless the shape says
  // otherwise.
  host::FakeHostShape shape = [] {
    host::FakeHostShape adjacent;
    adjacent.interleaved = false;
    return adjacent;
  }();
  // Where the agent dials; empty: the cluster's csd (tests that put a proxy
  // in between give its address).
  std::string server_address;
  std::chrono::milliseconds report_interval = std::chrono::milliseconds(100);
  std::chrono::milliseconds rescan_interval = std::chrono::milliseconds(100);
  std::chrono::milliseconds backoff_initial = std::chrono::milliseconds(20);
  std::chrono::milliseconds backoff_max = std::chrono::milliseconds(200);
  std::function<void(int64_t revision)> on_assignments_changed;
  // Files of the fake host beyond its topology, written before the agent
  // starts (e.g. /sys/kernel/sched_ext/state for a hazard at start).
  std::map<std::string, std::string> extra_files;
  // AgentOptions::allow_hazards and known_bad.
  std::vector<std::string> allow_hazards;
  std::vector<v1::KnownBadEntry> known_bad;
  // AgentOptions::labels.
  std::map<std::string, std::string> labels;
};

// A fake host and the cs-agent that runs on it.
class MiniHost {
 public:
  MiniHost(MiniHostOptions options, std::string default_server, std::string state_dir);
  ~MiniHost();
  MiniHost(const MiniHost&) = delete;
  MiniHost& operator=(const MiniHost&) = delete;

  // Starts (or starts again, on the same state dir, as after a restart) the
  // agent.
  absl::Status Start();
  void Stop();

  // Puts a VM of QEMU's main thread (tid `pid`) and `vcpus` vCPU threads
  // (tids pid+1 ...) into the fake kernel and into what discovery finds.
  // Its threads hold no cookie until the agent sets one.
  discovery::DiscoveredVm AddVm(const std::string& vm_id, int pid, int vcpus = 2);
  // Discovery no longer finds the VM (its threads stay in the kernel).
  void RemoveVm(const std::string& vm_id);
  // The cookie every thread of the VM at `pid` holds; 0 when they differ or
  // hold none.
  uint64_t VmCookie(int pid) const;

  const std::string& host_id() const { return options_.host_id; }
  agent::Agent& agent() { return *agent_; }
  host::FakeCoreSched& kernel() { return *kernel_; }
  host::FakePseudoFs& fs() { return *fs_; }
  discovery::StaticVmDiscovery& discovery() { return *discovery_; }

 private:
  void PublishVms();

  MiniHostOptions options_;
  std::string server_address_;
  std::string state_dir_;
  std::shared_ptr<host::FakePseudoFs> fs_;
  std::shared_ptr<host::FakeCoreSched> kernel_ = std::make_shared<host::FakeCoreSched>();
  std::shared_ptr<discovery::StaticVmDiscovery> discovery_ =
      std::make_shared<discovery::StaticVmDiscovery>();
  std::map<std::string, discovery::DiscoveredVm> vms_;
  std::unique_ptr<agent::Agent> agent_;
};

struct MiniClusterOptions {
  // listen and data_dir are the cluster's own (a free loopback port, a
  // temporary dir) unless set here.
  server::CsdOptions csd = [] {
    server::CsdOptions defaults;
    defaults.listen = "127.0.0.1:0";
    defaults.data_dir.clear();
    TrustPlaintextCallers(defaults.authz);
    return defaults;
  }();
};

class MiniCluster {
 public:
  static absl::StatusOr<std::unique_ptr<MiniCluster>> Start(MiniClusterOptions options = {});
  ~MiniCluster();

  // Adds a host and starts its agent. The cluster owns it.
  absl::StatusOr<MiniHost*> AddHost(MiniHostOptions options = {});
  // The host added with `host_id`; a test bug (abort) when there is none.
  MiniHost& host(const std::string& host_id);

  // csd goes away (its agents keep enforcing); RestartCsd brings it back on
  // the same address and data dir.
  void StopCsd();
  absl::Status RestartCsd();
  // The options the next RestartCsd uses (listen and data_dir stay).
  server::CsdOptions& csd_options() { return options_.csd; }

  server::CsdServer& csd() { return *csd_; }
  const std::string& csd_address() const { return address_; }
  v1::ControlPlane::Stub& control() { return *control_; }
  v1::AgentService::Stub& agent_service() { return *agent_service_; }
  const TempDir& dir() const { return dir_; }

 private:
  explicit MiniCluster(MiniClusterOptions options) : options_(std::move(options)) {}
  absl::Status StartCsd();

  MiniClusterOptions options_;
  TempDir dir_;
  std::string address_;
  std::unique_ptr<server::CsdServer> csd_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ControlPlane::Stub> control_;
  std::unique_ptr<v1::AgentService::Stub> agent_service_;
  // Hosts stop before csd does, in the reverse order of their start.
  std::vector<std::unique_ptr<MiniHost>> hosts_;
};

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_MINI_CLUSTER_H_
