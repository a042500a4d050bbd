#include "policy/trust_group.h"

#include <cmath>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::policy {
namespace {

v1::TenantPolicy Policy(const std::string& tenant, v1::IsolationLevel def,
                        std::vector<v1::IsolationLevel> allowed = {}) {
  v1::TenantPolicy p;
  p.set_tenant_id(tenant);
  p.set_default_isolation(def);
  for (auto level : allowed) p.add_allowed_isolation(level);
  return p;
}

TEST(DecideTrustGroup, VmLevelGivesOneGroupPerVm) {
  auto policy = DefaultTenantPolicy("acme");
  auto a = DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_VM, {}, policy);
  auto b = DecideTrustGroup("vm-2", v1::ISOLATION_LEVEL_VM, {}, policy);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->isolation, v1::ISOLATION_LEVEL_VM);
  EXPECT_EQ(a->trust_group, "acme/vm/vm-1");
  EXPECT_NE(a->trust_group, b->trust_group);
  EXPECT_FALSE(a->dedicated_cores);
}

TEST(DecideTrustGroup, UnspecifiedTakesTenantDefault) {
  auto policy = Policy("acme", v1::ISOLATION_LEVEL_TENANT);
  auto d = DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_UNSPECIFIED, {}, policy);
  ASSERT_OK(d);
  EXPECT_EQ(d->isolation, v1::ISOLATION_LEVEL_TENANT);
  EXPECT_EQ(d->trust_group, "acme/tenant");
}

TEST(DecideTrustGroup, DefaultPolicyIsVm) {
  auto d = DecideTrustGroup("vm-123", v1::ISOLATION_LEVEL_UNSPECIFIED, {},
                            DefaultTenantPolicy(kDefaultTenant));
  ASSERT_OK(d);
  EXPECT_EQ(d->isolation, v1::ISOLATION_LEVEL_VM);
  EXPECT_EQ(d->trust_group, "default/vm/vm-123");
}

TEST(DecideTrustGroup, TenantLevelSharesGroupAndSplitsByClasses) {
  auto policy = DefaultTenantPolicy("acme");
  auto plain1 = DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_TENANT, {}, policy);
  auto plain2 = DecideTrustGroup("vm-2", v1::ISOLATION_LEVEL_TENANT, {}, policy);
  auto avx = DecideTrustGroup("vm-3", v1::ISOLATION_LEVEL_TENANT, {"avx512"},
                              policy);
  auto both = DecideTrustGroup("vm-4", v1::ISOLATION_LEVEL_TENANT,
                               {"avx512", "latency-critical"}, policy);
  ASSERT_TRUE(plain1.ok() && plain2.ok() && avx.ok() && both.ok());
  EXPECT_EQ(plain1->trust_group, plain2->trust_group);
  EXPECT_NE(plain1->trust_group, avx->trust_group);
  EXPECT_NE(avx->trust_group, both->trust_group);
  EXPECT_EQ(both->trust_group, "acme/tenant/avx512+latency-critical");
}

TEST(DecideTrustGroup, TenantGroupsNeverSharedAcrossTenants) {
  auto a = DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_TENANT, {},
                            DefaultTenantPolicy("acme"));
  auto b = DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_TENANT, {},
                            DefaultTenantPolicy("globex"));
  auto c = DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_VM, {},
                            DefaultTenantPolicy("globex"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_NE(a->trust_group, b->trust_group);
  EXPECT_NE(a->trust_group, c->trust_group);
}

TEST(DecideTrustGroup, StableForSameInputs) {
  auto policy = DefaultTenantPolicy("acme");
  for (auto level : {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT,
                     v1::ISOLATION_LEVEL_DEDICATED}) {
    auto x = DecideTrustGroup("vm-9", level, {"avx512"}, policy);
    auto y = DecideTrustGroup("vm-9", level, {"avx512"}, policy);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(x->trust_group, y->trust_group);
  }
}

TEST(DecideTrustGroup, NoneHasNoGroup) {
  v1::TenantPolicy granted = DefaultTenantPolicy("acme");
  granted.add_allowed_isolation(v1::ISOLATION_LEVEL_NONE);
  granted.set_explicitly_set(true);
  auto d = DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_NONE, {}, granted);
  ASSERT_OK(d);
  EXPECT_EQ(d->isolation, v1::ISOLATION_LEVEL_NONE);
  EXPECT_TRUE(d->trust_group.empty());
  EXPECT_FALSE(d->dedicated_cores);
}

// Issue #32 item 4: turning isolation off is a grant a policy makes; a
// tenant that never had one allows every other level.
TEST(DecideTrustGroup, ATenantWithoutAPolicyAllowsEveryLevelButNone) {
  const v1::TenantPolicy none_set = DefaultTenantPolicy("acme");
  EXPECT_OK(ValidateTenantPolicy(none_set));
  for (v1::IsolationLevel level : {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT,
                                   v1::ISOLATION_LEVEL_DEDICATED}) {
    EXPECT_OK(DecideTrustGroup("vm-1", level, {}, none_set).status()) << level;
  }
  auto none = DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_NONE, {}, none_set);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("the tenant has no policy, and none must be granted"),
            std::string::npos)
      << none.status();
}

