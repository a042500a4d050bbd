#include "server/daemon/csd_main.h"

#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/config_loader.h"
#include "common/config_reload.h"
#include "common/version.h"
#include "cosched/v1/config.pb.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/daemon/csd_server.h"

namespace cosched::server {
namespace {

// Everything the steps share.
struct CsdRun {
  // The command line; a reload reads the file again under the same flags.
  struct Flags {
    std::string config_file, listen, data_dir, metrics_listen, socket;
    bool insecure = false;
  } flags;
  v1::CsdConfig config;
  ConfigLocations locations;
  CsdOptions options;
  std::unique_ptr<CsdServer> server;
};

// A step's failure: the exit code and the line to print.
struct StepFailure {
  int code = kCsdExitOk;
  std::string message;
};
using Step = std::function<StepFailure(CsdRun&)>;

StepFailure LoadConfig(CsdRun& run) {
  if (run.flags.config_file.empty()) return {};
  absl::Status loaded = LoadYamlConfigFile(run.flags.config_file, &run.config, &run.locations);
  if (!loaded.ok()) return {kCsdExitUsage, std::string(loaded.message())};
  if (run.config.has_store() && !run.config.store().has_etcd()) {
    return {kCsdExitUsage,
            run.locations.Locate("store must name its kind: etcd (leave store out for the "
                                 "embedded SQLite store in data_dir)")};
  }
  return {};
}

// Flags override the file; an error about one of them names no line.
StepFailure ApplyFlags(CsdRun& run) {
  if (!run.flags.metrics_listen.empty()) {
    run.config.set_metrics_listen(run.flags.metrics_listen);
    run.locations.Forget("metrics_listen");
  }
  if (!run.flags.socket.empty()) {
    run.config.mutable_local_socket()->set_path(run.flags.socket);
    run.locations.Forget("local_socket.path");
  }
  run.options = CsdOptionsFromConfig(run.config);
  if (!run.flags.listen.empty()) {
    run.options.listen = run.flags.listen;
    run.locations.Forget("listen");
  }
  if (!run.flags.data_dir.empty()) {
    run.options.data_dir = run.flags.data_dir;
    run.locations.Forget("data_dir");
  }
  if (run.flags.insecure) {
    run.options.insecure = true;
    if (run.config.plaintext_role().empty()) run.options.authz.plaintext_role = "none";
  }
  return {};
}

// A bad value is a usage error like a bad key, with the line of the file
// that set it.
StepFailure CheckOptions(CsdRun& run) {
  if (absl::Status valid = ValidateCsdOptions(run.options); !valid.ok()) {
    return {kCsdExitUsage, run.locations.Locate(valid.message())};
  }
  return {};
}

// A reload (SIGHUP): the file and the flags, checked whole as at start,
// then applied by the server; nothing changes on any error.
absl::Status ReloadConfig(CsdRun& run) {
  if (run.flags.config_file.empty()) {
    LOG(WARNING) << "reload asked, but csd runs without --config: nothing to read";
    return absl::OkStatus();
  }
  CsdRun next;
  next.flags = run.flags;
  absl::Status status = RunReloadChecks<CsdRun, StepFailure>(
      next, {LoadConfig, ApplyFlags, CheckOptions});
  // What CsdServer cannot compare: whole messages of the file.
  using google::protobuf::util::MessageDifferencer;
  std::vector<std::string> fixed;
  if (!MessageDifferencer::Equals(run.config.store(), next.config.store())) fixed.push_back("store");
  if (status.ok()) status = RestartOnly(fixed, "csd");
  absl::StatusOr<std::string> changed;
  if (status.ok()) {
    changed = run.server->Reload(next.options);
  } else {
    run.server->CountRefusedReload();
    changed = status;
  }
  if (!changed.ok()) {
    LOG(ERROR) << "reload of " << run.flags.config_file << " refused: " << changed.status().message()
               << "; csd runs on with the settings it had";
    return changed.status();
  }
  run.config = std::move(next.config);
  run.options = std::move(next.options);
  LOG(INFO) << "reloaded " << run.flags.config_file << ": "
            << (changed->empty() ? "nothing changed" : absl::StrCat("changed ", *changed));
  return absl::OkStatus();
}

StepFailure StartServer(CsdRun& run) {
  auto server = CsdServer::Start(run.options);
  if (!server.ok()) {
    return {kCsdExitStartFailed, run.locations.Locate(server.status().message())};
  }
  run.server = std::move(*server);
  return {};
}

}  // namespace

CsdMainEnvironment ProcessCsdEnvironment() {
  auto signals = std::make_shared<sigset_t>();
  sigemptyset(signals.get());
  sigaddset(signals.get(), SIGINT);
  sigaddset(signals.get(), SIGTERM);
  sigaddset(signals.get(), SIGHUP);
  CsdMainEnvironment env;
  // Signals are taken by one thread with sigwait, never by a handler:
  // blocked before any thread starts, so every thread inherits the mask.
  env.before_start = [signals] { pthread_sigmask(SIG_BLOCK, signals.get(), nullptr); };
  env.serve_until_stopped = [signals](CsdServer& server,
                                      const std::function<absl::Status()>& reload) {
    std::thread stopper([&] {
      while (true) {
        int sig = 0;
        sigwait(signals.get(), &sig);
        if (sig == SIGHUP) {
          reload().IgnoreError();  // logged and counted by reload itself
          continue;
        }
        LOG(INFO) << "signal " << sig << ": shutting down";
        server.Shutdown();
        return;
      }
    });
    server.Wait();
    stopper.join();
  };
  return env;
}

int RunCsdMain(int argc, const char* const* argv, const CsdMainEnvironment& env,
               std::ostream& out, std::ostream& err) {
  if (argc > 1 && absl::string_view(argv[1]) == "store") {
    return RunCsdStoreMain(argc - 1, argv + 1, out, err);
  }
  CsdRun run;
  CLI::App app{"csd: the cosched server"};
  app.add_option("--config", run.flags.config_file, "YAML config file (cosched.v1.CsdConfig)");
  app.add_option("--listen", run.flags.listen, "host:port to serve on (default 127.0.0.1:7443)");
  app.add_option("--data-dir", run.flags.data_dir, "where the store lives (default /var/lib/cosched)");
  app.add_flag("--insecure", run.flags.insecure, "allow plaintext on a non-loopback address");
  app.add_option("--metrics-listen", run.flags.metrics_listen,
                 "host:port of the Prometheus /metrics endpoint, or off (default 127.0.0.1:9465)");
  app.add_option("--socket", run.flags.socket,
                 "Unix socket for local callers, or off (default /run/cosched/csd.sock)");
  app.set_version_flag("--version", absl::StrCat("csd ", CoschedVersion(), " (commit ",
                                                 CoschedCommit(), ")"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" that exit 0 and print to out.
    return app.exit(e, out, err) == 0 ? kCsdExitOk : kCsdExitUsage;
  }

  if (!google::IsGoogleLoggingInitialized()) {
    FLAGS_logtostderr = true;
    google::InitGoogleLogging(argc > 0 ? argv[0] : "csd");
  }

  const std::vector<std::pair<absl::string_view, Step>> steps = {
      {"load the config file", LoadConfig},
      {"apply the flags", ApplyFlags},
      {"check the options", CheckOptions},
      {"prepare the process",
       [&env](CsdRun&) -> StepFailure {
         if (env.before_start) env.before_start();
         return {};
       }},
      {"start csd", StartServer},
  };
  for (const auto& [name, step] : steps) {
    StepFailure failed = step(run);
    if (failed.code != kCsdExitOk) {
      VLOG(1) << "csd: step '" << name << "' failed";
      err << "csd: " << failed.message << "\n";
      return failed.code;
    }
  }
  if (env.serve_until_stopped) {
    env.serve_until_stopped(*run.server, [&run] { return ReloadConfig(run); });
  }
  // Teardown: stops serving, drains the store's writes.
  run.server.reset();
  return kCsdExitOk;
}

}  // namespace cosched::server
