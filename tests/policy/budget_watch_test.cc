#include "policy/budget_watch.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::policy {
namespace {

using ::testing::HasSubstr;

TEST(BudgetWatchTest, BreachNeedsConsecutiveWindowsOverBudget) {
  BudgetWatch watch({.windows = 3});
  watch.Observe(7, 5);
  watch.Observe(9, 5);
  EXPECT_FALSE(watch.breached());
  watch.Observe(4, 5);  // back under: the run starts again
  EXPECT_EQ(watch.consecutive_over(), 0);
  watch.Observe(6, 5);
  watch.Observe(6, 5);
  EXPECT_FALSE(watch.breached());
  watch.Observe(5.01, 5);
  EXPECT_TRUE(watch.breached());
  watch.Reset();
  EXPECT_FALSE(watch.breached());
}

TEST(BudgetWatchTest, AtTheBudgetOrWithoutOneIsNeverABreach) {
  BudgetWatch watch({.windows = 1});
  watch.Observe(5, 5);
  EXPECT_FALSE(watch.breached());
  watch.Observe(90, std::nullopt);
  EXPECT_FALSE(watch.breached());
}

TEST(BudgetWatchTest, AWindowWithoutAFigureNeitherBreaksNorExtendsARun) {
  BudgetWatch watch({.windows = 2});
  watch.Observe(8, 5);
  watch.Observe(std::nan(""), 5);
  EXPECT_EQ(watch.consecutive_over(), 1);
  watch.Observe(8, 5);
  EXPECT_TRUE(watch.breached());
}

TEST(BudgetWatchTest, ValidateNamesTheField) {
  EXPECT_OK(ValidateBudgetWatch({.windows = 3}));
  EXPECT_THAT(ValidateBudgetWatch({.windows = 0}).message(),
              HasSubstr("engine.budget_windows must be between 1 and 100"));
}

}  // namespace
}  // namespace cosched::policy
