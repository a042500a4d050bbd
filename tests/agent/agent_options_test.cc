// cs-agent.yaml into AgentOptions: defaults, each setting, and bad values
// refused naming the field.
#include <chrono>
#include <fstream>
#include <string>

#include "agent/agent.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::agent {
namespace {

using ::testing::HasSubstr;
using cosched::testing::TempDir;
using namespace std::chrono_literals;

TEST(AgentOptionsTest, FromConfig) {
  v1::AgentConfig config;
  absl::StatusOr<AgentOptions> defaults = AgentOptionsFromConfig(config);
  ASSERT_OK(defaults);
  EXPECT_EQ(defaults->session.server_address, "127.0.0.1:7443");
  EXPECT_EQ(defaults->state_dir, "/var/lib/cs-agent");
  EXPECT_FALSE(defaults->host_id.empty());
  EXPECT_EQ(defaults->session.report_interval, 10s);

  config.set_server("csd.example:7443");
  config.set_host_id("hv-7");
  config.set_state_dir("/tmp/x");
  config.set_report_interval_s(3);
  config.set_insecure(true);
  config.set_sysfs_root("/fake/sys");
  absl::StatusOr<AgentOptions> options = AgentOptionsFromConfig(config);
  ASSERT_OK(options);
  EXPECT_EQ(options->session.server_address, "csd.example:7443");
  EXPECT_EQ(options->host_id, "hv-7");
  EXPECT_EQ(options->state_dir, "/tmp/x");
  EXPECT_EQ(options->session.report_interval, 3s);
  EXPECT_TRUE(options->session.insecure);
  EXPECT_EQ(options->sysfs_root, "/fake/sys");

  config.set_report_interval_s(-1);
  absl::StatusOr<AgentOptions> bad = AgentOptionsFromConfig(config);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("report_interval_s"));
}

TEST(AgentOptionsTest, VmmRuleAndReportFailuresFromConfig) {
  v1::AgentConfig config;
  config.set_known_bad_file("off");
  absl::StatusOr<AgentOptions> defaults = AgentOptionsFromConfig(config);
  ASSERT_OK(defaults);
  EXPECT_EQ(defaults->vmm.binaries, discovery::VmmRule::DefaultBinaries());
  EXPECT_EQ(defaults->vmm.uids.front(), 0u);  // root, and libvirt-qemu where it exists
  EXPECT_EQ(defaults->session.report_failures_before_moving, 3);

  config.add_vmm_binaries("/opt/qemu/bin/qemu-system-*");
  config.add_vmm_users("root");
  config.add_vmm_users("4242");
  config.set_report_failures_before_moving(5);
  absl::StatusOr<AgentOptions> options = AgentOptionsFromConfig(config);
  ASSERT_OK(options);
  EXPECT_EQ(options->vmm.binaries, std::vector<std::string>{"/opt/qemu/bin/qemu-system-*"});
  EXPECT_EQ(options->vmm.uids, (std::vector<uint32_t>{0, 4242}));
  EXPECT_EQ(options->session.report_failures_before_moving, 5);

  config.add_vmm_users("no-such-user-here");
  absl::StatusOr<AgentOptions> bad = AgentOptionsFromConfig(config);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("vmm_users: user 'no-such-user-here'"));
  config.clear_vmm_users();
  config.add_vmm_binaries("qemu-system-x86_64");
  bad = AgentOptionsFromConfig(config);
  EXPECT_THAT(bad.status().message(), HasSubstr("vmm_binaries[1] 'qemu-system-x86_64' must be an absolute"));
  config.clear_vmm_binaries();
  config.set_report_failures_before_moving(101);
  bad = AgentOptionsFromConfig(config);
  EXPECT_THAT(bad.status().message(), HasSubstr("report_failures_before_moving must be between 1 and 100"));
}

TEST(AgentOptionsTest, KnownBadListFromConfig) {
  TempDir dir;
  v1::AgentConfig config;
  // A list the operator names must exist.
  config.set_known_bad_file(dir.Sub("missing.yaml"));
  absl::StatusOr<AgentOptions> missing = AgentOptionsFromConfig(config);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("known_bad_file"));

  const std::string list = dir.Sub("known-bad.yaml");
  std::ofstream(list) << "entries:\n  - id: old\n    kernel_before: \"5.0\"\n"
                         "    reason: too old\n";
  config.set_known_bad_file(list);
  absl::StatusOr<AgentOptions> loaded = AgentOptionsFromConfig(config);
  ASSERT_OK(loaded);
  ASSERT_EQ(loaded->known_bad.size(), 1u);
  EXPECT_EQ(loaded->known_bad[0].id(), "old");

  std::ofstream(list) << "entries:\n  - id: old\n    reason: covers everything\n";
  absl::StatusOr<AgentOptions> bad = AgentOptionsFromConfig(config);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("known_bad_file: " + list + ":2: entries[0]"));

  config.set_known_bad_file("off");
  absl::StatusOr<AgentOptions> off = AgentOptionsFromConfig(config);
  ASSERT_OK(off);
  EXPECT_TRUE(off->known_bad.empty());
}

