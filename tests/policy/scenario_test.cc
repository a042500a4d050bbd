#include "policy/scenario.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::policy {
namespace {

using ::testing::HasSubstr;

constexpr char kMinimal[] = R"(
name: two
seed: 7
duration_s: 2
host: {cores: 4, threads_per_core: 2}
vms:
  - name: web
    count: 2
    vcpus: 2
    tenant: per-vm
    classes: [latency-critical, avx512, avx512]
    workload: {kind: interactive, think_ms: 1, work_ms: 0.5}
    pin: {cores: "0-1"}
  - name: batch
    vcpus: 1
    tenant: acme
    workload: {kind: avx, util: 0.5}
    measure: false
    coupled: false
)";

TEST(ParseScenarioYaml, ReadsTheMinimumKeys) {
  auto s = ParseScenarioYaml(kMinimal);
  ASSERT_OK(s);
  EXPECT_EQ(s->name, "two");
  EXPECT_EQ(s->seed, 7u);
  EXPECT_EQ(s->cores, 4);
  ASSERT_EQ(s->vms.size(), 2u);
  EXPECT_EQ(s->vms[0].classes, (std::vector<std::string>{"avx512", "latency-critical"}));
  EXPECT_EQ(s->vms[0].pin_cpus, (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(s->vms[0].workload.kind, WorkloadKind::kInteractive);
  EXPECT_DOUBLE_EQ(s->vms[0].workload.work_ms, 0.5);
  EXPECT_FALSE(s->vms[1].measure);
  EXPECT_TRUE(s->vms[0].coupled);
  EXPECT_FALSE(s->vms[1].coupled);
  EXPECT_DOUBLE_EQ(s->vms[1].workload.DeclaredLoad(), 0.5);
}

TEST(ExpandInstances, NamesCountsAndGivesPerVmTenants) {
  auto s = ParseScenarioYaml(kMinimal);
  ASSERT_OK(s);
  auto vms = ExpandInstances(*s);
  ASSERT_EQ(vms.size(), 3u);
  EXPECT_EQ(vms[0].name, "web-0");
  EXPECT_EQ(vms[0].tenant, "web-0");
  EXPECT_EQ(vms[1].tenant, "web-1");
  EXPECT_EQ(vms[2].name, "batch");
  EXPECT_EQ(vms[2].tenant, "acme");
  EXPECT_FALSE(vms[2].coupled);
}

std::string Error(const std::string& yaml) {
  auto s = ParseScenarioYaml(yaml);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.status().message());
}

std::string With(const std::string& from, const std::string& to) {
  std::string yaml = kMinimal;
  size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return yaml.replace(at, from.size(), to);
}

TEST(ParseScenarioYaml, ErrorsNameTheKeyAndTheRule) {
  EXPECT_THAT(Error(With("util: 0.5", "util: 1.5")),
              HasSubstr("vms[1].workload.util must be a number in (0, 1]"));
  EXPECT_THAT(Error(With("seed: 7", "seeds: 7")),
              HasSubstr("seeds is not a known key"));
  EXPECT_THAT(Error(With("kind: avx", "kind: gpu")),
              HasSubstr("vms[1].workload.kind must be one of cpu, periodic"));
  EXPECT_THAT(Error(With("think_ms: 1", "period_ms: 1")),
              HasSubstr("vms[0].workload.period_ms is not a known key"));
  EXPECT_THAT(Error(With("cores: \"0-1\"", "cores: \"0-9\"")),
              HasSubstr("vms[0].pin.cores names 4, but the host has 4 cores"));
  EXPECT_THAT(Error(With("threads_per_core: 2", "threads_per_core: 4")),
              HasSubstr("host.threads_per_core must be an integer in [2, 2]"));
  EXPECT_THAT(Error(With("name: batch", "name: web-1")),
              HasSubstr("give two VMs the name 'web-1'"));
  EXPECT_THAT(Error("name: x\nseed: 1\nduration_s: 1\nhost: {cores: 1}\n"),
              HasSubstr("vms is required"));
  EXPECT_THAT(Error("name: [x"), HasSubstr("not valid YAML"));
  EXPECT_THAT(Error(With("tenant: acme", "tenant: \"a b\"")),
              HasSubstr("vms[1].tenant"));
}

TEST(ParseScenarioYaml, TenantsAreValidatedAsPolicies) {
  std::string yaml = std::string(kMinimal) +
                     "tenants:\n  - {name: acme, isolation: tenant, allow: [vm]}\n";
  EXPECT_THAT(Error(yaml), HasSubstr("tenants[0]: policy.default_isolation 'tenant' "
                                     "must be one of policy.allowed_isolation"));
  yaml = std::string(kMinimal) +
         "tenants:\n  - {name: acme, isolation: vm, allow: [vm, tenant],"
         " forced_idle_budget_pct: 5}\nconflicts: [[avx512, latency-critical]]\n";
  auto s = ParseScenarioYaml(yaml);
  ASSERT_OK(s);
  ASSERT_EQ(s->tenants.size(), 1u);
  EXPECT_EQ(*s->tenants[0].forced_idle_budget_pct, 5);
  ASSERT_EQ(s->conflicts.size(), 1u);
  EXPECT_EQ(s->conflicts[0].first, "avx512");
}

TEST(ParseCpuList, RangesAndErrors) {
  auto cpus = ParseCpuList("pin", "0-2,8,5-5");
  ASSERT_OK(cpus);
  EXPECT_EQ(*cpus, (std::vector<int>{0, 1, 2, 5, 8}));
  EXPECT_FALSE(ParseCpuList("pin", "3-1").ok());
  EXPECT_FALSE(ParseCpuList("pin", "a").ok());
  EXPECT_FALSE(ParseCpuList("pin", "").ok());
}

}  // namespace
}  // namespace cosched::policy
