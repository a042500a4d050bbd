// The systemd units in deploy/systemd/ keep the hardening the README
// promises, and cs-agent's capabilities are exactly those the lab's
// least-privilege scenario proves sufficient (so neither can drift alone).
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace cosched {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The value of `key=` in a unit file ("" when absent).
std::string UnitValue(const std::string& unit, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(unit, '\n')) {
    if (absl::ConsumePrefix(&line, key + "=")) return std::string(line);
  }
  return "";
}

TEST(SystemdUnits, AgentKeepsOnlyTheCapabilitiesTheLabProves) {
  const std::string unit = Slurp(COSCHED_SOURCE_DIR "/deploy/systemd/cs-agent.service");
  const std::string scenario =
      Slurp(COSCHED_SOURCE_DIR "/tests/lab/scenarios/agent_least_privilege.sh");
  ASSERT_FALSE(unit.empty());
  ASSERT_FALSE(scenario.empty());

  std::set<std::string> unit_caps;
  for (absl::string_view cap :
       absl::StrSplit(UnitValue(unit, "CapabilityBoundingSet"), ' ', absl::SkipEmpty())) {
    unit_caps.insert(absl::AsciiStrToLower(absl::StripPrefix(cap, "CAP_")));
  }
  std::set<std::string> lab_caps;
  for (absl::string_view cap :
       absl::StrSplit(UnitValue(scenario, "UNIT_CAPS"), ',', absl::SkipEmpty())) {
    lab_caps.insert(std::string(absl::StripPrefix(cap, "+")));
  }
  EXPECT_EQ(unit_caps, (std::set<std::string>{"sys_ptrace", "net_admin", "sys_nice"}));
  EXPECT_EQ(unit_caps, lab_caps);

  EXPECT_EQ(UnitValue(unit, "NoNewPrivileges"), "yes");
  EXPECT_EQ(UnitValue(unit, "ProtectSystem"), "strict");
  EXPECT_EQ(UnitValue(unit, "AmbientCapabilities"), "");
  EXPECT_EQ(UnitValue(unit, "StateDirectory"), "cs-agent");
  // It writes no cgroup or sysctl file; only its trace instance.
  // ProtectKernelTunables, spelled out so that tracefs stays writable (the
  // unit says why).
  EXPECT_EQ(UnitValue(unit, "ProtectKernelTunables"), "");
  EXPECT_TRUE(absl::StartsWith(UnitValue(unit, "ReadOnlyPaths"), "/sys /proc/sys "))
      << UnitValue(unit, "ReadOnlyPaths");
  EXPECT_EQ(UnitValue(unit, "ProtectControlGroups"), "yes");
  EXPECT_EQ(UnitValue(unit, "ReadWritePaths"), "/sys/kernel/tracing");
}

TEST(SystemdUnits, CsdHasNoCapabilities) {
  const std::string unit = Slurp(COSCHED_SOURCE_DIR "/deploy/systemd/csd.service");
  ASSERT_FALSE(unit.empty());
  EXPECT_TRUE(unit.find("\nCapabilityBoundingSet=\n") != std::string::npos);
  EXPECT_EQ(UnitValue(unit, "NoNewPrivileges"), "yes");
  EXPECT_EQ(UnitValue(unit, "ProtectSystem"), "strict");
  // The Unix socket's directory (ProtectSystem leaves /run read-only), and
  // the system user whose group csd gives the socket.
  EXPECT_EQ(UnitValue(unit, "RuntimeDirectory"), "cosched");
  EXPECT_EQ(UnitValue(unit, "User"), "cosched");
  EXPECT_EQ(UnitValue(unit, "Group"), "cosched");
  const std::string sysusers = Slurp(COSCHED_SOURCE_DIR "/deploy/sysusers.d/cosched.conf");
  EXPECT_NE(sysusers.find("\nu cosched - "), std::string::npos) << sysusers;
}

}  // namespace
}  // namespace cosched
