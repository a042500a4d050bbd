// The example configs in deploy/config/ load with the real loader, so they
// cannot drift from the schema.
#include "common/config_loader.h"
#include "cosched/v1/config.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

const std::string kConfigDir = COSCHED_DEPLOY_CONFIG_DIR;

TEST(ExampleConfigs, CsdLoads) {
  v1::CsdConfig config;
  absl::Status s = LoadYamlConfigFile(kConfigDir + "/csd.yaml", &config);
  ASSERT_OK(s);
  EXPECT_EQ(config.listen(), "127.0.0.1:7443");
  EXPECT_EQ(config.trust_domain(), "cosched");
  EXPECT_EQ(config.plaintext_role(), "viewer");
  EXPECT_FALSE(config.plaintext_agents());
  ASSERT_EQ(config.roles_size(), 3);
  EXPECT_EQ(config.roles(0).role(), "admin");
  EXPECT_EQ(config.roles(0).common_names(0), "platform-admin");
  EXPECT_EQ(config.roles(1).spiffe_ids(0), "spiffe://cosched/user/scheduler");
  EXPECT_EQ(config.metrics_listen(), "127.0.0.1:9465");
}

TEST(ExampleConfigs, AgentLoads) {
  v1::AgentConfig config;
  absl::Status s = LoadYamlConfigFile(kConfigDir + "/cs-agent.yaml", &config);
  ASSERT_OK(s);
  EXPECT_EQ(config.report_interval_s(), 10);
  EXPECT_TRUE(config.telemetry().enabled());
  EXPECT_EQ(config.telemetry().buffer_size_kb(), 1024);
  EXPECT_EQ(config.metrics_listen(), "127.0.0.1:9464");
  // No csd named: the packaged agent does not start until an operator
  // sets one (issue #33: a first install changes no cookie).
  EXPECT_EQ(config.server(), "");
}

TEST(ExampleConfigs, CsctlLoads) {
  v1::CsctlConfig config;
  absl::Status s = LoadYamlConfigFile(kConfigDir + "/csctl.yaml", &config);
  ASSERT_OK(s);
  // Unset: csctl chooses csd's Unix socket on csd's host.
  EXPECT_EQ(config.server(), "");
}

}  // namespace
}  // namespace cosched
