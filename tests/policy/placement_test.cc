#include "policy/placement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::policy {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

PlacementRequest Request(const std::string& id, int vcpus, bool pinning = true) {
  PlacementRequest r;
  r.vm_id = id;
  r.tenant = "acme";
  r.vcpus = vcpus;
  r.pinning = pinning;
  return r;
}

PlacementOptions Options() {
  PlacementOptions o;
  o.conflicts = {{"avx512", "latency-critical"}};
  return o;
}

TEST(Place, DedicatedNeedsWholeFreeCores) {
  PlacementIndex index(Options());
  ASSERT_OK(index.AddHost("small", 4));
  ASSERT_OK(index.AddHost("big", 16));
  ASSERT_OK(index.AddVm("big", Request("x", 24), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  PlacementRequest r = Request("gold", 10);
  r.isolation = v1::ISOLATION_LEVEL_DEDICATED;
  // small has 4 free cores, big 4, and one core of each stays shared (as
  // the agent keeps it): neither can give the 5 a 10-vCPU VM needs, nor the
  // 4 of an 8-vCPU one.
  auto d = index.Place(r);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(d.status().message(), HasSubstr("2 without 5 whole free cores"));
  EXPECT_THAT(d.status().message(), HasSubstr("1 core of each host stays shared"));
  r.vcpus = 8;
  EXPECT_EQ(index.Place(r).status().code(), absl::StatusCode::kResourceExhausted);
  r.vcpus = 6;
  d = index.Place(r);
  ASSERT_OK(d);
  EXPECT_EQ(d->cores.size(), 3u);
}

TEST(Place, OnAHostWithSmtOffAPinnedVmTakesACorePerVcpu) {
  PlacementIndex index(Options());
  ASSERT_OK(index.AddHost("nosmt", 4, /*threads_per_core=*/1));
  PlacementRequest r = Request("gold", 3);
  r.isolation = v1::ISOLATION_LEVEL_DEDICATED;
  auto d = index.Place(r);
  ASSERT_OK(d);
  EXPECT_EQ(d->cores, (std::vector<int>{0, 1, 2}));
  EXPECT_THAT(d->reason, Not(HasSubstr("aligned")));
  ASSERT_OK(index.AddVm("nosmt", r, d->cores));
  // One core left: a 2-vCPU VM does not fit, and the error says why.
  r = Request("silver", 2);
  r.isolation = v1::ISOLATION_LEVEL_DEDICATED;
  d = index.Place(r);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(d.status().message(),
              HasSubstr("1 without enough whole free cores (1 with 2 threads per core, 2 with 1)"));
  EXPECT_EQ(index.AddHost("bad", 4, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Place, EvenVcpuCountsGetAlignedWholeCores) {
  PlacementIndex index(Options());
  ASSERT_OK(index.AddHost("h", 8));
  ASSERT_OK(index.AddVm("h", Request("a", 2), {1}));
  auto d = index.Place(Request("b", 4));
  ASSERT_OK(d);
  EXPECT_EQ(d->host_id, "h");
  EXPECT_EQ(d->cores, (std::vector<int>{2, 3}));  // contiguous, whole cores
  EXPECT_THAT(d->reason, HasSubstr("aligned to whole cores"));
  ASSERT_OK(index.AddVm("h", Request("b", 4), d->cores));
  EXPECT_FALSE(index.AddVm("h", Request("c", 2), {2}).ok());  // taken
}

TEST(Place, ConflictingClassesDoNotShareUnpinnedCores) {
  PlacementIndex index(Options());
  ASSERT_OK(index.AddHost("avx-host", 8));
  ASSERT_OK(index.AddHost("quiet-host", 8));
  PlacementRequest avx = Request("gemm", 2, false);
  avx.classes = {"avx512"};
  ASSERT_OK(index.AddVm("avx-host", avx, {}));
  // quiet-host carries more load, but avx-host has the conflicting class.
  ASSERT_OK(index.AddVm("quiet-host", Request("busy", 8, false), {}));
  PlacementRequest lat = Request("db", 2, false);
  lat.classes = {"latency-critical"};
  auto d = index.Place(lat);
  ASSERT_OK(d);
  EXPECT_EQ(d->host_id, "quiet-host");
  EXPECT_TRUE(d->cores.empty());
}

TEST(Place, PrefersTheHostWhereItLosesLeast) {
  PlacementIndex index(Options());
  ASSERT_OK(index.AddHost("loaded", 8));
  ASSERT_OK(index.AddHost("empty", 8));
  ASSERT_OK(index.AddVm("loaded", Request("x", 12, false), {}));
  auto d = index.Place(Request("new", 4, false));
  ASSERT_OK(d);
  EXPECT_EQ(d->host_id, "empty");
  ASSERT_EQ(d->ranked.size(), 2u);
  EXPECT_LT(d->ranked[0].predicted_cost, d->ranked[1].predicted_cost);
}

TEST(Place, TenantLevelSharesItsGroupsHost) {
  PlacementIndex index(Options());
  ASSERT_OK(index.AddHost("mine", 8));
  ASSERT_OK(index.AddHost("theirs", 8));
  PlacementRequest mine = Request("m1", 8, false);
  mine.isolation = v1::ISOLATION_LEVEL_TENANT;
  ASSERT_OK(index.AddVm("mine", mine, {}));
  PlacementRequest other = Request("o1", 4, false);
  other.tenant = "beta";
  ASSERT_OK(index.AddVm("theirs", other, {}));
  PlacementRequest r = Request("m2", 2, false);
  r.isolation = v1::ISOLATION_LEVEL_TENANT;
  auto d = index.Place(r);
  ASSERT_OK(d);
  EXPECT_EQ(d->host_id, "mine");
}

TEST(Place, RemoveFreesCoresAndRejectsBadInput) {
  PlacementIndex index(Options());
  ASSERT_OK(index.AddHost("h", 2));
  EXPECT_EQ(index.AddHost("h", 2).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_OK(index.AddVm("h", Request("a", 4), {0, 1}));
  EXPECT_FALSE(index.Place(Request("b", 2)).ok());
  ASSERT_OK(index.RemoveVm("h", "a"));
  EXPECT_OK(index.Place(Request("b", 2)));
  EXPECT_EQ(index.RemoveVm("h", "a").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(index.Place(Request("", 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(index.Place(Request("c", 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cosched::policy