TEST(DecideTrustGroup, DedicatedHasOwnGroupAndWholeCores) {
  auto d = DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_DEDICATED, {},
                            DefaultTenantPolicy("acme"));
  auto vm = DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_VM, {},
                             DefaultTenantPolicy("acme"));
  ASSERT_TRUE(d.ok() && vm.ok());
  EXPECT_TRUE(d->dedicated_cores);
  EXPECT_FALSE(d->trust_group.empty());
  EXPECT_NE(d->trust_group, vm->trust_group);
}

TEST(DecideTrustGroup, ForbiddenLevelIsFailedPrecondition) {
  auto policy = Policy("bank", v1::ISOLATION_LEVEL_VM,
                       {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_DEDICATED});
  auto d = DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_NONE, {}, policy);
  ASSERT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("'none' is not allowed"), std::string::npos);
  EXPECT_NE(d.status().message().find("bank"), std::string::npos);
  EXPECT_OK(DecideTrustGroup("vm-1", v1::ISOLATION_LEVEL_DEDICATED, {}, policy));
}

TEST(DecideTrustGroup, UnknownLevelIsInvalid) {
  auto d = DecideTrustGroup("vm-1", static_cast<v1::IsolationLevel>(42), {},
                            DefaultTenantPolicy("acme"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ValidateTenantPolicy, AcceptsGoodPolicies) {
  EXPECT_OK(ValidateTenantPolicy(DefaultTenantPolicy("acme")));
  EXPECT_TRUE(ValidateTenantPolicy(Policy("acme", v1::ISOLATION_LEVEL_TENANT,
                                          {v1::ISOLATION_LEVEL_TENANT,
                                           v1::ISOLATION_LEVEL_VM}))
                  .ok());
}

TEST(ValidateTenantPolicy, RejectsBadPolicies) {
  auto bad_id = ValidateTenantPolicy(Policy("bad id", v1::ISOLATION_LEVEL_VM));
  EXPECT_EQ(bad_id.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_id.message().find("policy.tenant_id"), std::string::npos);

  auto no_default =
      ValidateTenantPolicy(Policy("acme", v1::ISOLATION_LEVEL_UNSPECIFIED));
  EXPECT_NE(no_default.message().find("policy.default_isolation"), std::string::npos);

  auto not_allowed = ValidateTenantPolicy(
      Policy("acme", v1::ISOLATION_LEVEL_NONE, {v1::ISOLATION_LEVEL_VM}));
  EXPECT_EQ(not_allowed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(not_allowed.message().find("must be one of policy.allowed_isolation"),
            std::string::npos);

  auto dup = ValidateTenantPolicy(Policy(
      "acme", v1::ISOLATION_LEVEL_VM, {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_VM}));
  EXPECT_NE(dup.message().find("allowed_isolation[1] repeats"), std::string::npos);

  auto unknown = ValidateTenantPolicy(
      Policy("acme", v1::ISOLATION_LEVEL_VM,
             {v1::ISOLATION_LEVEL_VM, static_cast<v1::IsolationLevel>(9)}));
  EXPECT_NE(unknown.message().find("allowed_isolation[1]"), std::string::npos);
}

TEST(ValidateTenantPolicy, ForcedIdleBudgetIsAPercentage) {
  v1::TenantPolicy policy = DefaultTenantPolicy("acme");
  for (double ok : {0.0, 12.5, 100.0}) {
    policy.set_forced_idle_budget_pct(ok);
    EXPECT_OK(ValidateTenantPolicy(policy)) << ok;
  }
  for (double bad : {-0.1, 100.5, std::nan("")}) {
    policy.set_forced_idle_budget_pct(bad);
    absl::Status s = ValidateTenantPolicy(policy);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("policy.forced_idle_budget_pct must be between 0 and 100"),
              std::string::npos)
        << s;
  }
}

TEST(ValidateTenantPolicy, ModeIsFixedOrAutoAndAutoWithOnlyNoneIsValid) {
  v1::TenantPolicy policy = DefaultTenantPolicy("acme");
  EXPECT_FALSE(IsAuto(policy));
  EXPECT_TRUE(Applies(policy));
  policy.set_mode(v1::POLICY_MODE_AUTO);
  EXPECT_OK(ValidateTenantPolicy(policy));
  EXPECT_TRUE(IsAuto(policy));
  policy.set_apply(false);
  EXPECT_FALSE(Applies(policy));
  policy.set_mode(v1::POLICY_MODE_FIXED);
  EXPECT_OK(ValidateTenantPolicy(policy));
  EXPECT_FALSE(IsAuto(policy));

  v1::TenantPolicy none_only = Policy("acme", v1::ISOLATION_LEVEL_NONE, {v1::ISOLATION_LEVEL_NONE});
  none_only.set_mode(v1::POLICY_MODE_AUTO);
  EXPECT_OK(ValidateTenantPolicy(none_only));

  policy.set_mode(static_cast<v1::PolicyMode>(7));
  absl::Status s = ValidateTenantPolicy(policy);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("policy.mode must be fixed or auto"), std::string::npos) << s;
}

}  // namespace
}  // namespace cosched::policy
