// csd and cs-agent, run as an operator runs them, with a config file whose
// values are wrong: they must exit 2 (a usage error, like a bad key) with
// one line naming the file, the line and the rule, and start nothing.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace cosched {
namespace {

struct Exit {
  int code = -1;
  std::string output;
};

// Runs `command` with stderr captured; a daemon that starts anyway is
// stopped by `timeout` (exit 124).
Exit RunCommand(const std::string& command) {
  FILE* out = popen(("timeout 20 " + command + " 2>&1").c_str(), "r");
  if (out == nullptr) return {};
  Exit exit;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, out)) > 0;) exit.output.append(buf, n);
  const int status = pclose(out);
  if (WIFEXITED(status)) exit.code = WEXITSTATUS(status);
  return exit;
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
  ExpectUsageError(RunCommand(std::string(CSD_BINARY) + " --config " + config),
                   "csd: " + config + ":5: roles[0].role 'superuser' is not a role");
  EXPECT_FALSE(std::ifstream(data + "/cosched.db").good()) << "csd opened its store";
}

TEST_F(DaemonConfigTest, CsdFlagValuesAreNotBlamedOnTheFile) {
  const std::string config = Write("csd.yaml", "listen: 127.0.0.1:0\n"
                                               "audit_retention_days: -7\n");
  const std::string csd = std::string(CSD_BINARY) + " --config " + config +
                          " --metrics-listen off --data-dir " + dir_.Sub("data");
  ExpectUsageError(RunCommand(csd + " --listen 127.0.0.1:99999"),
                   "csd: listen '127.0.0.1:99999'");
  ExpectUsageError(RunCommand(csd),
                   "csd: " + config + ":2: audit_retention_days must be -1");
}

TEST_F(DaemonConfigTest, CsAgentNamesTheLineOfABadValueAndExits2) {
  const std::string config = Write("agent.yaml",
                                   "server: 127.0.0.1:1\n"
                                   "host_id: hv-1\n"
                                   "telemetry:\n"
                                   "  enabled: true\n"
                                   "  poll_interval_ms: -5\n");
  ExpectUsageError(RunCommand(std::string(CS_AGENT_BINARY) + " --config " + config),
                   "cs-agent: " + config +
                       ":5: telemetry.poll_interval_ms must be positive, got -5");
}

}  // namespace
}  // namespace cosched
