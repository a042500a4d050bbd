#include "cli/csctl.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "common/validation.h"
#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cli/csctl_fixture.h"
#include "tests/testing/temp_dir.h"

namespace cosched::cli {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class CsctlTest : public CsctlFixture {
 protected:
  CsctlTest() {
    env_.get_env = [this](const std::string& name) {
      auto it = env_vars_.find(name);
      return it == env_vars_.end() ? std::string() : it->second;
    };
    // Whatever address was resolved, talk to the fake, and remember it.
    env_.make_stub = [this](const ConnectionSettings& settings)
        -> absl::StatusOr<std::unique_ptr<Stub>> {
      settings_ = settings;
      return server_.NewStub();
    };
  }

  ~CsctlTest() override {
    for (const std::string& path : config_files_) std::remove(path.c_str());
  }

  std::string WriteConfig(const std::string& yaml) {
    std::string path = ::testing::TempDir() + "csctl_test_" +
                       std::to_string(getpid()) + "_" +
                       std::to_string(config_files_.size()) + ".yaml";
    std::ofstream(path) << yaml;
    config_files_.push_back(path);
    return path;
  }

  bool OneErrorLine() const {
    const std::string s = err_.str();
    return std::count(s.begin(), s.end(), '\n') == 1 && s.back() == '\n' &&
           s.rfind("csctl: ", 0) == 0;
  }

  std::map<std::string, std::string> env_vars_;
  ConnectionSettings settings_;
  std::vector<std::string> config_files_;
};

TEST_F(CsctlTest, TagAndGetOverARealChannel) {
  env_.make_stub = MakeControlPlaneStub;
  ASSERT_EQ(Run({"--server", server_.address(), "tag", "vm-123"}), kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), StartsWith("tagged vm-123\n"));
  EXPECT_EQ(server_.service().tag_requests().at(0).tenant_id(), "default");

  ASSERT_EQ(Run({"get", "vm-123", "-o", "json", "--server", server_.address()}),
            kExitOk)
      << err_.str();
  json vm = json::parse(out_.str());
  EXPECT_EQ(vm["vm_id"], "vm-123");
  EXPECT_EQ(vm["tenant_id"], "default");
  EXPECT_EQ(vm["isolation"], "vm");
  EXPECT_EQ(vm["revision"], 1);
}

TEST_F(CsctlTest, BadIdNamesTheRuleWithoutCallingTheServer) {
  EXPECT_EQ(Run({"tag", "bad id!"}), kExitUsage);
  EXPECT_TRUE(OneErrorLine()) << err_.str();
  EXPECT_THAT(err_.str(), HasSubstr(kIdRule));
  EXPECT_EQ(server_.service().calls(), 0);
}

TEST_F(CsctlTest, GetMissingVmSaysNotFound) {
  EXPECT_EQ(Run({"get", "vm-nope"}), kExitRpcError);
  EXPECT_EQ(err_.str(), "csctl: vm 'vm-nope' not found\n");
}

TEST_F(CsctlTest, TagFlagsAfterAndBeforeThePositional) {
  ASSERT_EQ(Run({"tag", "--class", "b,a", "--class", "c", "vm-1",
                 "--isolation", "tenant", "--tenant", "acme", "--scope",
                 "vcpus", "-o", "json"}),
            kExitOk)
      << err_.str();
  const v1::TagVMRequest sent = server_.service().tag_requests().at(0);
  EXPECT_EQ(sent.vm_id(), "vm-1");
  EXPECT_EQ(sent.tenant_id(), "acme");
  EXPECT_EQ(sent.isolation(), v1::ISOLATION_LEVEL_TENANT);
  EXPECT_EQ(sent.thread_scope(), v1::THREAD_SCOPE_VCPUS);
  EXPECT_THAT(sent.interference_classes(), ElementsAre("b", "a", "c"));
  EXPECT_EQ(json::parse(out_.str())["interference_classes"],
            json({"a", "b", "c"}));
}

