#include "cli/server_address.h"

#include <fstream>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace cosched::cli {
namespace {

TEST(ResolveServerAddressTest, FlagThenEnvThenConfigThenDefault) {
  EXPECT_EQ(ResolveServerAddress("flag:1", "env:2", "config:3"), "flag:1");
  EXPECT_EQ(ResolveServerAddress("", "env:2", "config:3"), "env:2");
  EXPECT_EQ(ResolveServerAddress("", "", "config:3"), "config:3");
  EXPECT_EQ(ResolveServerAddress("", "", ""), "127.0.0.1:7443");
}

// On csd's host the Unix socket tells csd who calls; anything the user
// named still wins.
TEST(ResolveServerAddressTest, CsdsUnixSocketIsTheDefaultWhenThisUserMayUseIt) {
  EXPECT_EQ(ResolveServerAddress("", "", "", true), "unix:/run/cosched/csd.sock");
  EXPECT_EQ(ResolveServerAddress("", "", "config:3", true), "config:3");
  EXPECT_EQ(ResolveServerAddress("", "env:2", "", true), "env:2");
  EXPECT_EQ(ResolveServerAddress("flag:1", "", "", true), "flag:1");
  EXPECT_EQ(ResolveServerAddress("", "", "", false), "127.0.0.1:7443");
  EXPECT_EQ(ResolveConnectionSettings({}, "", v1::CsctlConfig(), true).server,
            "unix:/run/cosched/csd.sock");
}

TEST(ResolveConfigPathTest, FlagThenEnvThenDefaultWhenItExists) {
  EXPECT_EQ(ResolveConfigPath("/a.yaml", "/b.yaml", true), "/a.yaml");
  EXPECT_EQ(ResolveConfigPath("", "/b.yaml", true), "/b.yaml");
  EXPECT_EQ(ResolveConfigPath("", "", true), "/etc/cosched/csctl.yaml");
  EXPECT_EQ(ResolveConfigPath("", "", false), std::nullopt);
}

TEST(ExpandHomeInPathsTest, ALeadingTildeSlashIsHome) {
  v1::CsctlConfig config;
  config.mutable_tls()->set_ca_file("/etc/cosched/tls/ca.crt");
  config.mutable_tls()->set_cert_file("~/.config/cosched/operator.crt");
  config.mutable_tls()->set_key_file("~/.config/cosched/operator.key");
  config.set_token_file("~alice/token");  // not ~/: left as it is
  v1::CsctlConfig unchanged = config;
  ExpandHomeInPaths("", &unchanged);
  EXPECT_EQ(unchanged.tls().cert_file(), "~/.config/cosched/operator.crt");
  ExpandHomeInPaths("/home/op", &config);
  EXPECT_EQ(config.tls().ca_file(), "/etc/cosched/tls/ca.crt");
  EXPECT_EQ(config.tls().cert_file(), "/home/op/.config/cosched/operator.crt");
  EXPECT_EQ(config.tls().key_file(), "/home/op/.config/cosched/operator.key");
  EXPECT_EQ(config.token_file(), "~alice/token");
}

TEST(ResolveConnectionSettingsTest, FlagsOverrideConfigFieldByField) {
  v1::CsctlConfig config;
  config.set_server("config:3");
  config.mutable_tls()->set_ca_file("/config/ca.pem");
  config.mutable_tls()->set_cert_file("/config/cert.pem");
  config.mutable_tls()->set_key_file("/config/key.pem");

  ConnectionSettings from_config = ResolveConnectionSettings({}, "", config);
  EXPECT_EQ(from_config.server, "config:3");
  EXPECT_EQ(from_config.tls.ca_file(), "/config/ca.pem");
  EXPECT_FALSE(from_config.insecure);

  ConnectionSettings mixed = ResolveConnectionSettings(
      {.ca_file = "/flag/ca.pem"}, "env:2", config);
  EXPECT_EQ(mixed.server, "env:2");
  EXPECT_EQ(mixed.tls.ca_file(), "/flag/ca.pem");
  EXPECT_EQ(mixed.tls.cert_file(), "/config/cert.pem");
  EXPECT_EQ(mixed.tls.key_file(), "/config/key.pem");

  config.set_insecure(true);
  EXPECT_TRUE(ResolveConnectionSettings({}, "", config).insecure);
  EXPECT_TRUE(
      ResolveConnectionSettings({.insecure = true}, "", v1::CsctlConfig())
          .insecure);
}

class ResolveBearerTokenTest : public ::testing::Test {
 protected:
  std::string File(const std::string& name, const std::string& text) {
    std::ofstream(dir_.Sub(name)) << text;
    return dir_.Sub(name);
  }
  ConnectionSettings Loopback() {
    ConnectionSettings s;
    s.server = "127.0.0.1:7443";
    return s;
  }

  cosched::testing::TempDir dir_;
  v1::CsctlConfig config_;
};

TEST_F(ResolveBearerTokenTest, FlagThenFlagFileThenEnvThenConfigFile) {
  config_.set_token_file(File("config-token", "from-config\n"));
  std::string flag_file = File("flag-token", "from-file\nsecond line\n");
  EXPECT_EQ(*ResolveBearerToken("from-flag", flag_file, "from-env", config_, Loopback()),
            "from-flag");
  EXPECT_EQ(*ResolveBearerToken("", flag_file, "from-env", config_, Loopback()),
            "from-file");
  EXPECT_EQ(*ResolveBearerToken("", "", "from-env", config_, Loopback()), "from-env");
  EXPECT_EQ(*ResolveBearerToken("", "", "", config_, Loopback()), "from-config");
  EXPECT_EQ(*ResolveBearerToken("", "", "", v1::CsctlConfig(), Loopback()), "");
}

TEST_F(ResolveBearerTokenTest, UnreadableOrEmptyFileIsNamed) {
  auto missing = ResolveBearerToken("", dir_.Sub("nope"), "", config_, Loopback());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("--token-file"), std::string::npos);
  config_.set_token_file(File("empty", "\n"));
  auto empty = ResolveBearerToken("", "", "", config_, Loopback());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(empty.status().message().find("is empty"), std::string::npos);
}

TEST_F(ResolveBearerTokenTest, NeverInPlaintextOffLoopback) {
  ConnectionSettings remote;
  remote.server = "csd.example.com:7443";
  remote.insecure = true;
  auto refused = ResolveBearerToken("t", "", "", config_, remote);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  remote.tls.set_ca_file("/etc/cosched/ca.crt");
  EXPECT_EQ(*ResolveBearerToken("t", "", "", config_, remote), "t");
  // A Unix socket never leaves the host.
  ConnectionSettings local;
  local.server = "unix:/run/cosched/csd.sock";
  EXPECT_EQ(*ResolveBearerToken("t", "", "", config_, local), "t");
}

}  // namespace
}  // namespace cosched::cli
