// The stats answers on the recorded day of windows (stats_answers.h) are
// those recorded in testdata/stats_answers.golden from the code before the
// stats' memory layout changed: a change of how buckets are kept must not
// change a single answer.
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/stats/stats_answers.h"

namespace cosched::server {
namespace {

TEST(StatsAnswers, AreTheRecordedOnes) {
  const std::vector<std::string> got = RecordedStatsAnswers();
  ASSERT_GT(got.size(), 500u);
  std::ifstream in(COSCHED_STATS_GOLDEN);
  ASSERT_TRUE(in.good()) << "cannot read " << COSCHED_STATS_GOLDEN;
  std::vector<std::string> want;
  for (std::string line; std::getline(in, line);) want.push_back(line);
  ASSERT_EQ(got.size(), want.size());
  int differing = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (++differing <= 5) ADD_FAILURE() << "answer " << i << "\n got: " << got[i] << "\nwant: " << want[i];
  }
  EXPECT_EQ(differing, 0) << "of " << got.size() << " answers";
}

}  // namespace
}  // namespace cosched::server