TEST_F(CsctlTest, ServerAddressPrecedence) {
  ASSERT_EQ(Run({"hosts", "ls"}), kExitOk) << err_.str();
  EXPECT_EQ(settings_.server, "127.0.0.1:7443");

  const std::string config = WriteConfig("server: 127.0.0.3:7443\n");
  env_vars_["CSCTL_CONFIG"] = config;
  ASSERT_EQ(Run({"hosts", "ls"}), kExitOk) << err_.str();
  EXPECT_EQ(settings_.server, "127.0.0.3:7443");

  const std::string other = WriteConfig("server: 127.0.0.4:7443\n");
  ASSERT_EQ(Run({"--config", other, "hosts", "ls"}), kExitOk) << err_.str();
  EXPECT_EQ(settings_.server, "127.0.0.4:7443");

  env_vars_["CSCTL_SERVER"] = "127.0.0.2:7443";
  ASSERT_EQ(Run({"--config", other, "hosts", "ls"}), kExitOk) << err_.str();
  EXPECT_EQ(settings_.server, "127.0.0.2:7443");

  ASSERT_EQ(Run({"--server", "127.0.0.1:9", "hosts", "ls"}), kExitOk);
  EXPECT_EQ(settings_.server, "127.0.0.1:9");
}

TEST_F(CsctlTest, TlsAndInsecureFromFlagsAndConfig) {
  const std::string config = WriteConfig(
      "tls:\n  ca_file: /c/ca.pem\n  cert_file: /c/cert.pem\n"
      "  key_file: /c/key.pem\n");
  ASSERT_EQ(Run({"--config", config, "--cert", "/f/cert.pem", "--insecure",
                 "hosts", "ls"}),
            kExitOk)
      << err_.str();
  EXPECT_EQ(settings_.tls.ca_file(), "/c/ca.pem");
  EXPECT_EQ(settings_.tls.cert_file(), "/f/cert.pem");
  EXPECT_TRUE(settings_.insecure);
}

TEST_F(CsctlTest, BadConfigFileIsOneLineNamingTheKey) {
  const std::string config = WriteConfig("servr: 127.0.0.1:1\n");
  EXPECT_EQ(Run({"--config", config, "ls"}), kExitUsage);
  EXPECT_TRUE(OneErrorLine()) << err_.str();
  EXPECT_THAT(err_.str(), HasSubstr("servr"));

  EXPECT_EQ(Run({"--config", "/nonexistent/csctl.yaml", "ls"}), kExitUsage);
  EXPECT_TRUE(OneErrorLine()) << err_.str();
}

TEST_F(CsctlTest, AConfigValueThatFailsNamesItsLine) {
  const std::string config = WriteConfig(
      "server: 127.0.0.1:1\ntoken_file: /nonexistent/csctl-token\n");
  EXPECT_EQ(Run({"--config", config, "ls"}), kExitUsage);
  EXPECT_TRUE(OneErrorLine()) << err_.str();
  EXPECT_THAT(err_.str(), StartsWith("csctl: " + config +
                                     ":2: token_file /nonexistent/csctl-token cannot be read"));

  // From a flag: no line of the file is blamed.
  EXPECT_EQ(Run({"--config", config, "--token-file", "/nonexistent/flag-token", "ls"}),
            kExitUsage);
  EXPECT_THAT(err_.str(), StartsWith("csctl: --token-file /nonexistent/flag-token cannot be read"));
}

TEST_F(CsctlTest, UsageErrorsAreOneLineAndExitTwo) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {},
           {"frobnicate"},
           {"tag"},
           {"ls", "--limit", "-1"},
           {"-o", "yaml", "ls"},
           {"--timeout", "0", "ls"},
           {"policy"},
           {"policy", "set", "acme"},
           {"policy", "set", "acme", "--default", "paranoid"},
           {"hosts", "get"}}) {
    EXPECT_EQ(Run(args), kExitUsage) << ::testing::PrintToString(args);
    EXPECT_TRUE(OneErrorLine()) << err_.str();
  }
  EXPECT_EQ(server_.service().calls(), 0);
}

