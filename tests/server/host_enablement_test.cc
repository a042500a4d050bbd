#include "server/host_enablement.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/desired_state_testing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;

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

TEST(EnforceModeTest, ParsesTheTwoNamesAndNamesTheFieldOtherwise) {
  EXPECT_EQ(*ParseEnforceMode("enforce", ""), EnforceMode::kAlways);
  EXPECT_EQ(*ParseEnforceMode("enforce", "always"), EnforceMode::kAlways);
  EXPECT_EQ(*ParseEnforceMode("enforce", "when-vulnerable"), EnforceMode::kWhenVulnerable);
  absl::StatusOr<EnforceMode> bad = ParseEnforceMode("enforce", "sometimes");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("enforce 'sometimes' must be always (the default) or when-vulnerable"));
}

TEST(HostEnablementTest, AlwaysEnforcesEvenWhereNothingLeaks) {
  const v1::HostPreflight p = WithVulnerabilities({{"l1tf", false}, {"mds", false}});
  EXPECT_EQ(EnablementOf(p, EnforceMode::kAlways).state(), v1::HostEnablement::STATE_ENFORCE);
}

TEST(HostEnablementTest, WhenVulnerableSkipsOnlyHostsThatSayTheyLeakNothing) {
  const v1::HostPreflight clear =
      WithVulnerabilities({{"l1tf", false}, {"mds", false}, {"spectre_v2", true},
                           {"tsx_async_abort", false}});
  v1::HostEnablement e = EnablementOf(clear, EnforceMode::kWhenVulnerable);
  EXPECT_EQ(e.state(), v1::HostEnablement::STATE_NOT_NEEDED);
  EXPECT_THAT(e.reason(), HasSubstr("not affected by l1tf, mds, tsx_async_abort"));

  // One SMT-relevant issue affected: enforce.
  EXPECT_EQ(EnablementOf(WithVulnerabilities({{"l1tf", false}, {"mds", true}}),
                         EnforceMode::kWhenVulnerable)
                .state(),
            v1::HostEnablement::STATE_ENFORCE);
  EXPECT_EQ(EnablementOf(WithVulnerabilities({{"l1tf", false}, {"mds", false},
                                              {"mmio_stale_data", true}}),
                         EnforceMode::kWhenVulnerable)
                .state(),
            v1::HostEnablement::STATE_ENFORCE);
  // A host that cannot say: no vulnerabilities at all, or l1tf or mds
  // missing (an older kernel, an unreadable file).
  EXPECT_EQ(EnablementOf(v1::HostPreflight(), EnforceMode::kWhenVulnerable).state(),
            v1::HostEnablement::STATE_ENFORCE);
  EXPECT_EQ(EnablementOf(WithVulnerabilities({{"mds", false}}), EnforceMode::kWhenVulnerable)
                .state(),
            v1::HostEnablement::STATE_ENFORCE);
  EXPECT_EQ(EnablementOf(WithVulnerabilities({{"l1tf", false}, {"spectre_v2", false}}),
                         EnforceMode::kWhenVulnerable)
                .state(),
            v1::HostEnablement::STATE_ENFORCE);
}

// A host with SMT on whose kernel cannot do core scheduling, and whose CPUs
// leak nothing between siblings: unable to isolate under `always`, an
// isolating host needing no cookies under `when-vulnerable`. Register and
// Report answer the agent the same.
TEST(HostEnablementTest, DesiredStateAnswersAgentsAndPlacesByIt) {
  for (EnforceMode mode : {EnforceMode::kAlways, EnforceMode::kWhenVulnerable}) {
    const bool when_vulnerable = mode == EnforceMode::kWhenVulnerable;
    SCOPED_TRACE(when_vulnerable ? "when-vulnerable" : "always");
    cosched::testing::TempDir dir;
    testing::SqliteDesiredState sqlite(dir.Sub("data"));
    ASSERT_NE(sqlite.state(), nullptr);
    DesiredState& state = *sqlite.state();
    state.set_enforce_mode(mode);
    state.set_connected_check([](absl::string_view) { return true; });

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
          state.RegisterHost(request, Actor{"hv-1", "host"}, std::move(done));
        });
    ASSERT_OK(registered);
    const auto expected = when_vulnerable ? v1::HostEnablement::STATE_NOT_NEEDED
                                          : v1::HostEnablement::STATE_ENFORCE;
    EXPECT_EQ(registered->enablement().state(), expected);

    v1::ReportRequest report;
    report.set_host_id("hv-1");
    *report.mutable_preflight() = request.capabilities().preflight();
    absl::StatusOr<v1::ReportResponse> reported = testing::Wait<v1::ReportResponse>(
        [&](auto done) { state.ApplyReport(report, std::move(done)); });
    ASSERT_OK(reported);
    EXPECT_EQ(reported->enablement().state(), expected);
    // The same Report again (answered without a write) says the same.
    reported = testing::Wait<v1::ReportResponse>(
        [&](auto done) { state.ApplyReport(report, std::move(done)); });
    ASSERT_OK(reported);
    EXPECT_EQ(reported->enablement().state(), expected);

    v1::GetHostRequest get;
    get.set_host_id("hv-1");
    absl::StatusOr<v1::Host> host = state.GetHost(get);
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
