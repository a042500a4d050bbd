#include "common/config_loader.h"

#include <cstdio>
#include <fstream>

#include "cosched/v1/config.pb.h"
#include "gtest/gtest.h"

namespace cosched {
namespace {

TEST(ParseYamlConfig, LoadsScalarsAndNestedMessages) {
  v1::CsdConfig config;
  absl::Status s = ParseYamlConfig(R"(
listen: 0.0.0.0:7443
data_dir: /var/lib/cosched
insecure: true
changelog_retention: 5000
tls:
  cert_file: /etc/cosched/csd.crt
  key_file: /etc/cosched/csd.key
)", "csd.yaml", &config);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(config.listen(), "0.0.0.0:7443");
  EXPECT_EQ(config.data_dir(), "/var/lib/cosched");
  EXPECT_TRUE(config.insecure());
  EXPECT_EQ(config.changelog_retention(), 5000);
  EXPECT_EQ(config.tls().key_file(), "/etc/cosched/csd.key");
}

TEST(ParseYamlConfig, EmptyDocumentIsEmptyConfig) {
  v1::AgentConfig config;
  EXPECT_TRUE(ParseYamlConfig("", "agent.yaml", &config).ok());
  EXPECT_TRUE(ParseYamlConfig("# only a comment\n", "agent.yaml", &config).ok());
}

TEST(ParseYamlConfig, UnknownKeyNamesKeyFileAndLine) {
  v1::AgentConfig config;
  absl::Status s = ParseYamlConfig("server: a:1\nreport_intervall: 5\n",
                                   "/etc/cosched/agent.yaml", &config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("/etc/cosched/agent.yaml:2"), std::string::npos) << s;
  EXPECT_NE(s.message().find("'report_intervall'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("report_interval_s"), std::string::npos) << s;
  EXPECT_EQ(config.server(), "");  // nothing half-loaded
}

TEST(ParseYamlConfig, AKeyGivenTwiceNamesItAndItsSecondLine) {
  v1::CsdConfig config;
  absl::Status s = ParseYamlConfig(
      "listen: 127.0.0.1:7443\ndata_dir: /d\nlisten: 0.0.0.0:7443\n", "csd.yaml", &config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("csd.yaml:3"), std::string::npos) << s;
  EXPECT_NE(s.message().find("'listen' is given twice"), std::string::npos) << s;
  s = ParseYamlConfig("tls:\n  cert_file: a\n  cert_file: b\n", "csd.yaml", &config);
  EXPECT_NE(s.message().find("'tls.cert_file' is given twice"), std::string::npos) << s;
}

TEST(ParseYamlConfig, UnknownNestedKeyHasPath) {
  v1::CsdConfig config;
  absl::Status s = ParseYamlConfig("tls:\n  cert: x\n", "csd.yaml", &config);
  EXPECT_NE(s.message().find("'tls.cert'"), std::string::npos) << s;
}

TEST(ParseYamlConfig, IllTypedValueNamesKeyAndType) {
  v1::AgentConfig config;
  absl::Status s =
      ParseYamlConfig("report_interval_s: soon\n", "agent.yaml", &config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'report_interval_s' must be an integer"),
            std::string::npos) << s;
  s = ParseYamlConfig("insecure: maybe\n", "agent.yaml", &config);
  EXPECT_NE(s.message().find("true or false"), std::string::npos) << s;
  s = ParseYamlConfig("tls: [1, 2]\n", "agent.yaml", &config);
  EXPECT_NE(s.message().find("'tls' must be a mapping"), std::string::npos) << s;
  s = ParseYamlConfig("server: [a]\n", "agent.yaml", &config);
  EXPECT_NE(s.message().find("single value"), std::string::npos) << s;
}

TEST(ParseYamlConfig, MalformedYamlIsAnErrorWithLine) {
  v1::CsdConfig config;
  absl::Status s = ParseYamlConfig("listen: [unclosed\n", "csd.yaml", &config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("csd.yaml"), std::string::npos);
  EXPECT_NE(s.message().find("not valid YAML"), std::string::npos);
  s = ParseYamlConfig("- a\n- b\n", "csd.yaml", &config);
  EXPECT_NE(s.message().find("mapping"), std::string::npos);
}

TEST(LoadYamlConfigFile, MissingFileIsNotFound) {
  v1::CsdConfig config;
  absl::Status s = LoadYamlConfigFile("/nonexistent/csd.yaml", &config);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/nonexistent/csd.yaml"), std::string::npos);
}

TEST(LoadYamlConfigFile, ReadsAFile) {
  char path[] = "/tmp/cosched-config-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "server: 127.0.0.1:9000\n";
  v1::CsctlConfig config;
  ASSERT_TRUE(LoadYamlConfigFile(path, &config).ok());
  EXPECT_EQ(config.server(), "127.0.0.1:9000");
  std::remove(path);
}

}  // namespace
}  // namespace cosched