TEST_F(CsctlTest, UsageErrorsSayWhatIsWrong) {
  EXPECT_EQ(Run({"--timeout", "2", "frobnicate"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("unknown command 'frobnicate' (commands: tag, untag,"));
  for (const char* timeout : {"0", "1e300", "-1", "soon"}) {
    EXPECT_EQ(Run({"--timeout", timeout, "ls"}), kExitUsage) << timeout;
    EXPECT_THAT(err_.str(), HasSubstr(std::string("--timeout: must be a number of seconds "
                                                  "from 0.001 to 86400, got ") + timeout));
  }
  EXPECT_EQ(server_.service().calls(), 0);
}

TEST_F(CsctlTest, HelpGoesToStdoutAndSucceeds) {
  EXPECT_EQ(Run({"--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("Usage: csctl"));
  EXPECT_EQ(Run({"tag", "--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("--isolation"));
}

// Which build each agent runs, in the table (an upgrade's progress).
TEST_F(CsctlTest, HostsLsShowsEachAgentsVersion) {
  v1::Host host;
  host.set_host_id("hv-1");
  host.set_agent_version("0.2.0~git20261206.433.9fdacd1");
  server_.service().PutHost(host);
  v1::Host old;
  old.set_host_id("hv-2");
  server_.service().PutHost(old);
  ASSERT_EQ(Run({"hosts", "ls"}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("AGENT"));
  EXPECT_THAT(out_.str(), HasSubstr("0.2.0~git20261206.433.9fdacd1"));
}

// The off switch: exactly one target, a reason, on or off; usage errors
// ask nothing of csd.
TEST_F(CsctlTest, HostsEnforceOffAndOn) {
  v1::Host host;
  host.set_host_id("hv-1");
  server_.service().PutHost(host);
  EXPECT_EQ(Run({"hosts", "enforce", "off", "--reason", "x"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("name exactly one of HOST, --selector and --all"));
  EXPECT_EQ(Run({"hosts", "enforce", "off", "hv-1", "--all", "--reason", "x"}), kExitUsage);
  EXPECT_EQ(Run({"hosts", "enforce", "maybe", "hv-1", "--reason", "x"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("enforce takes on or off, got 'maybe'"));
  EXPECT_EQ(Run({"hosts", "enforce", "off", "hv-1"}), kExitUsage);  // --reason is required
  EXPECT_EQ(server_.service().calls(), 0);

  ASSERT_EQ(Run({"hosts", "enforce", "off", "hv-1", "--reason", "kernel bug INC-42"}), kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("enforcement off on host 'hv-1': 1 host(s) changed"));
  ASSERT_EQ(Run({"hosts", "enforce", "on", "--all", "--reason", "fixed"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("enforcement is on for the whole fleet"));
  const std::vector<v1::SetHostEnforcementRequest> sent =
      server_.service().enforcement_requests();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].host_id(), "hv-1");
  EXPECT_TRUE(sent[0].off());
  EXPECT_EQ(sent[0].reason(), "kernel bug INC-42");
  EXPECT_TRUE(sent[1].all());
  EXPECT_FALSE(sent[1].off());
  EXPECT_NE(Run({"hosts", "enforce", "off", "hv-404", "--reason", "x"}), kExitOk);
  EXPECT_THAT(err_.str(), HasSubstr("hv-404"));
}

// Offline: no csd is asked.
TEST_F(CsctlTest, VersionSaysWhichBuild) {
  const std::string line =
      std::string("csctl ") + CoschedVersion() + " (commit " + CoschedCommit() + ")\n";
  EXPECT_EQ(Run({"version"}), 0);
  EXPECT_EQ(out_.str(), line);
  out_.str("");
  EXPECT_EQ(Run({"--version"}), 0);
  EXPECT_EQ(out_.str(), line);
  EXPECT_EQ(server_.service().calls(), 0);
}

TEST_F(CsctlTest, PolicySetAndGet) {
  ASSERT_EQ(Run({"policy", "set", "acme", "--default", "tenant", "--allow",
                 "tenant,vm"}),
            kExitOk)
      << err_.str();
  ASSERT_EQ(Run({"-o", "json", "policy", "get", "acme"}), kExitOk);
  json policy = json::parse(out_.str());
  EXPECT_EQ(policy["default_isolation"], "tenant");
  EXPECT_EQ(policy["allowed_isolation"], json({"tenant", "vm"}));
  ASSERT_EQ(Run({"policy", "ls"}), kExitOk);
  EXPECT_THAT(out_.str(), StartsWith("TENANT"));
  EXPECT_THAT(out_.str(), HasSubstr("acme"));
}

TEST_F(CsctlTest, PlaceAndExplainCheckArgumentsWithoutCallingTheServer) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"place", "--vcpus", "0"},
           {"place", "--vcpus", "1025"},
           {"place", "--vcpus", "2", "--tenant", "bad id"},
           {"place", "--vcpus", "2", "--isolation", "strict"},
           {"place", "--vcpus", "2", "--class", "no/slash"},
           {"place", "--vcpus", "2", "--load", "-0.5"},
           {"explain"},
           {"explain", "bad id!"},
           {"policy", "set", "acme", "--default", "vm", "--forced-idle-budget", "-1"}}) {
    EXPECT_EQ(Run(args), kExitUsage) << args[0] << " " << args.back();
    EXPECT_TRUE(OneErrorLine()) << err_.str();
  }
  EXPECT_EQ(Run({"place"}), kExitUsage);  // --vcpus is required
  EXPECT_THAT(err_.str(), HasSubstr("--vcpus"));
  EXPECT_EQ(server_.service().calls(), 0);
}

TEST_F(CsctlTest, PolicyBudgetIsSentAndShown) {
  ASSERT_EQ(Run({"policy", "set", "acme", "--default", "vm", "--forced-idle-budget",
                 "7.5"}),
            kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), ::testing::ContainsRegex("idle budget: +7.5%"));
  ASSERT_EQ(Run({"-o", "json", "policy", "get", "acme"}), kExitOk);
  EXPECT_EQ(json::parse(out_.str())["forced_idle_budget_pct"], 7.5);
  ASSERT_EQ(Run({"policy", "set", "acme", "--default", "vm"}), kExitOk);
  ASSERT_EQ(Run({"-o", "json", "policy", "get", "acme"}), kExitOk);
  EXPECT_TRUE(json::parse(out_.str())["forced_idle_budget_pct"].is_null());
}

TEST_F(CsctlTest, LsWithLimitOverArguments) {
  for (const char* id : {"vm-1", "vm-2", "vm-3"}) {
    ASSERT_EQ(Run({"tag", id}), kExitOk);
  }
  ASSERT_EQ(Run({"ls", "--limit", "2", "-o", "json"}), kExitOk);
  EXPECT_EQ(json::parse(out_.str()).size(), 2u);
  ASSERT_EQ(Run({"ls", "-o", "json"}), kExitOk);
  EXPECT_EQ(json::parse(out_.str()).size(), 3u);
}

TEST_F(CsctlTest, PlaintextToARemoteAddressIsRefused) {
  env_.make_stub = MakeControlPlaneStub;
  EXPECT_EQ(Run({"--server", "192.0.2.1:7443", "get", "vm-1"}), kExitUsage);
  EXPECT_TRUE(OneErrorLine()) << err_.str();
  EXPECT_THAT(err_.str(), HasSubstr("--insecure"));
}

TEST_F(CsctlTest, CsdsUnixSocketIsUsedWhenThisUserMayConnectToIt) {
  std::string asked;
  env_.can_connect = [&asked](const std::string& path) {
    asked = path;
    return true;
  };
  ASSERT_EQ(Run({"get", "vm-1"}), kExitRpcError);  // NOT_FOUND from the fake
  EXPECT_EQ(asked, "/run/cosched/csd.sock");
  EXPECT_EQ(settings_.server, "unix:/run/cosched/csd.sock");
  env_.can_connect = [](const std::string&) { return false; };
  Run({"get", "vm-1"});
  EXPECT_EQ(settings_.server, "127.0.0.1:7443");
  env_vars_[kServerEnv] = "127.0.0.2:7443";
  env_.can_connect = [](const std::string&) { return true; };
  Run({"get", "vm-1"});
  EXPECT_EQ(settings_.server, "127.0.0.2:7443");
}

TEST_F(CsctlTest, AUnixSocketTargetIsPlaintextWithoutInsecure) {
  env_.make_stub = MakeControlPlaneStub;
  cosched::testing::TempDir dir;
  const std::string target = "unix:" + dir.Sub("none.sock");
  EXPECT_EQ(Run({"--server", target, "get", "vm-1"}), kExitRpcError);
  EXPECT_THAT(err_.str(), StartsWith("csctl: cannot reach csd at " + target));
}

TEST_F(CsctlTest, UnreachableServer) {
  env_.make_stub = MakeControlPlaneStub;
  const std::string address = testing::UnusedLoopbackAddress();
  EXPECT_EQ(Run({"--server", address, "get", "vm-1"}), kExitRpcError);
  EXPECT_THAT(err_.str(), StartsWith("csctl: cannot reach csd at " + address));
  EXPECT_TRUE(OneErrorLine()) << err_.str();
}

TEST_F(CsctlTest, TimeoutFlagSetsTheDeadline) {
  EXPECT_EQ(Run({"--timeout", "0.05", "hosts", "get", "slow"}), kExitRpcError);
  EXPECT_THAT(err_.str(), HasSubstr("did not answer within 0.05s"));
}

// Hosts as schedulers see them (issue #18 item 4): isolating where csd's
// Place would choose them for an isolated VM.
class HostTraitsTest : public CsctlTest {
 protected:
  void SetUp() override {
    server_.service().PutHost(Host("kvm-01", /*smt=*/true, ""));
    server_.service().PutHost(Host("kvm-02", /*smt=*/true, "unsafe (sched_ext)"));
    server_.service().PutHost(Host("kvm-03", /*smt=*/false, ""));
  }

  static v1::Host Host(const std::string& id, bool smt, const std::string& why_not) {
    v1::Host host;
    host.set_host_id(id);
    host.mutable_capabilities()->set_smt_active(smt);
    host.set_unplaceable_reason(why_not);
    for (int c = 0; c < 4; ++c) {
      v1::Core* core = host.mutable_topology()->add_cores();
      core->add_cpus(c);
      if (smt) core->add_cpus(c + 4);
    }
    return host;
  }
};

TEST_F(HostTraitsTest, OpenstackProviderYamlGivesIsolatingHostsTheTrait) {
  ASSERT_EQ(Run({"hosts", "traits", "-o", "openstack-provider-yaml"}), 0) << err_.str();
  const std::string yaml = out_.str();
  EXPECT_THAT(yaml, HasSubstr("meta:\n  schema_version: '1.0'\n"));
  EXPECT_THAT(yaml, HasSubstr("providers:\n"
                              "  - identification:\n"
                              "      name: 'kvm-01'\n"
                              "    inventories:\n"
                              "      additional:\n"
                              "        - CUSTOM_COSCHED_WHOLE_CORE:\n"
                              "            total: 4\n"
                              "            reserved: 0\n"
                              "            min_unit: 1\n"
                              "            max_unit: 4\n"
                              "            step_size: 1\n"
                              "            allocation_ratio: 1.0\n"
                              "    traits:\n"
                              "      additional:\n"
                              "        - 'CUSTOM_COSCHED_ISOLATING'\n"
                              "        - 'CUSTOM_COSCHED_SMT'\n"));
  EXPECT_THAT(yaml, HasSubstr("# kvm-02: not isolating: unsafe (sched_ext)\n"));
  // Without SMT: isolating, no sibling to share, so no whole-core inventory.
  EXPECT_THAT(yaml, HasSubstr("      name: 'kvm-03'\n"
                              "    traits:\n"
                              "      additional:\n"
                              "        - 'CUSTOM_COSCHED_ISOLATING'\n"));
  EXPECT_EQ(yaml.find("name: 'kvm-02'"), std::string::npos);

  ASSERT_EQ(Run({"hosts", "traits", "--host", "kvm-01", "--compute-node", "-o",
                 "openstack-provider-yaml"}),
            0)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("      uuid: '$COMPUTE_NODE'  # kvm-01\n"));
  ASSERT_EQ(Run({"hosts", "traits", "--host", "kvm-02", "-o", "openstack-provider-yaml"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("providers: []\n"));
}

TEST_F(HostTraitsTest, K8sLabelsAndJson) {
  ASSERT_EQ(Run({"hosts", "traits", "-o", "k8s-labels"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "kvm-01 cosched/isolating=true cosched/smt=true cosched/whole-cores=4\n"
            "kvm-02 cosched/isolating=false cosched/smt=true cosched/whole-cores=4\n"
            "kvm-03 cosched/isolating=true cosched/smt=false cosched/whole-cores=4\n");
  ASSERT_EQ(Run({"hosts", "traits", "-o", "json"}), 0) << err_.str();
  json hosts = json::parse(out_.str());
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[1]["host_id"], "kvm-02");
  EXPECT_EQ(hosts[1]["isolating"], false);
  EXPECT_EQ(hosts[1]["why_not"], "unsafe (sched_ext)");
  EXPECT_EQ(hosts[0]["traits"], json({"CUSTOM_COSCHED_ISOLATING", "CUSTOM_COSCHED_SMT"}));
  EXPECT_EQ(hosts[2]["labels"]["cosched/smt"], "false");
  ASSERT_EQ(Run({"hosts", "traits"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("kvm-02  no         -"));
}

TEST_F(HostTraitsTest, SchedulerFormatsAreForTraitsOnlyAndComputeNodeForOneHost) {
  EXPECT_EQ(Run({"hosts", "ls", "-o", "k8s-labels"}), 2);
  EXPECT_TRUE(OneErrorLine()) << err_.str();
  EXPECT_THAT(err_.str(), HasSubstr("-o k8s-labels is for csctl hosts traits only"));
  EXPECT_EQ(Run({"hosts", "traits", "--compute-node", "-o", "openstack-provider-yaml"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--compute-node is for one host (--host)"));
  EXPECT_EQ(Run({"hosts", "traits", "--host", "kvm-09"}), 1);
  EXPECT_TRUE(OneErrorLine()) << err_.str();
}

}  // namespace
}  // namespace cosched::cli
