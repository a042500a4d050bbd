// Writes the recorded day's stats answers (stats_answers.h) to the file
// named by its argument: how testdata/stats_answers.golden is recorded.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "tests/server/stats/stats_answers.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  const std::vector<std::string> answers = cosched::server::RecordedStatsAnswers();
  std::ofstream out(argv[1]);
  out << absl::StrJoin(answers, "\n") << "\n";
  if (!out.good()) {
    std::fprintf(stderr, "%s: cannot write %s\n", argv[0], argv[1]);
    return 1;
  }
  std::printf("%zu answers recorded to %s\n", answers.size(), argv[1]);
  return 0;
}
