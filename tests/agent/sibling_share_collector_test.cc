#include "agent/sibling_share_collector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "host/testing/pseudo_fs_fake.h"
#include "host/testing/sched_trace_fake.h"
#include "tests/telemetry/trace_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace cosched::agent {
namespace {

using telemetry::SchedSwitch;
using telemetry::testing::BuildPages;
using telemetry::testing::kHeaderPage;
using telemetry::testing::kSchedSwitchFormat;
using telemetry::testing::PageBuilder;

constexpr int64_t kT = 1'000'000'000;  // trace clock at the first event
constexpr int64_t kUnixOffset = 1'700'000'000'000'000'000;

// The shape of the lab host: 2 cores x 2 siblings.
v1::Topology TwoByTwo(std::vector<std::vector<int>> cores) {
  v1::Topology topology;
  for (const auto& cpus : cores) {
    v1::Core* core = topology.add_cores();
    for (int cpu : cpus) core->add_cpus(cpu);
  }
  return topology;
}

host::SchedTraceFormat Format(int num_cpus) {
  host::SchedTraceFormat format;
  format.sched_switch_format = std::string(kSchedSwitchFormat);
  format.header_page = std::string(kHeaderPage);
  format.page_size = telemetry::testing::kPageSize;
  format.num_cpus = num_cpus;
  return format;
}

SchedSwitch Ev(int64_t t, int cpu, int32_t prev, int32_t next) {
  return {kT + t, cpu, prev, next, 0};
}

class CollectorTest : public ::testing::Test {
 protected:
  CollectorTest() : trace_(Format(4)) {
    layout_ = *telemetry::SchedSwitchLayout::FromFormat(kSchedSwitchFormat);
    fs_.SetFile("/proc/sys/kernel/sched_schedstats", "0\n");
    trace_.SetUnixOffsetNs(kUnixOffset);
    // vm-a and vm-b share trust group t1; vm-c is t2; 900 is a host task.
    vms_ = {{"vm-a", "t1", {100, 101}, ""}, {"vm-b", "t1", {200}, ""}, {"vm-c", "t2", {300}, ""}};
  }

  std::unique_ptr<SiblingShareCollector> Make(v1::Topology topology,
                                              SiblingShareCollectorOptions options = {}) {
    return std::make_unique<SiblingShareCollector>(
        options, std::move(topology), &trace_, &fs_,
        [this]() -> absl::StatusOr<std::vector<CollectedVm>> {
          if (!vms_status_.ok()) return vms_status_;
          return vms_;
        },
        &queue_);
  }

  // Serves `events` as the ring-buffer pages of their CPUs.
  void Serve(const std::vector<SchedSwitch>& events) {
    std::map<int, std::vector<SchedSwitch>> by_cpu;
    for (const SchedSwitch& ev : events) by_cpu[ev.cpu].push_back(ev);
    for (const auto& [cpu, list] : by_cpu)
      for (auto& page : BuildPages(layout_, list)) trace_.AddPage(cpu, std::move(page));
  }

  static const v1::VMStats* Vm(const v1::StatsWindow& w, const std::string& id) {
    for (const v1::VMStats& vm : w.vms())
      if (vm.vm_id() == id) return &vm;
    return nullptr;
  }

