#include "telemetry/topology.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>
#include "tests/testing/status_matchers.h"

namespace cosched::telemetry {
namespace {

TEST(CpuTopology, GroupsSiblingsIntoCores) {
  // x86 numbering: CPU c and c + 2 share a core.
  auto t = CpuTopology::Parse("0,2\n1,3\n0,2\n1,3\n", "topo");
  ASSERT_OK(t);
  EXPECT_EQ(t->num_cpus(), 4);
  EXPECT_EQ(t->num_cores(), 2);
  EXPECT_EQ(t->core_of(2), 0);
  EXPECT_EQ(t->core_of(3), 1);
  std::span<const int> core1 = t->core_cpus(1);
  EXPECT_EQ(std::vector<int>(core1.begin(), core1.end()), (std::vector<int>{1, 3}));
  CpuTopology no_smt = CpuTopology::NoSmt(3);
  EXPECT_EQ(no_smt.num_cores(), 3);
}

TEST(CpuTopology, ErrorsNameFileAndLine) {
  struct Case {
    std::string text;
    std::string message;
  } cases[] = {
      {"0-1\n0-1\nx\n", "topo.txt:3: cpu 2: malformed CPU list \"x\": \"x\" is not a CPU id"},
      {"0-1\n1\n", "topo.txt:2: cpu 1: its siblings list disagrees with that of cpu 0"},
      {"0-1\n0-1\n3\n", "topo.txt:3: cpu 2: its siblings list leaves it out"},
      {"0-2\n0-2\n", "topo.txt:1: cpu 0: sibling 2 is not among the 2 CPUs"},
      {"0-1\n\n0-1\n", "topo.txt:2: empty line"},
      {"", "topo.txt: no CPUs"},
      // Refused on its line (fuzz/regressions/topology_fuzz: 500 such lines
      // took seconds before the siblings check).
      {"0-8\n", "topo.txt:1: cpu 0: 9 siblings; a core has at most 8 threads"},
  };
  for (const Case& c : cases) {
    auto t = CpuTopology::Parse(c.text, "topo.txt");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_NE(std::string(t.status().message()).find(c.message), std::string::npos)
        << t.status() << " wanted " << c.message;
  }
}

}  // namespace
}  // namespace cosched::telemetry