TEST(AgentOptionsTest, OnHazardFromConfig) {
  v1::AgentConfig config;
  config.set_known_bad_file("off");
  absl::StatusOr<AgentOptions> hold = AgentOptionsFromConfig(config);
  ASSERT_OK(hold);
  EXPECT_FALSE(hold->reconciler.clear_on_hazard);
  config.set_on_hazard("clear");
  absl::StatusOr<AgentOptions> clear = AgentOptionsFromConfig(config);
  ASSERT_OK(clear);
  EXPECT_TRUE(clear->reconciler.clear_on_hazard);
  config.set_on_hazard("wipe");
  absl::StatusOr<AgentOptions> bad = AgentOptionsFromConfig(config);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("on_hazard 'wipe' must be hold"));
}

TEST(AgentOptionsTest, EnforceFromConfig) {
  v1::AgentConfig config;
  config.set_known_bad_file("off");
  absl::StatusOr<AgentOptions> on = AgentOptionsFromConfig(config);
  ASSERT_OK(on);
  EXPECT_FALSE(on->reconciler.observe);
  config.set_enforce("observe");
  absl::StatusOr<AgentOptions> observe = AgentOptionsFromConfig(config);
  ASSERT_OK(observe);
  EXPECT_TRUE(observe->reconciler.observe);
  config.set_enforce("off");
  absl::StatusOr<AgentOptions> bad = AgentOptionsFromConfig(config);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("enforce 'off' must be on"));
}

TEST(AgentOptionsTest, LabelsFromConfigAreChecked) {
  v1::AgentConfig config;
  config.set_known_bad_file("off");
  (*config.mutable_labels())["zone"] = "a";
  absl::StatusOr<AgentOptions> options = AgentOptionsFromConfig(config);
  ASSERT_OK(options);
  EXPECT_EQ(options->labels, (std::map<std::string, std::string>{{"zone", "a"}}));
  (*config.mutable_labels())["rack"] = "r 12";
  absl::StatusOr<AgentOptions> bad = AgentOptionsFromConfig(config);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("labels.rack 'r 12' may hold only"));
}

TEST(AgentOptionsTest, TelemetryFromConfig) {
  v1::AgentConfig config;
  absl::StatusOr<AgentOptions> defaults = AgentOptionsFromConfig(config);
  ASSERT_OK(defaults);
  EXPECT_FALSE(defaults->telemetry);
  EXPECT_EQ(defaults->collector.trace.buffer_size_kb, 1024);
  EXPECT_EQ(defaults->collector.poll_interval, 500ms);
  EXPECT_EQ(defaults->collector.trace.subbuf_size_kb, 16);
  EXPECT_FALSE(defaults->collector.enable_schedstats);

  config.mutable_telemetry()->set_enabled(true);
  config.mutable_telemetry()->set_buffer_size_kb(4096);
  config.mutable_telemetry()->set_enable_schedstats(true);
  config.mutable_telemetry()->set_poll_interval_ms(50);
  absl::StatusOr<AgentOptions> options = AgentOptionsFromConfig(config);
  ASSERT_OK(options);
  EXPECT_TRUE(options->telemetry);
  EXPECT_EQ(options->collector.trace.buffer_size_kb, 4096);
  EXPECT_TRUE(options->collector.enable_schedstats);
  EXPECT_EQ(options->collector.poll_interval, 50ms);

  config.mutable_telemetry()->set_buffer_size_kb(-1);
  absl::StatusOr<AgentOptions> bad = AgentOptionsFromConfig(config);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("telemetry.buffer_size_kb"));
  config.mutable_telemetry()->set_buffer_size_kb(0);
  config.mutable_telemetry()->set_poll_interval_ms(-5);
  bad = AgentOptionsFromConfig(config);
  EXPECT_THAT(bad.status().message(), HasSubstr("telemetry.poll_interval_ms"));
}

}  // namespace
}  // namespace cosched::agent