  host::FakeSchedTrace trace_;
  host::FakePseudoFs fs_;
  StatsWindowQueue queue_;
  std::vector<CollectedVm> vms_;
  absl::Status vms_status_;
  telemetry::SchedSwitchLayout layout_;
};

// Core 0 is CPUs 0-1, core 1 CPUs 2-3. vm-a on CPU 0 has vm-b (same trust
// group) then vm-c (another) then nothing beside it; on CPU 2 a host task
// then nothing.
std::vector<SchedSwitch> Scenario() {
  return {Ev(0, 0, 0, 100),    Ev(0, 1, 0, 200),    Ev(0, 2, 0, 101),
          Ev(0, 3, 0, 900),    Ev(500, 3, 900, 0),  Ev(1000, 1, 200, 300),
          Ev(1500, 1, 300, 0), Ev(2000, 0, 100, 0), Ev(2000, 2, 101, 0)};
}

TEST_F(CollectorTest, SplitsEachVmsRunTimeBySiblingPerTrustGroup) {
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}));
  trace_.SetNowNs(kT - 1000);
  ASSERT_OK(collector->Open());
  EXPECT_EQ(trace_.options().buffer_size_kb, 1024);
  Serve(Scenario());
  trace_.SetNowNs(kT + 3000 + 2'000'000);  // the watermark is 2 ms earlier
  EXPECT_EQ(collector->Poll(), 9);
  collector->CloseWindow();

  ASSERT_EQ(queue_.size(), 1u);
  const v1::StatsWindow w = *queue_.latest();
  EXPECT_EQ(w.start_unix_ns(), kUnixOffset + kT - 1000);
  EXPECT_EQ(w.end_unix_ns(), kUnixOffset + kT + 3000);
  EXPECT_EQ(w.events(), 9);
  EXPECT_EQ(w.lost_events(), 0);
  ASSERT_EQ(w.vms_size(), 3);  // the host is not reported
  const v1::SiblingShare& a = Vm(w, "vm-a")->share();
  EXPECT_EQ(a.run_ns(), 4000);
  EXPECT_EQ(a.same_ns(), 1000);
  EXPECT_EQ(a.foreign_ns(), 1000);
  EXPECT_EQ(a.idle_ns(), 2000);
  EXPECT_EQ(a.unknown_ns(), 0);
  EXPECT_EQ(a.foreign_intervals(), 2);
  EXPECT_EQ(a.longest_foreign_ns(), 500);
  EXPECT_FALSE(a.forced_idle_known());
  const v1::SiblingShare& b = Vm(w, "vm-b")->share();
  EXPECT_EQ(b.run_ns(), 1000);
  EXPECT_EQ(b.same_ns(), 1000);
  const v1::SiblingShare& c = Vm(w, "vm-c")->share();
  EXPECT_EQ(c.run_ns(), 500);
  EXPECT_EQ(c.foreign_ns(), 500);
  EXPECT_EQ(c.foreign_intervals(), 1);

  ASSERT_EQ(w.cores_size(), 2);
  EXPECT_EQ(w.cores(0).core(), 0);
  EXPECT_EQ(w.cores(0).both_busy_ns(), 1500);
  EXPECT_EQ(w.cores(0).one_idle_ns(), 500);
  EXPECT_EQ(w.cores(0).both_idle_ns(), 1000);
  EXPECT_EQ(w.cores(1).core(), 1);
  EXPECT_EQ(w.cores(1).both_busy_ns(), 500);
  EXPECT_EQ(w.cores(1).one_idle_ns(), 1500);
  EXPECT_EQ(w.cores(1).both_idle_ns(), 1000);
}

// The same host numbered as most x86 machines are (siblings c and c + 2),
// and the events delivered over several polls, each page only once its
// time has come: the same numbers.
TEST_F(CollectorTest, SameNumbersWhenEventsArriveOverPollsOnInterleavedSiblings) {
  auto collector = Make(TwoByTwo({{0, 2}, {1, 3}}));
  trace_.SetNowNs(kT - 1000);
  ASSERT_OK(collector->Open());
  // CPU n of the scenario becomes: 0 -> 0, 1 -> 2, 2 -> 1, 3 -> 3.
  const int renumber[] = {0, 2, 1, 3};
  std::vector<SchedSwitch> events = Scenario();
  for (SchedSwitch& ev : events) ev.cpu = renumber[ev.cpu];
  int64_t served = -1;
  for (int64_t until : {600, 1200, 3000}) {
    std::vector<SchedSwitch> batch;
    for (const SchedSwitch& ev : events)
      if (ev.ts_ns <= kT + until && ev.ts_ns > kT + served) batch.push_back(ev);
    served = until;
    Serve(batch);
    trace_.SetNowNs(kT + until + 2'000'000);
    collector->Poll();
  }
  collector->CloseWindow();
  const v1::StatsWindow w = *queue_.latest();
  const v1::SiblingShare& a = Vm(w, "vm-a")->share();
  EXPECT_EQ(a.run_ns(), 4000);
  EXPECT_EQ(a.same_ns(), 1000);
  EXPECT_EQ(a.foreign_ns(), 1000);
  EXPECT_EQ(a.idle_ns(), 2000);
  EXPECT_EQ(a.foreign_intervals(), 2);
  ASSERT_EQ(w.cores_size(), 2);
  EXPECT_EQ(w.cores(0).both_busy_ns(), 1500);  // CPUs 0 and 2
  EXPECT_EQ(w.cores(1).both_busy_ns(), 500);   // CPUs 1 and 3
  EXPECT_EQ(w.events(), 9);
}

