#include "common/sibling_share.h"

#include <limits>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using ::testing::HasSubstr;

v1::SiblingShare Share(int64_t run, int64_t same, int64_t idle, int64_t foreign,
                       int64_t unknown, int64_t intervals, int64_t longest) {
  v1::SiblingShare s;
  s.set_run_ns(run);
  s.set_same_ns(same);
  s.set_idle_ns(idle);
  s.set_foreign_ns(foreign);
  s.set_unknown_ns(unknown);
  s.set_foreign_intervals(intervals);
  s.set_longest_foreign_ns(longest);
  return s;
}

// A figure added to the proto without a line in the table would be dropped
// by every sum, copy and check: the table must name every int64 field.
TEST(SiblingShareFieldsTest, TableNamesEveryInt64FieldOfTheProto) {
  std::set<std::string> in_table;
  for (const SiblingShareField& f : kSiblingShareFields) in_table.emplace(f.name);
  std::set<std::string> in_proto;
  const auto* descriptor = v1::SiblingShare::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    if (descriptor->field(i)->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT64) {
      in_proto.insert(descriptor->field(i)->name());
    }
  }
  EXPECT_EQ(in_table, in_proto);
  EXPECT_EQ(kSiblingShareFields[kForcedIdleField].name, "forced_idle_ns");
}

TEST(SiblingShareFieldsTest, AddSumsFiguresAndKeepsTheLongestForeignStretch) {
  v1::SiblingShare sum = Share(100, 40, 30, 20, 10, 2, 7);
  AddSiblingShare(Share(50, 10, 10, 25, 5, 3, 4), sum);
  EXPECT_EQ(sum.run_ns(), 150);
  EXPECT_EQ(sum.same_ns(), 50);
  EXPECT_EQ(sum.idle_ns(), 40);
  EXPECT_EQ(sum.foreign_ns(), 45);
  EXPECT_EQ(sum.unknown_ns(), 15);
  EXPECT_EQ(sum.foreign_intervals(), 5);
  EXPECT_EQ(sum.longest_foreign_ns(), 7);  // the longer one, not 11
}

TEST(SiblingShareFieldsTest, ForcedIdleAddsOnlyWhereMeasured) {
  v1::SiblingShare sum;
  v1::SiblingShare unmeasured = Share(10, 0, 0, 0, 0, 0, 0);
  unmeasured.set_forced_idle_ns(999);  // garbage without forced_idle_known
  AddSiblingShare(unmeasured, sum);
  EXPECT_FALSE(sum.forced_idle_known());
  EXPECT_EQ(sum.forced_idle_ns(), 0);
  v1::SiblingShare measured = Share(10, 0, 0, 0, 0, 0, 0);
  measured.set_forced_idle_ns(3);
  measured.set_forced_idle_known(true);
  AddSiblingShare(measured, sum);
  AddSiblingShare(unmeasured, sum);
  EXPECT_TRUE(sum.forced_idle_known());
  EXPECT_EQ(sum.forced_idle_ns(), 3);
  EXPECT_EQ(sum.run_ns(), 30);
}

TEST(SiblingShareFieldsTest, SumsSaturateInsteadOfWrapping) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  v1::SiblingShare sum = Share(kMax - 1, 0, 0, 0, 0, 0, 0);
  AddSiblingShare(Share(5, 0, 0, 0, 0, 0, 0), sum);
  EXPECT_EQ(sum.run_ns(), kMax);
  EXPECT_EQ(SaturatingAdd(kMax, kMax), kMax);
  EXPECT_EQ(SaturatingAdd(-3, 5), 2);
}

TEST(SiblingShareFieldsTest, ValidateNamesTheNegativeFigure) {
  EXPECT_OK(ValidateSiblingShare("stats[0].vms[1].share", Share(100, 40, 30, 20, 10, 2, 7)));
  for (const SiblingShareField& f : kSiblingShareFields) {
    v1::SiblingShare s = Share(100, 10, 10, 10, 10, 1, 1);
    (s.*f.set)(-1);
    absl::Status status = ValidateSiblingShare("w.share", s);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << f.name;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("w.share.", f.name, " must not be negative")));
  }
}

TEST(SiblingShareFieldsTest, ValidateRefusesPartsBeyondRunTime) {
  absl::Status status = ValidateSiblingShare("w.share", Share(100, 40, 30, 20, 11, 0, 0));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("w.share same_ns + idle_ns + foreign_ns + unknown_ns must not exceed run_ns"));
  // Parts near INT64_MAX each must not overflow the check into passing.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_FALSE(ValidateSiblingShare("w.share", Share(kMax, kMax, kMax, kMax, kMax, 0, 0)).ok());
}

}  // namespace
}  // namespace cosched
