#include "common/cpu_list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ExpandCpuRanges, SortsAndMergesOverlappingRanges) {
  EXPECT_THAT(ExpandCpuRanges({}), IsEmpty());
  EXPECT_THAT(ExpandCpuRanges({{8, 9}, {0, 2}, {1, 3}, {5, 5}}), ElementsAre(0, 1, 2, 3, 5, 8, 9));
  // Nested, repeated and adjacent ranges.
  EXPECT_THAT(ExpandCpuRanges({{0, 10}, {2, 3}, {2, 3}, {11, 12}}),
              ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
  EXPECT_THAT(ExpandCpuRanges({{4, 4}, {4, 4}}), ElementsAre(4));
}

// The form that was slow (fuzz/regressions/topology_fuzz): every range
// repeated. Each id once.
TEST(ExpandCpuRanges, RepeatedWholeRangesGiveEachIdOnce) {
  std::vector<std::pair<int, int>> ranges(500, {0, 65535});
  std::vector<int> ids = ExpandCpuRanges(ranges);
  ASSERT_EQ(ids.size(), 65536u);
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(ids.back(), 65535);
}

std::vector<int> Cpus(absl::string_view text) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList(text);
  EXPECT_OK(cpus);
  return cpus.ok() ? *cpus : std::vector<int>{};
}

TEST(ParseCpuListTest, Ranges) {
  EXPECT_THAT(Cpus("0-1"), ElementsAre(0, 1));
  EXPECT_THAT(Cpus("0,2"), ElementsAre(0, 2));
  EXPECT_THAT(Cpus("0-3,8-11\n"), ElementsAre(0, 1, 2, 3, 8, 9, 10, 11));
  EXPECT_THAT(Cpus("5"), ElementsAre(5));
  EXPECT_THAT(Cpus("3,1,1-2"), ElementsAre(1, 2, 3));
}

TEST(ParseCpuListTest, EmptyMeansNone) {
  EXPECT_THAT(Cpus(""), IsEmpty());
  EXPECT_THAT(Cpus("\n"), IsEmpty());
}

TEST(ParseCpuListTest, Malformed) {
  for (const char* bad : {"a", "1-", "-1", "3-1", "1,,2", "1-2-3", "+1",
                          "0-99999999", "1 2", "0,"}) {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(bad);
    EXPECT_EQ(cpus.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(cpus.status().message(), HasSubstr(bad));
  }
}

TEST(ParseCpuListTest, ReadsKernelForms) {
  EXPECT_EQ(*ParseCpuList("0-1"), (std::vector<int>{0, 1}));
  EXPECT_EQ(*ParseCpuList("0,2\n"), (std::vector<int>{0, 2}));
  EXPECT_EQ(*ParseCpuList("0-2,8-9"), (std::vector<int>{0, 1, 2, 8, 9}));
  EXPECT_EQ(*ParseCpuList("3"), (std::vector<int>{3}));
  for (absl::string_view bad : {"a", "1-0", "1,", "-1", "0-70000", "1 2"})
    EXPECT_FALSE(ParseCpuList(bad).ok()) << bad;
}

TEST(ParseCpuListTest, RepeatedRangesGiveEachCpuOnce) {
  std::string list = "0-65535";
  for (int i = 0; i < 499; ++i) list += ",0-65535";
  auto cpus = ParseCpuList(list);
  ASSERT_OK(cpus);
  EXPECT_EQ(cpus->size(), 65536u);
}

}  // namespace
}  // namespace cosched