// A random schedule on 2 x 2 CPUs, read live with windows closing as the
// clock moves, adds up to what the offline computation (csctl analyze's)
// finds over the whole trace, VM by VM and core by core.
TEST_F(CollectorTest, WindowsAddUpToTheOfflineComputation) {
  telemetry::testing::GenerateOptions gen;
  gen.cores = 2;
  gen.events = 20000;
  gen.max_run_ns = 200'000;
  gen.start_ns = kT;
  telemetry::testing::GeneratedTrace trace = telemetry::testing::GenerateTrace(gen);
  vms_.clear();
  std::map<std::string, CollectedVm> by_vm;
  for (const auto& [tid, vm] : trace.tid_vm) {
    by_vm[vm].vm_id = vm;
    by_vm[vm].trust_group = "group-of-" + vm;
    by_vm[vm].tids.push_back(tid);
  }
  for (auto& [id, vm] : by_vm) vms_.push_back(vm);

  SiblingShareCollectorOptions options;
  options.window = std::chrono::milliseconds(50);
  auto collector = Make(TwoByTwo({{0, 2}, {1, 3}}), options);
  trace_.SetNowNs(kT);
  ASSERT_OK(collector->Open());
  const int64_t end = trace.events.back().ts_ns;
  size_t next = 0;
  for (int64_t now = kT; now <= end + 10'000'000; now += 7'000'000) {
    std::vector<SchedSwitch> batch;
    while (next < trace.events.size() && trace.events[next].ts_ns <= now) batch.push_back(trace.events[next++]);
    Serve(batch);
    trace_.SetNowNs(now + 2'000'000);
    collector->Poll();
  }
  collector->CloseWindow();
  EXPECT_EQ(collector->events_read(), gen.events);

  // Offline, with one group per VM, over the same span.
  std::map<int32_t, telemetry::GroupId> group_of;
  std::vector<std::string> names = {"host"};
  for (const CollectedVm& vm : vms_) {
    names.push_back(vm.vm_id);
    for (int tid : vm.tids) group_of[tid] = static_cast<telemetry::GroupId>(names.size() - 1);
  }
  telemetry::SiblingShareCalculator offline(
      *telemetry::CpuTopology::FromSiblingLists(trace.sibling_lists), [&](int32_t tid) {
        auto it = group_of.find(tid);
        return it == group_of.end() ? telemetry::kHostGroup : it->second;
      });
  for (const SchedSwitch& ev : trace.events) offline.Add(ev);
  const int64_t last_watermark = kT + ((end + 10'000'000 - kT) / 7'000'000) * 7'000'000;
  telemetry::SiblingShareWindow want = offline.TakeWindow(last_watermark);

  StatsBatch batch = queue_.Peek();
  ASSERT_GE(batch.windows.size(), 3u);
  std::map<std::string, v1::SiblingShare> sum;
  int64_t both_busy[2] = {0, 0}, events = 0;
  for (size_t i = 0; i < batch.windows.size(); ++i) {
    const v1::StatsWindow& w = batch.windows[i];
    if (i > 0) {
      EXPECT_EQ(w.start_unix_ns(), batch.windows[i - 1].end_unix_ns());
    }
    EXPECT_LE(w.end_unix_ns() - w.start_unix_ns(), 57'000'000);
    events += w.events();
    for (const v1::VMStats& vm : w.vms()) {
      v1::SiblingShare& s = sum[vm.vm_id()];
      s.set_run_ns(s.run_ns() + vm.share().run_ns());
      s.set_same_ns(s.same_ns() + vm.share().same_ns());
      s.set_idle_ns(s.idle_ns() + vm.share().idle_ns());
      s.set_foreign_ns(s.foreign_ns() + vm.share().foreign_ns());
      s.set_unknown_ns(s.unknown_ns() + vm.share().unknown_ns());
      s.set_foreign_intervals(s.foreign_intervals() + vm.share().foreign_intervals());
      s.set_longest_foreign_ns(std::max(s.longest_foreign_ns(), vm.share().longest_foreign_ns()));
    }
    for (const v1::CoreShare& c : w.cores()) both_busy[c.core()] += c.both_busy_ns();
  }
  EXPECT_EQ(events, gen.events);
  ASSERT_EQ(sum.size(), 3u);
  for (size_t g = 1; g < names.size(); ++g) {
    SCOPED_TRACE(names[g]);
    const telemetry::SiblingShareStats& o = want.groups[g];
    const v1::SiblingShare& s = sum[names[g]];
    EXPECT_GT(o.run_ns, 0);
    EXPECT_EQ(s.run_ns(), o.run_ns);
    EXPECT_EQ(s.same_ns(), o.same_ns);
    EXPECT_EQ(s.idle_ns(), o.idle_ns);
    EXPECT_EQ(s.foreign_ns(), o.foreign_ns);
    EXPECT_EQ(s.unknown_ns(), o.unknown_ns);
    EXPECT_EQ(s.longest_foreign_ns(), o.longest_foreign_ns);
    EXPECT_EQ(s.foreign_intervals(), o.foreign_intervals);
  }
  // Offline cores are numbered by lowest CPU too.
  EXPECT_EQ(both_busy[0], want.cores[0].both_busy_ns);
  EXPECT_EQ(both_busy[1], want.cores[1].both_busy_ns);
}

