#include "common/config_loader.h"

#include <cstdio>
#include <fstream>
#include <memory>

#include "cosched/v1/config.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

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
  ASSERT_OK(s);
  EXPECT_EQ(config.listen(), "0.0.0.0:7443");
  EXPECT_EQ(config.data_dir(), "/var/lib/cosched");
  EXPECT_TRUE(config.insecure());
  EXPECT_EQ(config.changelog_retention(), 5000);
  EXPECT_EQ(config.tls().key_file(), "/etc/cosched/csd.key");
}

TEST(ParseYamlConfig, EmptyDocumentIsEmptyConfig) {
  v1::AgentConfig config;
  EXPECT_OK(ParseYamlConfig("", "agent.yaml", &config));
  EXPECT_OK(ParseYamlConfig("# only a comment\n", "agent.yaml", &config));
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

TEST(ParseYamlConfig, AMapFieldTakesAMappingAndRefusesAnythingElse) {
  v1::AgentConfig config;
  ASSERT_OK(ParseYamlConfig("labels:\n  zone: a\n  rack: \"12\"\n", "agent.yaml", &config));
  ASSERT_EQ(config.labels().size(), 2u);
  EXPECT_EQ(config.labels().at("zone"), "a");
  EXPECT_EQ(config.labels().at("rack"), "12");
  absl::Status s = ParseYamlConfig("labels: [a, b]\n", "agent.yaml", &config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'labels' must be a mapping"), std::string::npos) << s;
  s = ParseYamlConfig("labels:\n  zone: a\n  zone: b\n", "agent.yaml", &config);
  EXPECT_NE(s.message().find("agent.yaml:3"), std::string::npos) << s;
  EXPECT_NE(s.message().find("'labels.zone' is given twice"), std::string::npos) << s;
  s = ParseYamlConfig("labels:\n  zone: [a]\n", "agent.yaml", &config);
  EXPECT_NE(s.message().find("'labels.zone' must be a single value"), std::string::npos) << s;
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
  ASSERT_OK(LoadYamlConfigFile(path, &config));
  EXPECT_EQ(config.server(), "127.0.0.1:9000");
  std::remove(path);
}

TEST(ConfigLocations, AnErrorFoundAfterLoadingNamesTheLineOfItsKey) {
  ConfigLocations where;
  ASSERT_TRUE(ParseYamlConfig("listen: 127.0.0.1:1\n"
                              "tls:\n"
                              "  key_file: /k\n"
                              "roles:\n"
                              "  - role: viewer\n"
                              "  - role: god\n"
                              "    spiffe_ids: [spiffe://x/y]\n",
                              "csd.yaml", std::make_unique<v1::CsdConfig>().get(), &where)
                  .ok());
  EXPECT_EQ(where.Locate("plain message"), "plain message");
  EXPECT_EQ(where.Locate("listen 'x' is bad"), "csd.yaml:1: listen 'x' is bad");
  EXPECT_EQ(where.Locate("roles[1].role 'god' is not a role"),
            "csd.yaml:6: roles[1].role 'god' is not a role");
  // A field the file does not set: its nearest enclosing key.
  EXPECT_EQ(where.Locate("tls.cert_file must be set"), "csd.yaml:2: tls.cert_file must be set");
  EXPECT_EQ(where.Locate("roles[1].common_names has an empty entry"),
            "csd.yaml:6: roles[1].common_names has an empty entry");
  // Not in the file at all (a default): unchanged.
  EXPECT_EQ(where.Locate("changelog_retention must be at least 1"),
            "changelog_retention must be at least 1");
  // Set by a flag: the file's line would be the wrong place.
  where.Forget("listen");
  EXPECT_EQ(where.Locate("listen 'x' is bad"), "listen 'x' is bad");
}

TEST(ConfigLocations, AFileThatFailsToLoadLeavesNoLocations) {
  ConfigLocations where;
  v1::CsdConfig config;
  EXPECT_FALSE(ParseYamlConfig("listen: a\nbogus: 1\n", "csd.yaml", &config, &where).ok());
  EXPECT_EQ(where.Locate("listen 'a' is bad"), "listen 'a' is bad");
}

}  // namespace
}  // namespace cosched
