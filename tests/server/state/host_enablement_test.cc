#include "server/state/host_enablement.h"

#include <string>
#include <vector>

#include "google/protobuf/util/json_util.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/state_testing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::HostPreflight WithVulnerabilities(
    std::initializer_list<std::pair<const char*, bool>> affected) {
  v1::HostPreflight p;
  for (const auto& [name, is_affected] : affected) {
    v1::CpuVulnerability* v = p.add_vulnerabilities();
    v->set_name(name);
    v->set_status(is_affected ? "Mitigation: Clear CPU buffers; SMT vulnerable" : "Not affected");
    v->set_affected(is_affected);
    v->set_smt_relevant(std::string(name) != "spectre_v2");
  }
  return p;
}

EnforcePolicy WhenVulnerable(std::vector<std::string> files) {
  absl::StatusOr<EnforcePolicy> policy = ParseEnforcePolicy("when-vulnerable", files);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *policy : EnforcePolicy{};
}

TEST(EnforcePolicyTest, ParsesTheTwoModesAndTheOperatorsList) {
  EXPECT_FALSE(ParseEnforcePolicy("", {})->when_vulnerable);
  EXPECT_FALSE(ParseEnforcePolicy("always", {})->when_vulnerable);
  absl::StatusOr<EnforcePolicy> listed =
      ParseEnforcePolicy("when-vulnerable", {"mds", "l1tf", "mmio_stale_data"});
  ASSERT_OK(listed);
  EXPECT_TRUE(listed->when_vulnerable);
  EXPECT_EQ(listed->files, (std::vector<std::string>{"l1tf", "mds", "mmio_stale_data"}));
}

TEST(EnforcePolicyTest, RefusesWhatWouldClaimSafetyOrMeansNothingNamingTheField) {
  auto refused = [](absl::string_view enforce, std::vector<std::string> files,
                    absl::string_view rule) {
    absl::StatusOr<EnforcePolicy> policy = ParseEnforcePolicy(enforce, files);
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument) << rule;
    EXPECT_THAT(policy.status().message(), HasSubstr(rule));
  };
  refused("sometimes", {}, "enforce 'sometimes' must be always (the default) or when-vulnerable");
  // No list assumed: which files count is the operator's decision.
  refused("when-vulnerable", {}, "enforce: when-vulnerable needs when_vulnerable");
  refused("always", {"l1tf"}, "when_vulnerable is read only with enforce: when-vulnerable");
  refused("when-vulnerable", {"l1tf", "../mds"},
          "when_vulnerable[1] '../mds' must be a file name of /sys/devices/system/cpu/vulnerabilities");
  refused("when-vulnerable", {"L1TF"}, "when_vulnerable[0] 'L1TF' must be a file name");
  refused("when-vulnerable", {"mds", "mds"}, "when_vulnerable[1] 'mds' is listed twice");
  refused("when-vulnerable", std::vector<std::string>(kMaxWhenVulnerableFiles + 1, "x"),
          "when_vulnerable must have at most 32 entries");
}

TEST(HostEnablementTest, AlwaysEnforcesEvenWhereNothingIsReportedAffected) {
  const v1::HostPreflight p = WithVulnerabilities({{"l1tf", false}, {"mds", false}});
  EXPECT_EQ(EnablementOf(p, EnforcePolicy{}).state(), v1::HostEnablement::STATE_ENFORCE);
}

TEST(HostEnablementTest, WhenVulnerableWaivesOnlyHostsClearOfEveryListedFile) {
  const EnforcePolicy policy = WhenVulnerable({"l1tf", "mds", "tsx_async_abort"});
  const v1::HostPreflight clear =
      WithVulnerabilities({{"l1tf", false}, {"mds", false}, {"spectre_v2", true},
                           {"tsx_async_abort", false}, {"mmio_stale_data", true}});
  // mmio_stale_data is affected but not on the operator's list: it does not
  // count, by the operator's decision.
  v1::HostEnablement e = EnablementOf(clear, policy);
  EXPECT_EQ(e.state(), v1::HostEnablement::STATE_WAIVED);
  // The reason names the files and the residual risk; it never says the
  // siblings leak nothing.
  EXPECT_THAT(e.reason(), HasSubstr("not affected by l1tf, mds, tsx_async_abort"));
  EXPECT_THAT(e.reason(), HasSubstr("timing channels no vulnerability file reports"));
  EXPECT_THAT(e.reason(), Not(HasSubstr("leak nothing")));

  // A listed file affected: enforce.
  EXPECT_EQ(EnablementOf(WithVulnerabilities({{"l1tf", false}, {"mds", true},
                                              {"tsx_async_abort", false}}),
                         policy)
                .state(),
            v1::HostEnablement::STATE_ENFORCE);
  // A host that cannot say: no vulnerabilities at all, or a listed file
  // missing (an older kernel, an unreadable file).
  EXPECT_EQ(EnablementOf(v1::HostPreflight(), policy).state(), v1::HostEnablement::STATE_ENFORCE);
  EXPECT_EQ(EnablementOf(WithVulnerabilities({{"l1tf", false}, {"mds", false}}), policy).state(),
            v1::HostEnablement::STATE_ENFORCE);
  // The operator's list decides, not csd's idea of SMT relevance: a list
  // of one file waives a host clear of it.
  EXPECT_EQ(EnablementOf(WithVulnerabilities({{"l1tf", false}, {"mds", true}}),
                         WhenVulnerable({"l1tf"}))
                .state(),
            v1::HostEnablement::STATE_WAIVED);
}