TEST_F(CollectorTest, CountsPagesAfterLossAndInconsistentEvents) {
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}));
  trace_.SetNowNs(kT);
  ASSERT_OK(collector->Open());
  const uint32_t size = (layout_.min_record_size + 3) & ~3u;
  PageBuilder page(kT + 10);
  // The kernel dropped events before this page: CPU 0 was last seen
  // switching to 100, now it switches 555 out.
  page.AddRecord(0, telemetry::testing::EncodeSchedSwitch(layout_, size, Ev(10, 0, 0, 100), "a", "b"));
  page.AddRecord(10, telemetry::testing::EncodeSchedSwitch(layout_, size, Ev(20, 0, 555, 0), "a", "b"));
  trace_.AddPage(0, page.Finish(true, /*missed_events=*/true));
  trace_.SetNowNs(kT + 3'000'000);
  collector->Poll();
  collector->CloseWindow();
  EXPECT_EQ(queue_.latest()->events(), 2);
  EXPECT_EQ(queue_.latest()->lost_events(), 2);  // one page after loss, one inconsistent event
  EXPECT_EQ(collector->pages_after_loss(), 1);
  // Counted once: the next window starts from zero.
  collector->CloseWindow();
  EXPECT_EQ(queue_.latest()->lost_events(), 0);
}

TEST_F(CollectorTest, ClosesAWindowEachWindowLengthAndTheQueueStaysBounded) {
  StatsWindowQueue small(3);
  SiblingShareCollectorOptions options;
  options.window = std::chrono::milliseconds(10);
  SiblingShareCollector collector(
      options, TwoByTwo({{0, 1}, {2, 3}}), &trace_, &fs_,
      [this]() -> absl::StatusOr<std::vector<CollectedVm>> { return vms_; }, &small);
  trace_.SetNowNs(kT);
  ASSERT_OK(collector.Open());
  for (int i = 1; i <= 50; ++i) {
    trace_.SetNowNs(kT + i * 1'000'000 + 2'000'000);
    collector.Poll();
  }
  // 50 ms of watermark: 5 windows, the oldest 2 dropped.
  EXPECT_EQ(small.size(), 3u);
  EXPECT_EQ(small.dropped(), 2);
  StatsBatch batch = small.Peek();
  EXPECT_EQ(batch.dropped_windows, 2);
  EXPECT_EQ(batch.windows.back().end_unix_ns(), kUnixOffset + kT + 50'000'000);
  EXPECT_EQ(batch.windows.front().start_unix_ns(), kUnixOffset + kT + 20'000'000);
}

