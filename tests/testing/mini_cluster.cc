#include "tests/testing/mini_cluster.h"

#include <cstdlib>
#include <iostream>
#include <utility>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace cosched::testing {

MiniHost::MiniHost(MiniHostOptions options, std::string default_server,
                   std::string state_dir)
    : options_(std::move(options)),
      server_address_(options_.server_address.empty() ? std::move(default_server)
                                                      : options_.server_address),
      state_dir_(std::move(state_dir)),
      fs_(host::MakeFakeHost(options_.shape)) {
  for (const auto& [path, content] : options_.extra_files) fs_->SetFile(path, content);
}

MiniHost::~MiniHost() { Stop(); }

absl::Status MiniHost::Start() {
  Stop();
  agent::AgentOptions options;
  options.host_id = options_.host_id;
  options.state_dir = state_dir_;
  options.session.server_address = server_address_;
  options.session.report_interval = options_.report_interval;
  options.session.backoff_initial = options_.backoff_initial;
  options.session.backoff_max = options_.backoff_max;
  options.loop.rescan_interval = options_.rescan_interval;
  options.host_fs = fs_;
  options.core_sched = kernel_;
  options.vm_discovery = discovery_;
  options.on_assignments_changed = options_.on_assignments_changed;
  options.allow_hazards = options_.allow_hazards;
  options.labels = options_.labels;
  options.known_bad = options_.known_bad;
  agent_ = std::make_unique<agent::Agent>(std::move(options));
  return agent_->Start();
}

void MiniHost::Stop() {
  if (agent_) agent_->Stop();
}

discovery::DiscoveredVm MiniHost::AddVm(const std::string& vm_id, int pid, int vcpus) {
  discovery::DiscoveredVm vm;
  vm.vm_id = vm_id;
  vm.qemu_pid = pid;
  using Kind = discovery::DiscoveredThread::Kind;
  vm.threads.push_back({pid, pid, "qemu-system-x86", Kind::kEmulator});
  for (int i = 0; i < vcpus; ++i) {
    vm.threads.push_back({pid + 1 + i, pid, "CPU " + std::to_string(i) + "/KVM", Kind::kVcpu});
  }
  for (const auto& thread : vm.threads) kernel_->AddTask(thread.tid, pid);
  vms_[vm_id] = vm;
  PublishVms();
  return vm;
}

void MiniHost::RemoveVm(const std::string& vm_id) {
  vms_.erase(vm_id);
  PublishVms();
}

uint64_t MiniHost::VmCookie(int pid) const {
  for (const auto& [id, vm] : vms_) {
    if (vm.qemu_pid != pid) continue;
    const uint64_t cookie = kernel_->CookieOf(pid);
    for (const auto& thread : vm.threads) {
      if (kernel_->CookieOf(thread.tid) != cookie) return 0;
    }
    return cookie;
  }
  return 0;
}

void MiniHost::PublishVms() {
  std::vector<discovery::DiscoveredVm> vms;
  for (const auto& [id, vm] : vms_) vms.push_back(vm);
  discovery_->SetVms(std::move(vms));
}

absl::StatusOr<std::unique_ptr<MiniCluster>> MiniCluster::Start(MiniClusterOptions options) {
  std::unique_ptr<MiniCluster> cluster(new MiniCluster(std::move(options)));
  if (cluster->options_.csd.data_dir.empty()) {
    cluster->options_.csd.data_dir = cluster->dir_.Sub("csd");
  }
  if (absl::Status started = cluster->StartCsd(); !started.ok()) return started;
  return cluster;
}

MiniCluster::~MiniCluster() {
  for (auto it = hosts_.rbegin(); it != hosts_.rend(); ++it) (*it)->Stop();
  hosts_.clear();
  StopCsd();
}

absl::Status MiniCluster::StartCsd() {
  auto csd = server::CsdServer::Start(options_.csd);
  if (!csd.ok()) return csd.status();
  csd_ = std::move(*csd);
  address_ = csd_->address();
  // A restart listens where the first csd did, so agents find it again.
  options_.csd.listen = address_;
  channel_ = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  control_ = v1::ControlPlane::NewStub(channel_);
  agent_service_ = v1::AgentService::NewStub(channel_);
  return absl::OkStatus();
}

void MiniCluster::StopCsd() { csd_.reset(); }

absl::Status MiniCluster::RestartCsd() {
  StopCsd();
  return StartCsd();
}

absl::StatusOr<MiniHost*> MiniCluster::AddHost(MiniHostOptions options) {
  const std::string state_dir = dir_.Sub("agent-" + options.host_id);
  auto host = std::make_unique<MiniHost>(std::move(options), address_, state_dir);
  if (absl::Status started = host->Start(); !started.ok()) return started;
  hosts_.push_back(std::move(host));
  return hosts_.back().get();
}

MiniHost& MiniCluster::host(const std::string& host_id) {
  for (auto& host : hosts_) {
    if (host->host_id() == host_id) return *host;
  }
  std::cerr << "MiniCluster: no host " << host_id << "\n";
  std::abort();
}

}  // namespace cosched::testing
