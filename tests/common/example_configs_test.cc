// The example configs in deploy/config/ load with the real loader, so they
// cannot drift from the schema.
#include "common/config_loader.h"
#include "cosched/v1/config.pb.h"
#include "gtest/gtest.h"

namespace cosched {
namespace {

const std::string kConfigDir = COSCHED_DEPLOY_CONFIG_DIR;

TEST(ExampleConfigs, CsdLoads) {
  v1::CsdConfig config;
  absl::Status s = LoadYamlConfigFile(kConfigDir + "/csd.yaml", &config);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(config.listen(), "127.0.0.1:7443");
  EXPECT_EQ(config.metrics_listen(), "127.0.0.1:9465");
}

TEST(ExampleConfigs, AgentLoads) {
  v1::AgentConfig config;
  absl::Status s = LoadYamlConfigFile(kConfigDir + "/cs-agent.yaml", &config);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(config.report_interval_s(), 10);
  EXPECT_EQ(config.metrics_listen(), "127.0.0.1:9464");
}

TEST(ExampleConfigs, CsctlLoads) {
  v1::CsctlConfig config;
  absl::Status s = LoadYamlConfigFile(kConfigDir + "/csctl.yaml", &config);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(config.server(), "127.0.0.1:7443");
}

}  // namespace
}  // namespace cosched
