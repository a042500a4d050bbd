// csd: decides which VMs may share SMT siblings, stores it durably and
// streams it to cs-agents.
#include <csignal>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "common/config_loader.h"
#include "glog/logging.h"
#include "server/csd_server.h"

int main(int argc, char** argv) {
  CLI::App app{"csd: the cosched server"};
  std::string config_file, listen, data_dir, metrics_listen;
  bool insecure = false;
  app.add_option("--config", config_file, "YAML config file (cosched.v1.CsdConfig)");
  app.add_option("--listen", listen, "host:port to serve on (default 127.0.0.1:7443)");
  app.add_option("--data-dir", data_dir, "where the store lives (default /var/lib/cosched)");
  app.add_flag("--insecure", insecure, "allow plaintext on a non-loopback address");
  app.add_option("--metrics-listen", metrics_listen,
                 "host:port of the Prometheus /metrics endpoint, or off (default 127.0.0.1:9465)");
  CLI11_PARSE(app, argc, argv);

  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  cosched::v1::CsdConfig config;
  cosched::ConfigLocations locations;
  if (!config_file.empty()) {
    absl::Status loaded = cosched::LoadYamlConfigFile(config_file, &config, &locations);
    if (!loaded.ok()) {
      std::cerr << "csd: " << loaded.message() << "\n";
      return 2;
    }
  }
  if (!metrics_listen.empty()) {
    config.set_metrics_listen(metrics_listen);
    locations.Forget("metrics_listen");
  }
  auto options = cosched::server::CsdOptionsFromConfig(config);
  if (!listen.empty()) {
    options.listen = listen;
    locations.Forget("listen");
  }
  if (!data_dir.empty()) {
    options.data_dir = data_dir;
    locations.Forget("data_dir");
  }
  if (insecure) options.insecure = true;
  // A bad value is a usage error like a bad key (exit 2), with the line
  // of the file that set it.
  if (absl::Status valid = cosched::server::ValidateCsdOptions(options); !valid.ok()) {
    std::cerr << "csd: " << locations.Locate(valid.message()) << "\n";
    return 2;
  }

  // Signals are taken by one thread with sigwait, never by a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = cosched::server::CsdServer::Start(options);
  if (!server.ok()) {
    std::cerr << "csd: " << locations.Locate(server.status().message()) << "\n";
    return 1;
  }
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    LOG(INFO) << "signal " << sig << ": shutting down";
    (*server)->Shutdown();
  });
  (*server)->Wait();
  stopper.join();
  return 0;
}
