// cs-agent: keeps this hypervisor's VMs in their core-scheduling groups as
// csd assigns them. Flags override the config file.
#include <atomic>
#include <csignal>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "agent/agent.h"
#include "agent/discovery_setup.h"
#include "agent/host_probe.h"
#include "common/config_loader.h"
#include "cosched/v1/config.pb.h"
#include "glog/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"cs-agent: enforces csd's core-scheduling assignments on this host"};
  std::string config_file, server, host_id, state_dir, discovery_mode, metrics_listen;
  bool insecure = false;
  app.add_option("--config", config_file, "YAML file (cosched.v1.AgentConfig)");
  app.add_option("--server", server, "csd address, HOST:PORT (default 127.0.0.1:7443)");
  app.add_option("--host-id", host_id, "this host's id (default: the hostname)");
  app.add_option("--state-dir", state_dir, "where assignments are kept (default /var/lib/cs-agent)");
  app.add_flag("--insecure", insecure, "allow plaintext to a non-loopback csd");
  app.add_option("--discovery", discovery_mode, "where VMs are found: auto, libvirt, procfs (default auto)");
  app.add_option("--metrics-listen", metrics_listen,
                 "host:port of the Prometheus /metrics endpoint, or off (default 127.0.0.1:9464)");
  bool probe = false;
  app.add_flag("--probe", probe,
               "print what this host can do (topology, SMT, core scheduling) and exit: "
               "0 when it can do core scheduling, 3 when it cannot");
  CLI11_PARSE(app, argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (probe) return cosched::agent::PrintHostProbe(std::cout);

  cosched::v1::AgentConfig config;
  cosched::ConfigLocations locations;
  if (!config_file.empty()) {
    absl::Status loaded = cosched::LoadYamlConfigFile(config_file, &config, &locations);
    if (!loaded.ok()) {
      std::cerr << "cs-agent: " << loaded.message() << "\n";
      return 2;
    }
  }
  // Flags override the file; an error about one of them names no line.
  if (!server.empty()) config.set_server(server), locations.Forget("server");
  if (!host_id.empty()) config.set_host_id(host_id), locations.Forget("host_id");
  if (!state_dir.empty()) config.set_state_dir(state_dir), locations.Forget("state_dir");
  if (!discovery_mode.empty()) {
    config.set_discovery(discovery_mode), locations.Forget("discovery");
  }
  if (!metrics_listen.empty()) {
    config.set_metrics_listen(metrics_listen), locations.Forget("metrics_listen");
  }
  if (insecure) config.set_insecure(true);
  absl::StatusOr<cosched::agent::AgentOptions> options =
      cosched::agent::AgentOptionsFromConfig(config);
  if (!options.ok()) {
    std::cerr << "cs-agent: " << locations.Locate(options.status().message()) << "\n";
    return 2;
  }

  // Blocked before any thread starts, so only sigwait below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  options->process_events = std::make_shared<cosched::agent::ProcConnectorEvents>();
  // libvirt events arrive on libvirt's thread, possibly before the agent
  // exists: they reach it through this pointer once it does.
  std::atomic<cosched::agent::Agent*> running{nullptr};
  cosched::agent::DiscoverySetup discovery;
  discovery.mode = config.discovery();
  if (!config.libvirt_uri().empty()) discovery.libvirt_uri = config.libvirt_uri();
  discovery.on_domain_event = [&running] {
    if (auto* agent = running.load()) agent->TriggerReconcile();
  };
  auto vms = cosched::agent::MakeVmDiscovery(discovery);
  if (!vms.ok()) {
    std::cerr << "cs-agent: " << vms.status().message() << "\n";
    return 2;
  }
  options->vm_discovery = *vms;
  cosched::agent::Agent agent(std::move(*options));
  absl::Status started = agent.Start();
  if (!started.ok()) {
    LOG(ERROR) << started;
    return 1;
  }
  running = &agent;
  int received = 0;
  sigwait(&signals, &received);
  LOG(INFO) << "cs-agent stopping on signal " << received;
  running = nullptr;
  agent.Stop();
  return 0;
}