TEST_F(CollectorTest, WindowsFollowEachOtherExactlyWhileTheWallClockJitters) {
  // The wall clock's offset to the trace clock is read at every window's
  // end and moves by a few microseconds between reads (and by more under
  // NTP). csd drops a window that starts before the previous one ended, so
  // each window starts exactly where the previous one ended.
  StatsWindowQueue queue(10);
  SiblingShareCollectorOptions options;
  options.window = std::chrono::milliseconds(10);
  SiblingShareCollector collector(
      options, TwoByTwo({{0, 1}, {2, 3}}), &trace_, &fs_,
      [this]() -> absl::StatusOr<std::vector<CollectedVm>> { return vms_; }, &queue);
  trace_.SetNowNs(kT);
  ASSERT_OK(collector.Open());
  for (int i = 1; i <= 50; ++i) {
    trace_.SetUnixOffsetNs(kUnixOffset + (i % 3 - 1) * 3000 + i);
    trace_.SetNowNs(kT + i * 1'000'000 + 2'000'000);
    collector.Poll();
  }
  StatsBatch batch = queue.Peek();
  ASSERT_EQ(batch.windows.size(), 5u);
  for (size_t i = 1; i < batch.windows.size(); ++i) {
    EXPECT_EQ(batch.windows[i].start_unix_ns(), batch.windows[i - 1].end_unix_ns()) << i;
    EXPECT_GT(batch.windows[i].end_unix_ns(), batch.windows[i].start_unix_ns()) << i;
  }
}

TEST_F(CollectorTest, ThreadsOfANewVmCountAsHostUntilTheVmListSaysSo) {
  SiblingShareCollectorOptions options;
  options.vm_refresh_interval = std::chrono::hours(1);
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}), options);
  trace_.SetNowNs(kT);
  ASSERT_OK(collector->Open());
  vms_.push_back({"vm-new", "", {400}, ""});
  Serve({Ev(0, 0, 0, 400), Ev(100, 0, 400, 0)});
  trace_.SetNowNs(kT + 200 + 2'000'000);
  collector->Poll();
  collector->CloseWindow();
  EXPECT_EQ(Vm(*queue_.latest(), "vm-new"), nullptr);
}

TEST_F(CollectorTest, ANewReconcilePassRefreshesTheVmListAtTheNextPoll) {
  SiblingShareCollectorOptions options;
  options.vm_refresh_interval = std::chrono::hours(1);
  int64_t passes = 1;
  options.vms_version = [&passes] { return passes; };
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}), options);
  trace_.SetNowNs(kT);
  ASSERT_OK(collector->Open());
  // vm-a gains thread 102 and the agent's next pass finds it: its run
  // before that poll counts for vm-a already.
  vms_[0].tids.push_back(102);
  ++passes;
  Serve({Ev(0, 0, 0, 102), Ev(1000, 0, 102, 0)});
  trace_.SetNowNs(kT + 2000 + 2'000'000);
  collector->Poll();
  collector->CloseWindow();
  const v1::VMStats* a = Vm(*queue_.latest(), "vm-a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->share().run_ns(), 1000);
}

TEST_F(CollectorTest, WithALagEventsWaitForTheNextPollSoANewThreadIsKnownByThen) {
  SiblingShareCollectorOptions options;
  options.vm_refresh_interval = std::chrono::hours(1);
  options.lag = std::chrono::milliseconds(100);
  int64_t passes = 1;
  options.vms_version = [&passes] { return passes; };
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}), options);
  trace_.SetNowNs(kT);
  ASSERT_OK(collector->Open());
  // Thread 102 starts running before the agent's pass has found it.
  Serve({Ev(0, 0, 0, 102), Ev(1000, 0, 102, 0)});
  trace_.SetNowNs(kT + 2000 + 2'000'000);
  EXPECT_EQ(collector->Poll(), 2);  // read, but not counted yet
  // The pass finds it; the next poll counts its run for vm-a.
  vms_[0].tids.push_back(102);
  ++passes;
  trace_.SetNowNs(kT + 2000 + 102'000'000);
  collector->Poll();
  collector->CloseWindow();
  const v1::VMStats* a = Vm(*queue_.latest(), "vm-a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->share().run_ns(), 1000);
}

