#include "cli/analyze.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "cli/csctl.h"
#include "nlohmann/json.hpp"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace cosched::cli {
namespace {

// The issue's example shapes: one core (CPUs 0, 1); vm-a has tids 10, 11,
// vm-b tid 20, tid 21 is a host task.
constexpr std::string_view kTrace = R"(# tracer: nop
#
          <idle>-0       [000] d..2.   100.000000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=CPU 0/KVM next_pid=10 next_prio=120
          <idle>-0       [001] d..2.   100.000100: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=CPU 0/KVM next_pid=20 next_prio=120
       CPU 0/KVM-20      [001] d..2.   100.001100: sched_switch: prev_comm=CPU 0/KVM prev_pid=20 prev_prio=120 prev_state=S ==> next_comm=CPU 1/KVM next_pid=11 next_prio=120
          <idle>-0       [001] d..2.   100.001100: sched_wakeup: comm=x pid=5 prio=120 target_cpu=001
       CPU 1/KVM-11      [001] d..2.   100.002100: sched_switch: prev_comm=CPU 1/KVM prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=kworker/1:1 next_pid=21 next_prio=120
       CPU 0/KVM-10      [000] d..2.   100.003100: sched_switch: prev_comm=CPU 0/KVM prev_pid=10 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
     kworker/1:1-21      [001] d..2.   100.004100: sched_switch: prev_comm=kworker/1:1 prev_pid=21 prev_prio=120 prev_state=I ==> next_comm=swapper/1 next_pid=0 next_prio=120
)";

class AnalyzeTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, std::string_view text) {
    std::ofstream(dir_.Sub(name)) << text;
    return dir_.Sub(name);
  }
  AnalyzeArgs Args() {
    return {Write("trace", kTrace), Write("topology", "0-1\n0-1\n"), Write("threads", "10 vm-a\n11 vm-a\n20 vm-b\n")};
  }
  cosched::testing::TempDir dir_;
};

