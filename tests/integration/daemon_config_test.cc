// csd's and cs-agent's mains, run in process as an operator runs them, with
// a config file whose values are wrong: they must exit 2 (a usage error,
// like a bad key) with one line naming the file, the line and the rule, and
// start nothing. And csd's main started and stopped through its
// environment, as the process's signals would; cs-agent's reloaded so.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/agent_main.h"
#include "common/version.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/api/authz.h"
#include "server/daemon/csd_main.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/metrics_scrape.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched {
namespace {

struct Exit {
  int code = -1;
  std::string output;
};

// Runs `main` over `args` (argv[0] first) as a process would, but in this one.
template <typename Main, typename Env>
Exit RunMain(Main main, const Env& env, std::vector<std::string> args) {
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  Exit exit;
  exit.code = main(static_cast<int>(argv.size()), argv.data(), env, out, err);
  exit.output = out.str() + err.str();
  return exit;
}

Exit Csd(std::vector<std::string> args) {
  args.insert(args.begin(), "csd");
  server::CsdMainEnvironment env;
  // A csd that starts anyway stops at once (and the test fails on its code).
  env.serve_until_stopped = [](server::CsdServer&, const std::function<absl::Status()>&) {};
  return RunMain(server::RunCsdMain, env, std::move(args));
}

Exit Agent(std::vector<std::string> args) {
  args.insert(args.begin(), "cs-agent");
  agent::AgentMainEnvironment env;
  env.run_until_stopped = [](agent::Agent&, const std::function<absl::Status()>&) {};
  return RunMain(agent::RunAgentMain, env, std::move(args));
}

// A refusal as operators see it: exit 2 and the one line they need.
void ExpectUsageError(const Exit& e, const std::string& line) {
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_NE(e.output.find(line), std::string::npos) << "no '" << line << "' in: " << e.output;
}

class DaemonConfigTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_.Sub(name);
    std::ofstream(path) << text;
    return path;
  }
  cosched::testing::TempDir dir_;
};

TEST_F(DaemonConfigTest, CsdNamesTheLineOfABadValueAndExits2) {
  const std::string data = dir_.Sub("data");
  const std::string config = Write("csd.yaml",
                                   "listen: 127.0.0.1:0\n"
                                   "data_dir: " + data + "\n"
                                   "metrics_listen: off\n"
                                   "roles:\n"
                                   "  - role: superuser\n"
                                   "    spiffe_ids: [spiffe://cosched/ops]\n");
  ExpectUsageError(Csd({"--config", config}),
                   "csd: " + config + ":5: roles[0].role 'superuser' is not a role");
  EXPECT_FALSE(std::ifstream(data + "/cosched.db").good()) << "csd opened its store";
}

TEST_F(DaemonConfigTest, CsdFlagValuesAreNotBlamedOnTheFile) {
  const std::string config = Write("csd.yaml", "listen: 127.0.0.1:0\n"
                                               "audit_retention_days: -7\n");
  const std::vector<std::string> csd = {"--config", config, "--metrics-listen", "off",
                                        "--data-dir", dir_.Sub("data")};
  std::vector<std::string> with_listen = csd;
  with_listen.insert(with_listen.end(), {"--listen", "127.0.0.1:99999"});
  ExpectUsageError(Csd(with_listen), "csd: listen '127.0.0.1:99999'");
  ExpectUsageError(Csd(csd), "csd: " + config + ":2: audit_retention_days must be -1");
}

// Issue #33: both daemons say which build they are, and nothing else.
TEST_F(DaemonConfigTest, VersionFlagsPrintTheBuildAndExitZero) {
  const std::string build = std::string(CoschedVersion()) + " (commit " + CoschedCommit() + ")";
  Exit csd = Csd({"--version"});
  EXPECT_EQ(csd.code, 0);
  EXPECT_EQ(csd.output, "csd " + build + "\n");
  Exit agent = Agent({"--version"});
  EXPECT_EQ(agent.code, 0);
  EXPECT_EQ(agent.output, "cs-agent " + build + "\n");
  // A build from a clone: the release, then its commit (scripts/version.sh).
  EXPECT_NE(std::string(CoschedVersion()).find("~git"), std::string::npos) << CoschedVersion();
  EXPECT_NE(std::string(CoschedCommit()), "unknown");
}

