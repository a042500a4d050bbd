#include "cli/server_address.h"

#include "gtest/gtest.h"

namespace cosched::cli {
namespace {

TEST(ResolveServerAddressTest, FlagThenEnvThenConfigThenDefault) {
  EXPECT_EQ(ResolveServerAddress("flag:1", "env:2", "config:3"), "flag:1");
  EXPECT_EQ(ResolveServerAddress("", "env:2", "config:3"), "env:2");
  EXPECT_EQ(ResolveServerAddress("", "", "config:3"), "config:3");
  EXPECT_EQ(ResolveServerAddress("", "", ""), "127.0.0.1:7443");
}

TEST(ResolveConfigPathTest, FlagThenEnvThenDefaultWhenItExists) {
  EXPECT_EQ(ResolveConfigPath("/a.yaml", "/b.yaml", true), "/a.yaml");
  EXPECT_EQ(ResolveConfigPath("", "/b.yaml", true), "/b.yaml");
  EXPECT_EQ(ResolveConfigPath("", "", true), "/etc/cosched/csctl.yaml");
  EXPECT_EQ(ResolveConfigPath("", "", false), std::nullopt);
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

}  // namespace
}  // namespace cosched::cli
