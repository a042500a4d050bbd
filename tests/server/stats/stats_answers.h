// A recorded day of stats windows and the answers csd's StatsAggregator
// gives on it (#36): a fixed, seeded day and two hours of three hosts'
// Reports (VMs that come, go, migrate and are reported by UUID; windows of
// several lengths, batched, late and with gaps; a host silent for 40
// minutes; per-core shares, lost events, dropped windows), every query kind
// asked at 34 points of that time at several spans. One line per answer:
// its figures and a digest of the whole answer.
//
// StatsAnswers.AreTheRecordedOnes compares them with
// testdata/stats_answers.golden, recorded from the code before the stats'
// memory layout changed; record_stats_answers writes that file anew (only
// when answers are meant to change; say why in the commit):
//   build/tests/server/record_stats_answers tests/server/stats/testdata/stats_answers.golden
#ifndef COSCHED_TESTS_SERVER_STATS_STATS_ANSWERS_H_
#define COSCHED_TESTS_SERVER_STATS_STATS_ANSWERS_H_

#include <string>
#include <vector>

namespace cosched::server {

std::vector<std::string> RecordedStatsAnswers();

}  // namespace cosched::server

#endif  // COSCHED_TESTS_SERVER_STATS_STATS_ANSWERS_H_
