// The product computation (telemetry/, through `csctl analyze`) against the
// lab's independent one (tests/lab/sibling_share.h) on generated trace
// files: both must agree within 0.01 percentage points.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "cli/analyze.h"
#include "sibling_share.h"  // the lab's, tests/lab
#include "tests/telemetry/trace_fixtures.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace cosched::telemetry {
namespace {

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

lab::SiblingShareReport RunLab(const std::string& trace_path, const testing::GeneratedTrace& trace,
                               std::map<int64_t, std::string> tid_group) {
  lab::SiblingShareInput in;
  lab::ParseTraceText(ReadFile(trace_path), &in);
  std::map<int, std::vector<int>> lists;
  for (int cpu = 0; cpu < trace.num_cpus; ++cpu) lists[cpu] = trace.sibling_lists[cpu];
  in.siblings = lab::SiblingsFromLists(lists);
  in.tid_group = std::move(tid_group);
  return lab::ComputeSiblingShare(std::move(in));
}

void ExpectAgreement(const cli::AnalyzeResult& product, const lab::SiblingShareReport& lab,
                     size_t expected_groups) {
  size_t compared = 0;
  for (const cli::AnalyzedGroup& g : product.groups) {
    if (g.vm == "host") continue;  // the lab does not account unmapped threads
    auto it = lab.groups.find(g.vm);
    ASSERT_NE(it, lab.groups.end()) << g.vm;
    const auto& l = it->second;
    const SiblingShareStats& p = g.stats;
    SCOPED_TRACE(g.vm);
    EXPECT_GT(p.run_ns, 0);
    EXPECT_NEAR(p.Pct(p.same_ns), l.Pct(l.same_ns), 0.01);
    EXPECT_NEAR(p.Pct(p.idle_ns), l.Pct(l.idle_ns), 0.01);
    EXPECT_NEAR(p.Pct(p.foreign_ns), l.Pct(l.foreign_ns), 0.01);
    EXPECT_NEAR(p.Pct(p.unknown_ns), l.Pct(l.unknown_ns), 0.01);
    // Same definitions, same input: the counts agree exactly.
    EXPECT_EQ(p.run_ns, l.run_ns);
    EXPECT_EQ(p.foreign_intervals, l.foreign_intervals);
    EXPECT_EQ(p.longest_foreign_ns, l.longest_foreign_ns);
    ++compared;
  }
  EXPECT_EQ(compared, expected_groups);
  EXPECT_EQ(product.window.inconsistent_events, lab.inconsistent_events);
}

testing::GenerateOptions Options() {
  testing::GenerateOptions o;
  o.cores = 4;
  o.vms = 4;
  o.threads_per_vm = 3;
  o.host_tasks = 6;
  o.events = 200'000;
  o.seed = 42;
  return o;
}

TEST(Agreement, AnalyzeWithThreadsFileMatchesTheLab) {
  testing::GeneratedTrace trace = testing::GenerateTrace(Options());
  cosched::testing::TempDir dir;
  cli::AnalyzeArgs args{dir.Sub("trace"), dir.Sub("topology"), dir.Sub("threads")};
  WriteFile(args.trace_path, trace.Text());
  WriteFile(args.topology_path, trace.TopologyText());
  WriteFile(args.threads_path, trace.ThreadsText());

  auto product = cli::AnalyzeTrace(args);
  ASSERT_OK(product);
  EXPECT_EQ(product->counts.events, 200'000);
  EXPECT_EQ(product->counts.malformed, 0);
  std::map<int64_t, std::string> tid_group(trace.tid_vm.begin(), trace.tid_vm.end());
  lab::SiblingShareReport lab = RunLab(args.trace_path, trace, tid_group);
  ExpectAgreement(*product, lab, 4);
  // The figures are not trivial: every category is exercised.
  const SiblingShareStats& vm0 = product->groups[0].stats;
  EXPECT_GT(vm0.same_ns, 0);
  EXPECT_GT(vm0.idle_ns, 0);
  EXPECT_GT(vm0.foreign_ns, 0);
  EXPECT_GT(vm0.unknown_ns, 0);
  EXPECT_GT(vm0.foreign_intervals, 100);
}

TEST(Agreement, AnalyzeByTgidMatchesTheLab) {
  testing::GenerateOptions options = Options();
  options.seed = 7;
  testing::GeneratedTrace trace = testing::GenerateTrace(options);
  cosched::testing::TempDir dir;
  cli::AnalyzeArgs args{dir.Sub("trace"), dir.Sub("topology"), ""};
  WriteFile(args.trace_path, trace.Text(/*with_tgid=*/true));
  WriteFile(args.topology_path, trace.TopologyText());

  auto product = cli::AnalyzeTrace(args);
  ASSERT_OK(product);
  EXPECT_EQ(product->grouping, "tgid");
  std::map<int64_t, std::string> tid_group;
  for (const auto& [tid, tgid] : trace.tid_tgid) tid_group[tid] = std::to_string(tgid);
  lab::SiblingShareReport lab = RunLab(args.trace_path, trace, tid_group);
  ExpectAgreement(*product, lab, 4 + 6);  // 4 VMs, 6 host tasks of their own
}

}  // namespace
}  // namespace cosched::telemetry