// Issue #33 item 5: `systemctl reload cs-agent` (SIGHUP) reads the file
// again through the same checks as at start. A bad value or a setting that
// needs a restart is refused whole, naming the line or the setting; every
// reload is counted, and a gauge says the last one was refused.
TEST_F(DaemonConfigTest, AgentReloadsItsFileAndRefusesABadOneWhole) {
  const std::string head = "server: 127.0.0.1:1\nhost_id: hv-reload\nstate_dir: " +
                           dir_.Sub("state") +
                           "\nmetrics_listen: \"off\"\ndiscovery: procfs\n"
                           "known_bad_file: \"off\"\ntelemetry: {enabled: false}\n";
  const std::string config = Write("cs-agent.yaml", head + "labels: {zone: a}\n");
  agent::AgentMainEnvironment env;
  bool ran = false;
  env.run_until_stopped = [&](agent::Agent& agent, const std::function<absl::Status()>& reload) {
    ran = true;
    auto reloads = [&agent](const std::string& result) {
      return cosched::testing::SampleValue(
                 cosched::testing::ScrapeText(agent.metrics().collectables()),
                 "cosched_agent_config_reloads_total", {{"result", result}})
          .value_or(-1);
    };
    auto failed = [&agent] {
      return cosched::testing::SampleValue(
                 cosched::testing::ScrapeText(agent.metrics().collectables()),
                 "cosched_agent_config_reload_failed", {})
          .value_or(-1);
    };
    Write("cs-agent.yaml", head + "labels: {zone: b}\nfail_open: true\n");
    EXPECT_OK(reload());
    EXPECT_EQ(failed(), 0);

    Write("cs-agent.yaml", head + "labels: {zone: c}\nreport_interval_s: -3\n");
    absl::Status bad = reload();
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.message().find(config + ":9: report_interval_s must be positive"),
              std::string::npos)
        << bad;
    EXPECT_EQ(failed(), 1);

    Write("cs-agent.yaml", "discovery: libvirt\n" + head.substr(0, head.find("discovery")) +
                               head.substr(head.find("known_bad_file")) + "labels: {zone: b}\n");
    absl::Status fixed = reload();
    EXPECT_EQ(fixed.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(fixed.message().find("changes discovery, which take effect only at a restart"),
              std::string::npos)
        << fixed;
    EXPECT_EQ(reloads("applied"), 1);
    EXPECT_EQ(reloads("refused"), 2);

    // The file as it was after the first reload: nothing to change, applied.
    Write("cs-agent.yaml", head + "labels: {zone: b}\nfail_open: true\n");
    EXPECT_OK(reload());
    EXPECT_EQ(failed(), 0);
    EXPECT_EQ(reloads("applied"), 2);
  };
  std::vector<const char*> argv = {"cs-agent", "--config", config.c_str()};
  std::ostringstream out, err;
  EXPECT_EQ(agent::RunAgentMain(static_cast<int>(argv.size()), argv.data(), env, out, err), 0)
      << err.str();
  EXPECT_TRUE(ran) << err.str();
}

TEST_F(DaemonConfigTest, CsdBadFlagsAndABadFileAreUsageErrors) {
  ExpectUsageError(Csd({"--no-such-flag"}), "--no-such-flag");
  const std::string config = Write("csd.yaml", "listen: [1, 2\n");
  ExpectUsageError(Csd({"--config", config}), config);
  EXPECT_EQ(Csd({"--help"}).code, 0);
}

// The Unix socket's settings and the unix bindings of roles: refused before
// anything starts, naming the file's line, the field and the rule.
TEST_F(DaemonConfigTest, CsdRefusesABadLocalSocketOrUnixBindingNamingTheLine) {
  const std::string head = "listen: 127.0.0.1:0\ndata_dir: " + dir_.Sub("data") +
                           "\nmetrics_listen: off\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"local_socket:\n  path: " + dir_.Sub("csd.sock") + "\n  mode: 0699\n",
       ":6: local_socket.mode '0699' must be 3 or 4 octal digits"},
      {"local_socket:\n  path: " + dir_.Sub("csd.sock") + "\n  mode: \"0066\"\n",
       ":6: local_socket.mode '0066' must be 3 or 4 octal digits such as 0660 (default), at "
       "most 0777, giving the owner read and write: the owner (csd) lacks read or write"},
      {"local_socket:\n  path: " + dir_.Sub("csd.sock") + "\n  group: no-such-group-cosched\n",
       ":6: local_socket.group 'no-such-group-cosched' is not a group of this host"},
      {"local_socket:\n  path: run/csd.sock\n", ":5: local_socket.path 'run/csd.sock' must be "
                                               "an absolute file path"},
      {"plaintext_role: root\n", ":4: plaintext_role 'root' is not a role"},
      {"roles:\n  - role: operator\n    unix_users: [no-such-user-cosched]\n",
       ":6: roles[0].unix_users[0] 'no-such-user-cosched' is not a user of this host"},
      {"roles:\n  - role: operator\n    unix_groups: [\"\"]\n",
       ":6: roles[0].unix_groups[0] is empty"},
  };
  for (const auto& [yaml, says] : cases) {
    SCOPED_TRACE(yaml);
    const std::string config = Write("csd.yaml", head + yaml);
    ExpectUsageError(Csd({"--config", config}), "csd: " + config + says);
  }
  EXPECT_FALSE(std::ifstream(dir_.Sub("csd.sock")).good()) << "a socket was made";
  // A flag's value names no line.
  const std::string config = Write("csd.yaml", head);
  ExpectUsageError(Csd({"--config", config, "--socket", "relative.sock"}),
                   "csd: local_socket.path 'relative.sock' must be an absolute");
}