TEST(HostEnablementTest, TheOldNamesAreAliasesThatPrintAsTheNew) {
  EXPECT_EQ(v1::HostEnablement::STATE_NOT_NEEDED, v1::HostEnablement::STATE_WAIVED);
  EXPECT_EQ(v1::HostEnablement::State_Name(v1::HostEnablement::STATE_WAIVED), "STATE_WAIVED");
  EXPECT_EQ(v1::EnforcementState_Name(v1::ENFORCEMENT_STATE_WAIVED), "ENFORCEMENT_STATE_WAIVED");
  v1::HostEnablement parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(R"({"state": "STATE_NOT_NEEDED"})",
                                                          &parsed)
                  .ok());
  EXPECT_EQ(parsed.state(), v1::HostEnablement::STATE_WAIVED);
}

// A host with SMT on whose kernel cannot do core scheduling, and whose CPUs
// report not affected by l1tf and mds: unable to isolate under `always`,
// a waived host that counts as isolating under `when-vulnerable`. Register and
// Report answer the agent the same.
TEST(HostEnablementTest, DesiredStateAnswersAgentsAndPlacesByIt) {
  for (const bool when_vulnerable : {false, true}) {
    SCOPED_TRACE(when_vulnerable ? "when-vulnerable" : "always");
    cosched::testing::TempDir dir;
    testing::SqliteTestState sqlite(dir.Sub("data"));
    ASSERT_NE(sqlite.state(), nullptr);
    TestState& state = *sqlite.state();
    state.settings.set_enforce_policy(when_vulnerable ? WhenVulnerable({"l1tf", "mds"}) : EnforcePolicy{});
    state.host_status.set_connected_check([](absl::string_view) { return true; });

    v1::RegisterRequest request;
    request.set_host_id("hv-1");
    auto* core = request.mutable_topology()->add_cores();
    core->add_cpus(0);
    core->add_cpus(1);
    request.mutable_capabilities()->set_smt_active(true);
    request.mutable_capabilities()->set_core_sched(v1::CORE_SCHED_SUPPORT_NO_KERNEL_SUPPORT);
    *request.mutable_capabilities()->mutable_preflight() =
        WithVulnerabilities({{"l1tf", false}, {"mds", false}});
    absl::StatusOr<v1::RegisterResponse> registered =
        testing::Wait<v1::RegisterResponse>([&](auto done) {
          state.hosts.RegisterHost(request, Actor{"hv-1", "host"}, std::move(done));
        });
    ASSERT_OK(registered);
    const auto expected = when_vulnerable ? v1::HostEnablement::STATE_WAIVED
                                          : v1::HostEnablement::STATE_ENFORCE;
    EXPECT_EQ(registered->enablement().state(), expected);

    v1::ReportRequest report;
    report.set_host_id("hv-1");
    *report.mutable_preflight() = request.capabilities().preflight();
    absl::StatusOr<v1::ReportResponse> reported = testing::Wait<v1::ReportResponse>(
        [&](auto done) { state.reports.ApplyReport(report, std::move(done)); });
    ASSERT_OK(reported);
    EXPECT_EQ(reported->enablement().state(), expected);
    // The same Report again (answered without a write) says the same.
    reported = testing::Wait<v1::ReportResponse>(
        [&](auto done) { state.reports.ApplyReport(report, std::move(done)); });
    ASSERT_OK(reported);
    EXPECT_EQ(reported->enablement().state(), expected);

    v1::GetHostRequest get;
    get.set_host_id("hv-1");
    absl::StatusOr<v1::Host> host = state.hosts.GetHost(get);
    ASSERT_OK(host);
    EXPECT_EQ(host->enablement().state(), expected);
    if (when_vulnerable) {
      EXPECT_EQ(host->unplaceable_reason(), "");
    } else {
      EXPECT_THAT(host->unplaceable_reason(), HasSubstr("unable to isolate"));
    }
  }
}

}  // namespace
}  // namespace cosched::server
