#include "agent/agent_main.h"

#include <atomic>
#include <csignal>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/string_view.h"
#include "agent/agent.h"
#include "agent/host_probe.h"
#include "absl/strings/str_cat.h"
#include "common/config_loader.h"
#include "common/config_reload.h"
#include "common/version.h"
#include "cosched/v1/config.pb.h"
#include "discovery/discovery_factory.h"
#include "discovery/exec_classifier.h"
#include "host/process_events.h"
#include "host/pseudo_fs.h"
#include "glog/logging.h"

namespace cosched::agent {
namespace {

// Everything the steps share.
struct AgentRun {
  // The command line; a reload reads the file again under the same flags.
  struct Flags {
    std::string config_file, server, host_id, state_dir, discovery_mode, metrics_listen;
    bool insecure = false;
  } flags;
  v1::AgentConfig config;
  ConfigLocations locations;
  AgentOptions options;
  // libvirt events arrive on libvirt's thread, possibly before the agent
  // exists: they reach it through this pointer once it does.
  std::shared_ptr<std::atomic<Agent*>> running =
      std::make_shared<std::atomic<Agent*>>(nullptr);
  std::unique_ptr<Agent> agent;
};

struct StepFailure {
  int code = kAgentExitOk;
  std::string message;
};
using Step = std::function<StepFailure(AgentRun&)>;

StepFailure LoadConfig(AgentRun& run) {
  if (run.flags.config_file.empty()) return {};
  absl::Status loaded = LoadYamlConfigFile(run.flags.config_file, &run.config, &run.locations);
  if (!loaded.ok()) return {kAgentExitUsage, std::string(loaded.message())};
  return {};
}

// Flags override the file; an error about one of them names no line.
StepFailure ApplyFlags(AgentRun& run) {
  auto apply = [&run](const std::string& flag, absl::string_view key,
                      void (v1::AgentConfig::*set)(const std::string&)) {
    if (flag.empty()) return;
    (run.config.*set)(flag);
    run.locations.Forget(std::string(key));
  };
  apply(run.flags.server, "server", &v1::AgentConfig::set_server);
  apply(run.flags.host_id, "host_id", &v1::AgentConfig::set_host_id);
  apply(run.flags.state_dir, "state_dir", &v1::AgentConfig::set_state_dir);
  apply(run.flags.discovery_mode, "discovery", &v1::AgentConfig::set_discovery);
  apply(run.flags.metrics_listen, "metrics_listen", &v1::AgentConfig::set_metrics_listen);
  if (run.flags.insecure) run.config.set_insecure(true);
  return {};
}

// A bad value is a usage error like a bad key, with the line of the file
// that set it.
StepFailure CheckOptions(AgentRun& run) {
  absl::StatusOr<AgentOptions> options = AgentOptionsFromConfig(run.config);
  if (!options.ok()) return {kAgentExitUsage, run.locations.Locate(options.status().message())};
  run.options = std::move(*options);
  return {};
}

// The packaged file names no csd: installing the package on a running
// hypervisor must change no cookie until an operator says which csd
// decides them (docs/operating.md, "First deployment"). Without a file
// (tests, trials) the default address stands; --probe needs no csd.
StepFailure RequireServer(AgentRun& run) {
  if (!run.flags.config_file.empty() && run.config.server().empty()) {
    return {kAgentExitUsage,
            absl::StrCat(run.flags.config_file,
                         ": server is not set, so cs-agent does not start and changes no "
                         "cookie: set server to csd's address (host:port, or several "
                         "replicas comma-separated) and start it again (docs/operating.md, "
                         "\"First deployment\")")};
  }
  return {};
}

StepFailure SetUpDiscovery(AgentRun& run) {
  // Execs are held and classified before the agent hears of them, so that
  // a storm of short commands costs no reconcile pass.
  run.options.process_events = std::make_shared<host::ProcConnectorEvents>(
      discovery::DelayedExecStage(std::make_shared<host::LocalPseudoFs>(),
                                  run.options.procfs_root));
  discovery::DiscoverySetup discovery;
  discovery.procfs_root = run.options.procfs_root;
  discovery.vmm = run.options.vmm;
  discovery.mode = run.config.discovery();
  if (!run.config.libvirt_uri().empty()) discovery.libvirt_uri = run.config.libvirt_uri();
  discovery.on_domain_event = [running = run.running] {
    if (Agent* agent = running->load()) agent->TriggerReconcile();
  };
  auto vms = discovery::MakeVmDiscovery(discovery);
  if (!vms.ok()) return {kAgentExitUsage, std::string(vms.status().message())};
  run.options.vm_discovery = *vms;
  return {};
}

// The settings of the discovery cs-agent's main builds: a reload cannot
// change them.
std::vector<std::string> DiscoveryChanges(const v1::AgentConfig& now, const v1::AgentConfig& next) {
  std::vector<std::string> changed;
  if (now.discovery() != next.discovery()) changed.push_back("discovery");
  if (now.libvirt_uri() != next.libvirt_uri()) changed.push_back("libvirt_uri");
  return changed;
}

// A reload (SIGHUP): the file and the flags, checked whole as at start,
// then applied by the agent; nothing changes on any error.
absl::Status ReloadConfig(AgentRun& run) {
  if (run.flags.config_file.empty()) {
    LOG(WARNING) << "reload asked, but cs-agent runs without --config: nothing to read";
    return absl::OkStatus();
  }
  AgentRun next;
  next.flags = run.flags;
  absl::Status status = RunReloadChecks<AgentRun, StepFailure>(
      next, {LoadConfig, ApplyFlags, CheckOptions});
  if (status.ok()) status = RestartOnly(DiscoveryChanges(run.config, next.config), "cs-agent");
  absl::StatusOr<std::string> changed =
      status.ok() ? run.agent->Reload(next.options) : absl::StatusOr<std::string>(status);
  run.agent->metrics().RecordConfigReload(changed.ok());
  if (!changed.ok()) {
    LOG(ERROR) << "reload of " << run.flags.config_file << " refused: " << changed.status().message()
               << "; cs-agent runs on with the settings it had";
    return changed.status();
  }
  run.config = std::move(next.config);
  LOG(INFO) << "reloaded " << run.flags.config_file << ": "
            << (changed->empty() ? "nothing changed" : absl::StrCat("changed ", *changed));
  return absl::OkStatus();
}

StepFailure StartAgent(AgentRun& run) {
  run.agent = std::make_unique<Agent>(std::move(run.options));
  absl::Status started = run.agent->Start();
  if (!started.ok()) return {kAgentExitStartFailed, started.ToString()};
  *run.running = run.agent.get();
  return {};
}

}  // namespace

AgentMainEnvironment ProcessAgentEnvironment() {
  auto signals = std::make_shared<sigset_t>();
  sigemptyset(signals.get());
  sigaddset(signals.get(), SIGINT);
  sigaddset(signals.get(), SIGTERM);
  sigaddset(signals.get(), SIGHUP);
  AgentMainEnvironment env;
  // Blocked before any thread starts, so only sigwait below receives them.
  env.before_start = [signals] { pthread_sigmask(SIG_BLOCK, signals.get(), nullptr); };
  env.run_until_stopped = [signals](Agent&, const std::function<absl::Status()>& reload) {
    while (true) {
      int received = 0;
      sigwait(signals.get(), &received);
      if (received != SIGHUP) {
        LOG(INFO) << "cs-agent stopping on signal " << received;
        return;
      }
      reload().IgnoreError();  // logged and counted by reload itself
    }
  };
  return env;
}

int RunAgentMain(int argc, const char* const* argv, const AgentMainEnvironment& env,
                 std::ostream& out, std::ostream& err) {
  AgentRun run;
  bool probe = false;
  std::string probe_output = "text";
  CLI::App app{"cs-agent: enforces csd's core-scheduling assignments on this host"};
  app.add_option("--config", run.flags.config_file, "YAML file (cosched.v1.AgentConfig)");
  app.add_option("--server", run.flags.server, "csd address, HOST:PORT (default 127.0.0.1:7443), or several replicas' "
                 "comma-separated: the agent moves to the next when one fails");
  app.add_option("--host-id", run.flags.host_id, "this host's id (default: the hostname)");
  app.add_option("--state-dir", run.flags.state_dir,
                 "where assignments are kept (default /var/lib/cs-agent)");
  app.add_flag("--insecure", run.flags.insecure, "allow plaintext to a non-loopback csd");
  app.add_option("--discovery", run.flags.discovery_mode,
                 "where VMs are found: auto, libvirt, procfs (default auto)");
  app.add_option("--metrics-listen", run.flags.metrics_listen,
                 "host:port of the Prometheus /metrics endpoint, or off (default 127.0.0.1:9464)");
  app.add_flag("--probe", probe,
               "print what this host can do (topology, SMT, core scheduling) and whether "
               "tagging is safe (the preflight's hazards under --config's rules), and exit: "
               "0 when it can tag, 3 when it cannot");
  app.add_option("-o,--output", probe_output, "--probe's format: text or json")
      ->check(CLI::IsMember({"text", "json"}));
  app.set_version_flag("--version", absl::StrCat("cs-agent ", CoschedVersion(), " (commit ",
                                                 CoschedCommit(), ")"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err) == 0 ? kAgentExitOk : kAgentExitUsage;
  }
  if (!google::IsGoogleLoggingInitialized()) {
    google::InitGoogleLogging(argc > 0 ? argv[0] : "cs-agent");
    FLAGS_logtostderr = true;
  }
  if (probe) {
    // The probe judges hazards by the agent's own settings (allow_hazards,
    // nested_is_hazard, the known-bad list), so it answers as the agent
    // with this config would.
    for (const Step& step : {Step(LoadConfig), Step(ApplyFlags), Step(CheckOptions)}) {
      StepFailure failed = step(run);
      if (failed.code == kAgentExitOk) continue;
      err << "cs-agent: " << failed.message << "\n";
      return failed.code;
    }
    return PrintHostProbe(HazardRulesOf(run.options), out, probe_output == "json");
  }

  const std::vector<std::pair<absl::string_view, Step>> steps = {
      {"load the config file", LoadConfig},
      {"apply the flags", ApplyFlags},
      {"check the options", CheckOptions},
      {"require a csd", RequireServer},
      {"prepare the process",
       [&env](AgentRun&) -> StepFailure {
         if (env.before_start) env.before_start();
         return {};
       }},
      {"set up VM discovery", SetUpDiscovery},
      {"start the agent", StartAgent},
  };
  for (const auto& [name, step] : steps) {
    StepFailure failed = step(run);
    if (failed.code == kAgentExitOk) continue;
    if (failed.code == kAgentExitStartFailed) {
      LOG(ERROR) << failed.message;
    } else {
      err << "cs-agent: " << failed.message << "\n";
    }
    return failed.code;
  }
  if (env.run_until_stopped) {
    env.run_until_stopped(*run.agent, [&run] { return ReloadConfig(run); });
  }
  // Teardown, in reverse: libvirt's events no longer reach the agent, then
  // it stops (its threads joined, the state file saved).
  *run.running = nullptr;
  run.agent->Stop();
  return kAgentExitOk;
}

}  // namespace cosched::agent