TEST_F(CollectorTest, TheFirstWindowStartsOnceTheVmsAreKnown) {
  vms_status_ = absl::UnavailableError("no reconcile pass yet");
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}));
  trace_.SetNowNs(kT);
  ASSERT_OK(collector->Open());
  // vm-a's thread runs before the agent has named any VM: not counted, and
  // no window (it would say the host ran everything).
  Serve({Ev(0, 0, 0, 100)});
  trace_.SetNowNs(kT + 1000 + 2'000'000);
  collector->Poll();
  collector->CloseWindow();
  EXPECT_EQ(queue_.size(), 0u);
  // The first pass names it; the run since counts, and the window starts
  // where the unknown time ended.
  vms_status_ = absl::OkStatus();
  Serve({Ev(2000, 0, 100, 0)});
  trace_.SetNowNs(kT + 3000 + 3'000'000);
  collector->Poll();
  collector->CloseWindow();
  ASSERT_EQ(queue_.size(), 1u);
  EXPECT_EQ(queue_.latest()->start_unix_ns(), kUnixOffset + kT + 1000);
  const v1::VMStats* a = Vm(*queue_.latest(), "vm-a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->share().run_ns(), 1000);
}

TEST_F(CollectorTest, ForcedIdleIsTheGrowthOfTheVmsThreadCountsWhenSchedstatsAreOn) {
  fs_.SetFile("/proc/sys/kernel/sched_schedstats", "1\n");
  auto sched = [](const std::string& value) {
    return "CPU 0/KVM (100, #threads: 3)\n-----\nse.exec_start : 1.0\n"
           "core_forceidle_sum                           :" + value + "\n";
  };
  fs_.SetFile("/proc/100/task/100/sched", sched("          1.500000"));
  fs_.SetFile("/proc/101/task/101/sched", sched("          0.000000"));
  // vm-b's thread has no such line: a kernel without core scheduling.
  fs_.SetFile("/proc/200/task/200/sched", "se.exec_start : 1.0\n");
  SiblingShareCollectorOptions options;
  options.enable_schedstats = true;
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}), options);
  trace_.SetNowNs(kT);
  ASSERT_OK(collector->Open());
  EXPECT_TRUE(trace_.schedstats_enabled());
  Serve({Ev(0, 0, 0, 100), Ev(0, 1, 0, 200)});
  trace_.SetNowNs(kT + 2'000'100);
  collector->Poll();
  collector->CloseWindow();  // the first sample is the baseline
  const v1::SiblingShare first = Vm(*queue_.latest(), "vm-a")->share();
  EXPECT_TRUE(first.forced_idle_known());
  EXPECT_EQ(first.forced_idle_ns(), 0);
  EXPECT_FALSE(Vm(*queue_.latest(), "vm-b")->share().forced_idle_known());

  fs_.SetFile("/proc/100/task/100/sched", sched("          3.000000"));
  fs_.SetFile("/proc/101/task/101/sched", sched("          0.250000"));
  trace_.SetNowNs(kT + 2'000'500);
  collector->Poll();
  collector->CloseWindow();
  const v1::SiblingShare second = Vm(*queue_.latest(), "vm-a")->share();
  EXPECT_TRUE(second.forced_idle_known());
  EXPECT_EQ(second.forced_idle_ns(), 1'750'000);

  fs_.SetFile("/proc/sys/kernel/sched_schedstats", "0\n");
  trace_.SetNowNs(kT + 2'000'900);
  collector->Poll();
  collector->CloseWindow();
  EXPECT_FALSE(Vm(*queue_.latest(), "vm-a")->share().forced_idle_known());
}

TEST_F(CollectorTest, ForcedIdleOfAVmWithItsOwnCgroupComesFromTheCgroup) {
  fs_.SetFile("/proc/sys/kernel/sched_schedstats", "1\n");
  vms_[0].cgroup = "/machine.slice/vm-a.scope";
  const std::string stat = "/sys/fs/cgroup/machine.slice/vm-a.scope/cpu.stat";
  fs_.SetFile(stat, "usage_usec 10\ncore_sched.force_idle_usec 100\n");
  // Its thread's own count would say something else: the cgroup wins.
  fs_.SetFile("/proc/100/task/100/sched", "core_forceidle_sum : 9.000000\n");
  SiblingShareCollectorOptions options;
  options.cgroupfs_root = "/sys/fs/cgroup";
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}), options);
  trace_.SetNowNs(kT);
  ASSERT_OK(collector->Open());
  Serve({Ev(0, 0, 0, 100)});
  trace_.SetNowNs(kT + 2'000'100);
  collector->Poll();
  collector->CloseWindow();  // baseline
  fs_.SetFile(stat, "usage_usec 20\ncore_sched.force_idle_usec 350\n");
  fs_.SetFile("/proc/100/task/100/sched", "core_forceidle_sum : 19.000000\n");
  trace_.SetNowNs(kT + 2'000'500);
  collector->Poll();
  collector->CloseWindow();
  const v1::SiblingShare share = Vm(*queue_.latest(), "vm-a")->share();
  EXPECT_TRUE(share.forced_idle_known());
  EXPECT_EQ(share.forced_idle_ns(), 250'000);
}

