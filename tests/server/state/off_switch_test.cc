// The off switch (issue #33 item 4), one host, a selector's or the whole
// fleet's, through Hosts::SetHostEnforcement and RolloutControl's fleet
// setting, over the desired state on SQLite.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/state/rollout_fixture.h"
#include "tests/testing/status_matchers.h"

namespace cosched::server {
namespace {

using ::cosched::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Issue #33 item 4: the off switch. One host, the hosts a selector
// matches, or the whole fleet (hosts that register later included) get
// HostEnablement OFF, whatever a rollout or new_hosts says; each change is
// audited with its reason; on again restores what was.
class OffSwitchTest : public RolloutControlTest {
 protected:
  bool HostsWait() const override { return false; }

  absl::StatusOr<v1::SetHostEnforcementResponse> Switch(v1::SetHostEnforcementRequest request) {
    return testing::Wait<v1::SetHostEnforcementResponse>([&](auto done) {
      if (request.all()) {
        control_->SetFleetEnforcement(request, Actor{"alice", "admin"}, std::move(done));
      } else {
        sqlite_.state()->hosts.SetHostEnforcement(request, Actor{"alice", "admin"}, std::move(done));
      }
    });
  }
  static v1::SetHostEnforcementRequest Off(std::string host, bool off = true) {
    v1::SetHostEnforcementRequest r;
    r.set_host_id(std::move(host));
    r.set_off(off);
    r.set_reason("kernel bug INC-42");
    return r;
  }
};

TEST_F(OffSwitchTest, OneHostOffThenOnAgainAudited) {
  ASSERT_OK_AND_ASSIGN(v1::SetHostEnforcementResponse off, Switch(Off("hv-3")));
  ASSERT_EQ(off.hosts_size(), 1);
  EXPECT_TRUE(off.hosts(0).enforcement_off());
  EXPECT_EQ(off.hosts(0).enablement().state(), v1::HostEnablement::STATE_OFF);
  EXPECT_THAT(off.hosts(0).enablement().reason(), HasSubstr("csctl hosts enforce on hv-3"));
  EXPECT_EQ(off.hosts(0).unplaceable_reason(), "enforcement off (csctl hosts enforce on)");
  EXPECT_EQ(EnablementOfHost("hv-3"), v1::HostEnablement::STATE_OFF);
  EXPECT_EQ(EnablementOfHost("hv-4"), v1::HostEnablement::STATE_ENFORCE);
  // Its agent hears it in the answer to its next Register (and Report).
  ASSERT_OK_AND_ASSIGN(v1::RegisterResponse again, Register("hv-3"));
  EXPECT_EQ(again.enablement().state(), v1::HostEnablement::STATE_OFF);
  // Switching off what is off changes nothing and writes no audit.
  ASSERT_OK_AND_ASSIGN(off, Switch(Off("hv-3")));
  EXPECT_EQ(off.hosts_size(), 0);
  ASSERT_OK(Switch(Off("hv-3", false)));
  EXPECT_EQ(EnablementOfHost("hv-3"), v1::HostEnablement::STATE_ENFORCE);
  EXPECT_THAT(AuditMethods("SetHostEnforcement"),
              ElementsAreArray({"SetHostEnforcement", "SetHostEnforcement"}));
}

TEST_F(OffSwitchTest, BadInputChangesNothing) {
  EXPECT_THAT(Switch(Off("hv-404")).status(),
              StatusIs(absl::StatusCode::kNotFound, "host 'hv-404' not found"));
  v1::SetHostEnforcementRequest no_reason = Off("hv-1");
  no_reason.clear_reason();
  EXPECT_THAT(Switch(no_reason).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "reason is required"));
  v1::SetHostEnforcementRequest nothing = Off("");
  nothing.set_selector("zone=nowhere");
  EXPECT_THAT(Switch(nothing).status(),
              StatusIs(absl::StatusCode::kNotFound, "selector 'zone=nowhere' matches no host"));
  nothing.set_selector("zone");
  EXPECT_THAT(Switch(nothing).status(), StatusIs(absl::StatusCode::kInvalidArgument, "selector"));
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(EnablementOfHost(absl::StrCat("hv-", i)), v1::HostEnablement::STATE_ENFORCE) << i;
  }
  EXPECT_TRUE(AuditMethods("SetHostEnforcement").empty());
}

TEST_F(OffSwitchTest, ASelectorSwitchesTheHostsItMatches) {
  v1::SetHostEnforcementRequest zone_b = Off("");
  zone_b.set_selector("zone=b");
  ASSERT_OK_AND_ASSIGN(v1::SetHostEnforcementResponse off, Switch(zone_b));
  EXPECT_EQ(off.hosts_size(), 10);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(EnablementOfHost(absl::StrCat("hv-", i)),
              i % 2 == 1 ? v1::HostEnablement::STATE_OFF : v1::HostEnablement::STATE_ENFORCE)
        << i;
  }
}

TEST_F(OffSwitchTest, TheFleetSwitchHoldsForNewHostsAndOutlivesARollout) {
  v1::SetHostEnforcementRequest all = Off("");
  all.set_all(true);
  ASSERT_OK_AND_ASSIGN(v1::SetHostEnforcementResponse off, Switch(all));
  EXPECT_TRUE(off.fleet_off());
  EXPECT_EQ(EnablementOfHost("hv-0"), v1::HostEnablement::STATE_OFF);
  ASSERT_OK_AND_ASSIGN(v1::RegisterResponse late, Register("hv-77"));
  EXPECT_EQ(late.enablement().state(), v1::HostEnablement::STATE_OFF);
  EXPECT_THAT(late.enablement().reason(), HasSubstr("whole fleet"));
  // One host switched on stays off while the fleet's switch holds.
  ASSERT_OK_AND_ASSIGN(off, Switch(Off("hv-0", false)));
  EXPECT_TRUE(off.fleet_off());
  EXPECT_EQ(EnablementOfHost("hv-0"), v1::HostEnablement::STATE_OFF);
  all.set_off(false);
  ASSERT_OK_AND_ASSIGN(off, Switch(all));
  EXPECT_FALSE(off.fleet_off());
  EXPECT_EQ(EnablementOfHost("hv-0"), v1::HostEnablement::STATE_ENFORCE);
  EXPECT_EQ(EnablementOfHost("hv-77"), v1::HostEnablement::STATE_ENFORCE);
  // A rollout started while the fleet is off keeps it off, also on the
  // host it enables.
  all.set_off(true);
  ASSERT_OK(Switch(all));
  ASSERT_OK(SetNewHosts(v1::NEW_HOSTS_WAIT_FOR_ROLLOUT));
  ASSERT_OK(Register("hv-90"));
  ASSERT_OK_AND_ASSIGN(v1::Rollout started, Start({100}, 600));
  EXPECT_TRUE(started.enforcement_off());
  EXPECT_EQ(EnablementOfHost("hv-90"), v1::HostEnablement::STATE_OFF);
  EXPECT_EQ(EnablementOfHost("hv-5"), v1::HostEnablement::STATE_OFF);
  // Off, on and off for the fleet; hv-0, never switched off itself,
  // changed nothing.
  EXPECT_THAT(AuditMethods("SetHostEnforcement"),
              ElementsAreArray({"SetHostEnforcement", "SetHostEnforcement", "SetHostEnforcement"}));
}

}  // namespace
}  // namespace cosched::server
