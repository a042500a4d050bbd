// A rollout's stages and soak as csctl and csd parse and check them.
#include "common/rollout_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using ::cosched::testing::StatusIs;
using ::testing::ElementsAre;

TEST(StagePercentsTest, ParsesPercentsInOrder) {
  absl::StatusOr<std::vector<int>> stages = ParseStagePercents("--stages", "1%,10%,50%,100%");
  ASSERT_TRUE(stages.ok()) << stages.status();
  EXPECT_THAT(*stages, ElementsAre(1, 10, 50, 100));
  stages = ParseStagePercents("--stages", " 5% , 25% ");
  ASSERT_TRUE(stages.ok()) << stages.status();
  EXPECT_THAT(*stages, ElementsAre(5, 25));
  // The last stage may stop short of every host.
  EXPECT_TRUE(ParseStagePercents("--stages", "50%").ok());
}

TEST(StagePercentsTest, RefusesBadListsNamingTheFieldAndTheRule) {
  const absl::StatusCode bad = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(ParseStagePercents("--stages", "").status(), StatusIs(bad, "--stages is empty"));
  EXPECT_THAT(ParseStagePercents("--stages", "10").status(),
              StatusIs(bad, "--stages[0] '10' must be a whole percent of the form N%"));
  EXPECT_THAT(ParseStagePercents("--stages", "10%,x%").status(),
              StatusIs(bad, "--stages[1] 'x%' must be a whole percent"));
  EXPECT_THAT(ParseStagePercents("--stages", "1.5%").status(), StatusIs(bad, "--stages[0]"));
  EXPECT_THAT(ParseStagePercents("--stages", "-5%").status(), StatusIs(bad, "--stages[0]"));
  EXPECT_THAT(ParseStagePercents("--stages", "10%,,50%").status(), StatusIs(bad, "--stages[1]"));
  EXPECT_THAT(ParseStagePercents("--stages", "10%,10%").status(),
              StatusIs(bad, "--stages[1] 10% must be more than the stage before it (10%): "
                            "stages strictly increase"));
  EXPECT_THAT(ParseStagePercents("--stages", "50%,10%").status(),
              StatusIs(bad, "strictly increase"));
  EXPECT_THAT(ParseStagePercents("--stages", "10%,150%").status(),
              StatusIs(bad, "--stages[1] 150% must be 1% to 100%"));
  EXPECT_THAT(ParseStagePercents("--stages", "0%,50%").status(),
              StatusIs(bad, "--stages[0] 0% must be 1% to 100%"));
  EXPECT_THAT(
      ParseStagePercents("--stages", "1%,2%,3%,4%,5%,6%,7%,8%,9%,10%,11%").status(),
      StatusIs(bad, "--stages has 11 stages; at most 10"));
  EXPECT_THAT(ValidateStagePercents("stage_percents", {}),
              StatusIs(bad, "stage_percents is empty"));
}

TEST(SoakTest, ParsesAWholeNumberAndAUnit) {
  EXPECT_EQ(*ParseSoak("--soak", "90s"), 90);
  EXPECT_EQ(*ParseSoak("--soak", "30m"), 1800);
  EXPECT_EQ(*ParseSoak("--soak", "2h"), 7200);
  EXPECT_EQ(*ParseSoak("--soak", "7d"), 604800);
  EXPECT_EQ(SoakText(1800), "30m");
  EXPECT_EQ(SoakText(9000), "2h30m");
  EXPECT_EQ(SoakText(604800), "7d");
}

TEST(SoakTest, RefusesOtherFormsAndOutOfRange) {
  const absl::StatusCode bad = absl::StatusCode::kInvalidArgument;
  for (const char* text : {"", "30", "m", "1.5h", "-1m", "30 min", "1w"}) {
    EXPECT_THAT(ParseSoak("--soak", text).status(),
                StatusIs(bad, "must be a whole number and a unit: s, m, h or d")) << text;
  }
  EXPECT_THAT(ParseSoak("--soak", "8d").status(),
              StatusIs(bad, "--soak 8d is out of range: 1s to 7d"));
  EXPECT_THAT(ParseSoak("--soak", "0s").status(), StatusIs(bad, "out of range: 1s to 7d"));
  EXPECT_THAT(ValidateSoak("soak_seconds", 30, 60),
              StatusIs(bad, "soak_seconds 30s is out of range: 1m to 7d"));
  EXPECT_TRUE(ValidateSoak("soak_seconds", 60, 60).ok());
}

}  // namespace
}  // namespace cosched
