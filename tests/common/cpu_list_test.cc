#include "common/cpu_ranges.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cosched {
namespace {

using ::testing::ElementsAre;
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

}  // namespace
}  // namespace cosched