// The whole life of a csd through its main: it serves until its
// environment says stop, then closes its store, so a second csd can open
// the same data dir.
TEST_F(DaemonConfigTest, CsdServesUntilItsEnvironmentStopsIt) {
  const std::string data = dir_.Sub("data");
  for (int run = 0; run < 2; ++run) {
    bool served = false;
    server::CsdMainEnvironment env;
    env.serve_until_stopped = [&](server::CsdServer& csd, const std::function<absl::Status()>&) {
      auto stub = v1::ControlPlane::NewStub(
          grpc::CreateChannel(csd.address(), grpc::InsecureChannelCredentials()));
      grpc::ClientContext context;
      v1::ListHostsResponse hosts;
      served = stub->ListHosts(&context, v1::ListHostsRequest(), &hosts).ok();
    };
    Exit e = RunMain(server::RunCsdMain, env,
                 {"csd", "--listen", "127.0.0.1:0", "--data-dir", data, "--metrics-listen",
                  "off", "--socket", "off"});
    EXPECT_EQ(e.code, 0) << e.output;
    EXPECT_TRUE(served) << "run " << run;
  }
}

// Issue #33 item 5: `systemctl reload csd` (SIGHUP) reads csd.yaml again
// through the checks made at start: who gets which role changes at once for
// the next call, the change is audited; a bad value or a setting that
// needs a restart is refused whole, with its line or its name, and the
// refusal is exported.
TEST_F(DaemonConfigTest, CsdReloadsRolesAndTokensAndRefusesABadFileWhole) {
  const std::string head = "listen: 127.0.0.1:0\ndata_dir: " + dir_.Sub("data") +
                           "\nmetrics_listen: 127.0.0.1:0\nlocal_socket: {path: \"off\"}\n";
  auto token = [](const std::string& name, const std::string& secret) {
    return "  - {role: operator, name: " + name + ", sha256: " + server::Sha256Hex(secret) + "}\n";
  };
  const std::string config = Write("csd.yaml", head + "tokens:\n" + token("ci", "alpha"));
  server::CsdMainEnvironment env;
  bool ran = false;
  env.serve_until_stopped = [&](server::CsdServer& csd,
                                const std::function<absl::Status()>& reload) {
    ran = true;
    auto stub = v1::ControlPlane::NewStub(
        grpc::CreateChannel(csd.address(), grpc::InsecureChannelCredentials()));
    auto tag = [&](const std::string& secret) {
      grpc::ClientContext context;
      context.AddMetadata("authorization", "Bearer " + secret);
      v1::TagVMRequest request;
      request.set_vm_id("vm-1");
      request.set_tenant_id("acme");
      v1::TagVMResponse response;
      return stub->TagVM(&context, request, &response).error_code();
    };
    auto metric = [&](const std::string& name, const std::map<std::string, std::string>& labels) {
      return cosched::testing::SampleValue(
                 cosched::testing::HttpGet(csd.metrics_port(), "/metrics"), name, labels)
          .value_or(-1);
    };
    EXPECT_EQ(tag("alpha"), grpc::StatusCode::OK);
    EXPECT_EQ(tag("beta"), grpc::StatusCode::UNAUTHENTICATED);

    Write("csd.yaml", head + "tokens:\n" + token("ci-2", "beta"));
    EXPECT_OK(reload());
    EXPECT_EQ(tag("alpha"), grpc::StatusCode::UNAUTHENTICATED) << "a retired token still works";
    EXPECT_EQ(tag("beta"), grpc::StatusCode::OK);
    {
      grpc::ClientContext context;
      context.AddMetadata("authorization", "Bearer beta");
      v1::ListAuditRecordsRequest request;
      request.set_who("csd:reload");
      v1::ListAuditRecordsResponse audit;
      ASSERT_TRUE(stub->ListAuditRecords(&context, request, &audit).ok());
      ASSERT_EQ(audit.records_size(), 1);
      EXPECT_EQ(audit.records(0).method(), "ReloadConfig");
      EXPECT_EQ(audit.records(0).reason(), "changed roles and tokens");
    }

    // A bad value: refused, naming the line; the tokens stay as they were.
    Write("csd.yaml", head + "tokens:\n" + token("ci", "alpha") + "host_stale_after_s: -1\n");
    absl::Status bad = reload();
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.message().find(config + ":7: host_stale_after_s must be 1 to 86400"),
              std::string::npos)
        << bad;
    EXPECT_EQ(tag("alpha"), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(metric("cosched_csd_config_reload_failed", {}), 1);

    // Settings that need a restart: refused by name, nothing applied.
    Write("csd.yaml", head + "tokens:\n" + token("ci", "alpha") + "audit_retention_days: 30\n");
    absl::Status fixed = reload();
    EXPECT_EQ(fixed.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(fixed.message().find("changes audit_retention_days, which take effect only at a restart"),
              std::string::npos)
        << fixed;
    Write("csd.yaml", head + "tokens:\n" + token("ci", "alpha") +
                          "class_conflicts: [{a: cache-heavy, b: io-heavy}]\n");
    fixed = reload();
    EXPECT_EQ(fixed.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(fixed.message().find("changes class_conflicts"), std::string::npos) << fixed;
    EXPECT_EQ(tag("alpha"), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(metric("cosched_csd_config_reloads_total", {{"result", "applied"}}), 1);
    EXPECT_EQ(metric("cosched_csd_config_reloads_total", {{"result", "refused"}}), 3);
  };
  Exit e = RunMain(server::RunCsdMain, env, {"csd", "--config", config});
  EXPECT_EQ(e.code, 0) << e.output;
  EXPECT_TRUE(ran) << e.output;
}

TEST_F(DaemonConfigTest, CsAgentNamesTheLineOfABadValueAndExits2) {
  const std::string config = Write("agent.yaml",
                                   "server: 127.0.0.1:1\n"
                                   "host_id: hv-1\n"
                                   "telemetry:\n"
                                   "  enabled: true\n"
                                   "  poll_interval_ms: -5\n");
  ExpectUsageError(Agent({"--config", config}),
                   "cs-agent: " + config +
                       ":5: telemetry.poll_interval_ms must be positive, got -5");
  ExpectUsageError(Agent({"--config", config, "--bogus"}), "--bogus");
}

// Issue #33 item 3: the packaged cs-agent.yaml names no csd, and an agent
// whose file names none does not start: installing the package on a
// running hypervisor changes no cookie until an operator configures it.
// The packaged unit does not restart it on that exit (2).
TEST_F(DaemonConfigTest, AnAgentWhoseFileNamesNoCsdDoesNotStartAndSaysWhatToSet) {
  const std::string state = dir_.Sub("state");
  const std::string config = Write("agent.yaml", "state_dir: " + state + "\nhost_id: hv-1\n");
  ExpectUsageError(Agent({"--config", config}),
                   "cs-agent: " + config +
                       ": server is not set, so cs-agent does not start and changes no cookie: "
                       "set server to csd's address");
  EXPECT_FALSE(std::filesystem::exists(state)) << "the unconfigured agent made its state dir";
  ExpectUsageError(Agent({"--config", std::string(COSCHED_DEPLOY_CONFIG_DIR) + "/cs-agent.yaml"}),
                   "server is not set");
  // --probe, before any csd is named, answers what the host can do
  // (0: it can tag, 3: it cannot), never the usage error.
  Exit probe = Agent({"--probe", "--config", config});
  EXPECT_TRUE(probe.code == 0 || probe.code == 3) << probe.code << ": " << probe.output;
  std::ifstream unit(std::string(COSCHED_DEPLOY_SYSTEMD_DIR) + "/cs-agent.service");
  const std::string text((std::istreambuf_iterator<char>(unit)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\nRestartPreventExitStatus=2\n"), std::string::npos);
}

}  // namespace
}  // namespace cosched
