#include "common/labels.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using ::testing::HasSubstr;

Labels Of(std::initializer_list<std::pair<const std::string, std::string>> pairs) {
  Labels labels;
  for (const auto& [k, v] : pairs) labels[k] = v;
  return labels;
}

void ExpectRefused(const absl::Status& s, const std::string& what) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(what));
}

TEST(LabelsTest, KeysAndValuesFollowTheRules) {
  EXPECT_OK(ValidateLabels("labels", Of({{"zone", "a"}, {"example.com/rack", "r-12"},
                                         {"empty", ""}})));
  ExpectRefused(ValidateLabels("labels", Of({{"", "a"}})), "labels key '' must not be empty");
  ExpectRefused(ValidateLabels("labels", Of({{"-zone", "a"}})),
                "labels key '-zone' must start with a letter or digit");
  ExpectRefused(ValidateLabels("labels", Of({{"zone", "a b"}})),
                "labels.zone 'a b' may hold only letters, digits, '.', '_' and '-'");
  ExpectRefused(ValidateLabels("labels", Of({{"zone", "a/b"}})), "labels.zone 'a/b'");
  ExpectRefused(ValidateLabels("labels", Of({{"zone", std::string(64, 'a')}})),
                "must be at most 63 characters");
  Labels many;
  for (int i = 0; i <= kMaxLabels; ++i) many["k" + std::to_string(i)] = "v";
  ExpectRefused(ValidateLabels("labels", many), "labels has 33 labels; at most 32");
}

TEST(LabelsTest, SelectorsMatchEveryPair) {
  absl::StatusOr<LabelSelector> s = ParseLabelSelector("selector", "zone=a, gen=icx");
  ASSERT_OK(s);
  EXPECT_TRUE(Matches(*s, Of({{"zone", "a"}, {"gen", "icx"}, {"rack", "1"}})));
  EXPECT_FALSE(Matches(*s, Of({{"zone", "a"}})));
  EXPECT_FALSE(Matches(*s, Of({{"zone", "b"}, {"gen", "icx"}})));
  absl::StatusOr<LabelSelector> all = ParseLabelSelector("selector", "");
  ASSERT_OK(all);
  EXPECT_TRUE(Matches(*all, Labels()));

  ExpectRefused(ParseLabelSelector("--selector", "zone").status(),
                "--selector 'zone' must be key=value");
  ExpectRefused(ParseLabelSelector("--selector", "zone=a,zone=b").status(),
                "--selector names zone twice");
  ExpectRefused(ParseLabelSelector("--selector", "zone=a b").status(),
                "--selector.zone 'a b' may hold only");
  ExpectRefused(ParseLabelSelector("--selector", "=a").status(), "key '' must not be empty");
}

TEST(LabelsTest, TextIsInKeyOrder) {
  EXPECT_EQ(LabelsText(Of({{"zone", "a"}, {"gen", "icx"}})), "gen=icx,zone=a");
  EXPECT_EQ(LabelsText(Labels()), "");
}

}  // namespace
}  // namespace cosched