TEST_F(AnalyzeTest, JsonHasOneObjectPerVmWithTheIssueKeys) {
  std::ostringstream out, err;
  ASSERT_EQ(RunAnalyze(Args(), OutputFormat::kJson, out, err), kExitOk) << err.str();
  EXPECT_EQ(err.str(), "");
  nlohmann::json list = nlohmann::json::parse(out.str());
  ASSERT_TRUE(list.is_array());
  ASSERT_EQ(list.size(), 3u);  // vm-a, vm-b, host
  for (const auto& o : list) {
    ASSERT_TRUE(o.is_object());
    EXPECT_EQ(o.size(), 8u) << o.dump();
    EXPECT_TRUE(o["vm"].is_string());
    for (const char* key : {"runtime_ns", "foreign_intervals", "longest_foreign_ns"})
      EXPECT_TRUE(o[key].is_number_integer()) << key;
    for (const char* key : {"same_pct", "idle_pct", "foreign_pct", "unknown_pct"})
      EXPECT_TRUE(o[key].is_number()) << key;
  }
  // vm-a: tid 10 on cpu 0 for 3.1 ms: 0.1 ms unknown, 1 ms beside vm-b,
  // 1 ms beside its own tid 11, 1 ms beside the host task.
  const auto& a = list[0];
  EXPECT_EQ(a["vm"], "vm-a");
  // tid 11 ran 1 ms beside tid 10: same.
  EXPECT_EQ(a["runtime_ns"], 4'100'000);
  EXPECT_NEAR(a["same_pct"].get<double>(), 100.0 * 2'000'000 / 4'100'000, 1e-3);
  EXPECT_NEAR(a["unknown_pct"].get<double>(), 100.0 * 100'000 / 4'100'000, 1e-3);
  EXPECT_NEAR(a["foreign_pct"].get<double>(), 100.0 * 2'000'000 / 4'100'000, 1e-3);
  EXPECT_EQ(a["foreign_intervals"], 2);
  EXPECT_EQ(a["longest_foreign_ns"], 1'000'000);
  EXPECT_EQ(list[1]["vm"], "vm-b");
  EXPECT_EQ(list[1]["runtime_ns"], 1'000'000);
  EXPECT_EQ(list[1]["foreign_pct"], 100.0);
  EXPECT_EQ(list[2]["vm"], "host");
}

TEST_F(AnalyzeTest, FromToCountsOnlyTheSpanWithTheStateBeforeIt) {
  AnalyzeArgs args = Args();
  args.from = "100.001100";
  args.to = "100.0031";
  auto result = AnalyzeTrace(args);
  ASSERT_OK(result);
  ASSERT_EQ(result->groups.size(), 3u);
  // vm-a in [100.0011, 100.0031): tid 10 on cpu 0 for 2 ms, beside its own
  // tid 11 (1 ms) then the host task; tid 11 on cpu 1 for 1 ms beside tid
  // 10. Nothing is unknown: cpu 0's task was known from before the span.
  EXPECT_EQ(result->groups[0].vm, "vm-a");
  const auto& a = result->groups[0].stats;
  EXPECT_EQ(a.run_ns, 3'000'000);
  EXPECT_EQ(a.same_ns, 2'000'000);
  EXPECT_EQ(a.foreign_ns, 1'000'000);
  EXPECT_EQ(a.unknown_ns, 0);
  EXPECT_EQ(a.foreign_intervals, 1);
  // vm-b ran only before the span.
  EXPECT_EQ(result->groups[1].vm, "vm-b");
  EXPECT_EQ(result->groups[1].stats.run_ns, 0);
  EXPECT_EQ(result->groups[2].vm, "host");
  EXPECT_EQ(result->groups[2].stats.run_ns, 1'000'000);
  EXPECT_EQ(result->window.start_ns, 100'001'100'000);
  EXPECT_EQ(result->window.end_ns, 100'003'100'000);
}

TEST_F(AnalyzeTest, FromToMustBeSecondsInOrder) {
  EXPECT_EQ(*ParseTraceSeconds("--from", "12.5"), 12'500'000'000);
  EXPECT_EQ(*ParseTraceSeconds("--from", "7"), 7'000'000'000);
  EXPECT_EQ(*ParseTraceSeconds("--to", "1764460000.000000001"), 1'764'460'000'000'000'001);
  for (const char* bad : {"", "-1", "1.", ".5", "1.2.3", "abc", "1.0000000001", "99999999999"}) {
    auto parsed = ParseTraceSeconds("--from", bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("--from"), std::string::npos);
  }
  AnalyzeArgs args = Args();
  args.from = "100.003";
  args.to = "100.001";
  std::ostringstream out, err;
  EXPECT_EQ(RunAnalyze(args, OutputFormat::kJson, out, err), kExitUsage);
  EXPECT_NE(err.str().find("--from 100.003 must be before --to 100.001"), std::string::npos)
      << err.str();
}

TEST_F(AnalyzeTest, TableForPeople) {
  std::ostringstream out, err;
  ASSERT_EQ(RunAnalyze(Args(), OutputFormat::kTable, out, err), kExitOk) << err.str();
  EXPECT_NE(out.str().find("6 sched_switch events"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("FOREIGN%"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("vm-a"), std::string::npos) << out.str();
}

TEST_F(AnalyzeTest, WithoutThreadsFileEachThreadIsAGroup) {
  AnalyzeArgs args = Args();
  args.threads_path.clear();
  auto result = AnalyzeTrace(args);
  ASSERT_OK(result);
  EXPECT_EQ(result->grouping, "thread");
  ASSERT_EQ(result->groups.size(), 4u);  // 10, 11, 20, 21 by run time
  EXPECT_EQ(result->groups[0].vm, "10");
}

// The same trace with the record-tgid column: vm-a's threads 10 and 11 are
// process 9, vm-b's 20 process 19, the host task 21 process 21.
constexpr std::string_view kTgidTrace = R"(# tracer: nop
#
          <idle>-0       (-------) [000] d..2.   100.000000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=CPU 0/KVM next_pid=10 next_prio=120
          <idle>-0       (-------) [001] d..2.   100.000100: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=CPU 0/KVM next_pid=20 next_prio=120
       CPU 0/KVM-20      (     19) [001] d..2.   100.001100: sched_switch: prev_comm=CPU 0/KVM prev_pid=20 prev_prio=120 prev_state=S ==> next_comm=CPU 1/KVM next_pid=11 next_prio=120
       CPU 1/KVM-11      (      9) [001] d..2.   100.002100: sched_switch: prev_comm=CPU 1/KVM prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=kworker/1:1 next_pid=21 next_prio=120
       CPU 0/KVM-10      (      9) [000] d..2.   100.003100: sched_switch: prev_comm=CPU 0/KVM prev_pid=10 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
     kworker/1:1-21      (     21) [001] d..2.   100.004100: sched_switch: prev_comm=kworker/1:1 prev_pid=21 prev_prio=120 prev_state=I ==> next_comm=swapper/1 next_pid=0 next_prio=120
)";

// "tgid:" lines name every thread of a process the trace saw, as listing
// each of them does; a thread's own line wins over its process's.
TEST_F(AnalyzeTest, AProcessLineMapsEveryThreadOfItAsTheirOwnLinesWould) {
  AnalyzeArgs by_thread = Args();
  by_thread.trace_path = Write("tgid-trace", kTgidTrace);
  AnalyzeArgs by_process = by_thread;
  by_process.threads_path = Write("process-threads", "tgid:9 vm-a\n20 vm-b\n");
  std::ostringstream out_thread, out_process, err;
  ASSERT_EQ(RunAnalyze(by_thread, OutputFormat::kJson, out_thread, err), kExitOk) << err.str();
  ASSERT_EQ(RunAnalyze(by_process, OutputFormat::kJson, out_process, err), kExitOk) << err.str();
  EXPECT_EQ(out_process.str(), out_thread.str());
  EXPECT_NE(out_process.str().find("\"vm-a\""), std::string::npos);

  by_process.threads_path = Write("process-threads", "tgid:9 vm-a\n11 vm-c\n20 vm-b\n");
  auto result = AnalyzeTrace(by_process);
  ASSERT_OK(result);
  std::map<std::string, int64_t> runtime;
  for (const AnalyzedGroup& g : result->groups) runtime[g.vm] = g.stats.run_ns;
  EXPECT_EQ(runtime["vm-a"], 3'100'000);  // tid 10 alone
  EXPECT_EQ(runtime["vm-c"], 1'000'000);  // tid 11
  EXPECT_EQ(runtime["vm-b"], 1'000'000);

  // Without the record-tgid column no thread could be found by process.
  AnalyzeArgs untagged = Args();
  untagged.threads_path = Write("process-threads", "tgid:9 vm-a\n");
  std::ostringstream out;
  std::ostringstream refused;
  EXPECT_EQ(RunAnalyze(untagged, OutputFormat::kJson, out, refused), kExitUsage);
  EXPECT_NE(refused.str().find("'tgid:' lines need the trace's record-tgid column"),
            std::string::npos)
      << refused.str();
}

TEST_F(AnalyzeTest, BadInputsNameFileAndLine) {
  struct Case {
    std::string topology, threads, message;
  } cases[] = {
      {"0-1\nzz\n", "", "topology:2: cpu 1: malformed CPU list \"zz\": \"zz\" is not a CPU id"},
      {"0-1\n0-1\n", "10 vm-a\nten vm-b\n", "threads:2: TID must be a positive thread id"},
      {"0-1\n0-1\n", "10 vm-a\n10 vm-b\n", "threads:2: thread 10 is already mapped to VM 'vm-a'"},
      {"0-1\n0-1\n", "10\n", "threads:1: expected 'TID VM_ID' or 'tgid:TGID VM_ID'"},
      {"0-1\n0-1\n", "tgid:x vm-a\n", "threads:1: TGID must be a positive process id"},
      {"0-1\n0-1\n", "tgid:9 vm-a\ntgid:9 vm-b\n",
       "threads:2: process 9 is already mapped to VM 'vm-a'"},
  };
  for (const Case& c : cases) {
    AnalyzeArgs args = Args();
    args.topology_path = Write("topology", c.topology);
    args.threads_path = c.threads.empty() ? "" : Write("threads", c.threads);
    std::ostringstream out, err;
    EXPECT_EQ(RunAnalyze(args, OutputFormat::kJson, out, err), kExitUsage);
    EXPECT_NE(err.str().find(c.message), std::string::npos) << err.str();
    EXPECT_EQ(err.str().rfind("csctl: ", 0), 0u);
  }
  AnalyzeArgs missing = Args();
  missing.trace_path = dir_.Sub("nope");
  std::ostringstream out, err;
  EXPECT_EQ(RunAnalyze(missing, OutputFormat::kJson, out, err), kExitUsage);
  EXPECT_NE(err.str().find("cannot read trace " + dir_.Sub("nope")), std::string::npos) << err.str();
}

TEST_F(AnalyzeTest, WarnsAboutMalformedLinesAndLostEvents) {
  AnalyzeArgs args = Args();
  std::string trace(kTrace);
  trace += "  x-1 [000] d..2. 100.005: sched_switch: prev_comm=x prev_pid=oops\nCPU:1 [LOST 3 EVENTS]\n";
  args.trace_path = Write("trace", trace);
  std::ostringstream out, err;
  ASSERT_EQ(RunAnalyze(args, OutputFormat::kJson, out, err), kExitOk);
  EXPECT_NE(err.str().find("1 unreadable sched_switch line(s), first at line 10"), std::string::npos)
      << err.str();
  EXPECT_NE(err.str().find("lost 3 event(s)"), std::string::npos) << err.str();
}

TEST_F(AnalyzeTest, CsctlRunsAnalyzeWithoutCsd) {
  AnalyzeArgs args = Args();
  CsctlEnvironment env;
  env.get_env = [](const std::string&) { return std::string(); };
  env.file_exists = [](const std::string&) { return false; };
  env.make_stub = [](const ConnectionSettings&) -> absl::StatusOr<std::unique_ptr<Stub>> {
    ADD_FAILURE() << "analyze must not connect";
    return absl::UnavailableError("no");
  };
  const char* argv[] = {"csctl",      "analyze",          args.trace_path.c_str(),
                        "--topology", args.topology_path.c_str(), "--threads",
                        args.threads_path.c_str(), "-o", "json"};
  std::ostringstream out, err;
  ASSERT_EQ(RunCsctl(9, argv, env, out, err), kExitOk) << err.str();
  EXPECT_EQ(nlohmann::json::parse(out.str()).size(), 3u);

  const char* no_topology[] = {"csctl", "analyze", args.trace_path.c_str()};
  std::ostringstream out2, err2;
  EXPECT_EQ(RunCsctl(3, no_topology, env, out2, err2), kExitUsage);
  EXPECT_NE(err2.str().find("--topology"), std::string::npos) << err2.str();
}

}  // namespace
}  // namespace cosched::cli