TEST_F(CollectorTest, OpenFailsWithTheTracesErrorAndBadFormats) {
  trace_.SetStartError(absl::NotFoundError("no tracefs: /sys/kernel/tracing ..."));
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}));
  absl::Status status = collector->Open();
  EXPECT_TRUE(absl::IsNotFound(status)) << status;

  host::SchedTraceFormat bad = Format(4);
  bad.sched_switch_format = "name: sched_switch\nID: 5\nformat:\n";
  host::FakeSchedTrace bad_trace(bad);
  SiblingShareCollector other(
      {}, TwoByTwo({{0, 1}, {2, 3}}), &bad_trace, &fs_,
      [this]() -> absl::StatusOr<std::vector<CollectedVm>> { return vms_; }, &queue_);
  status = other.Open();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("sched_switch/format"));
  EXPECT_TRUE(bad_trace.stopped());
}

TEST_F(CollectorTest, StartPollsOnItsThreadAndStopStopsTheTrace) {
  SiblingShareCollectorOptions options;
  options.poll_interval = std::chrono::milliseconds(1);
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}), options);
  trace_.SetNowNs(kT);
  ASSERT_OK(collector->Start());
  Serve(Scenario());
  trace_.SetNowNs(kT + 3000 + 2'000'000);
  for (int i = 0; i < 5000 && trace_.unread_pages() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  collector->Stop();
  EXPECT_EQ(trace_.unread_pages(), 0u);
  EXPECT_EQ(collector->events_read(), 9);
  EXPECT_TRUE(trace_.stopped());
}

// A buffer of 32 KiB is eight 4 KiB pages: two read from one CPU in a poll
// (a quarter) make the next poll come after busy_poll_interval; a poll that
// finds less goes back to poll_interval.
TEST_F(CollectorTest, PollsSoonerAfterFindingABufferAQuarterFull) {
  SiblingShareCollectorOptions options;
  options.trace.buffer_size_kb = 32;
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}), options);
  trace_.SetNowNs(kT - 1000);
  ASSERT_OK(collector->Open());
  EXPECT_EQ(collector->next_poll_delay(), std::chrono::milliseconds(500));

  Serve({Ev(0, 2, 0, 101)});  // one page
  trace_.SetNowNs(kT + 3'000'000);
  EXPECT_EQ(collector->Poll(), 1);
  EXPECT_EQ(collector->next_poll_delay(), std::chrono::milliseconds(500));

  Serve({Ev(10, 2, 101, 0)});  // two pages of CPU 2
  Serve({Ev(20, 2, 0, 101)});
  Serve({Ev(10, 0, 0, 100)});  // one of CPU 0
  trace_.SetNowNs(kT + 4'000'000);
  EXPECT_EQ(collector->Poll(), 3);
  EXPECT_EQ(collector->next_poll_delay(), std::chrono::milliseconds(100));

  trace_.SetNowNs(kT + 5'000'000);
  EXPECT_EQ(collector->Poll(), 0);
  EXPECT_EQ(collector->next_poll_delay(), std::chrono::milliseconds(500));
}

// A configured interval shorter than the busy one stays.
TEST_F(CollectorTest, BusyPollsNeverSlowerThanTheConfiguredInterval) {
  SiblingShareCollectorOptions options;
  options.trace.buffer_size_kb = 4;  // one page: any page is a quarter
  options.poll_interval = std::chrono::milliseconds(50);
  auto collector = Make(TwoByTwo({{0, 1}, {2, 3}}), options);
  trace_.SetNowNs(kT - 1000);
  ASSERT_OK(collector->Open());
  Serve({Ev(0, 2, 0, 101)});
  trace_.SetNowNs(kT + 3'000'000);
  EXPECT_EQ(collector->Poll(), 1);
  EXPECT_EQ(collector->next_poll_delay(), std::chrono::milliseconds(50));
}

}  // namespace
}  // namespace cosched::agent
