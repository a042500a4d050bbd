#include "server/stats/stats_aggregator.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kSec = 1000000000;
// A fixed "now" well after the epoch, on no bucket boundary.
constexpr int64_t kNow = 1800000000LL * kSec + 17 * kSec;

v1::SiblingShare Share(int64_t run, int64_t same, int64_t idle, int64_t foreign,
                       int64_t unknown = 0) {
  v1::SiblingShare s;
  s.set_run_ns(run);
  s.set_same_ns(same);
  s.set_idle_ns(idle);
  s.set_foreign_ns(foreign);
  s.set_unknown_ns(unknown);
  return s;
}

// A window of `seconds` ending `ago` seconds before kNow.
v1::StatsWindow Window(int64_t ago, int64_t seconds = 10) {
  v1::StatsWindow w;
  w.set_end_unix_ns(kNow - ago * kSec);
  w.set_start_unix_ns(w.end_unix_ns() - seconds * kSec);
  return w;
}

v1::VMStats* AddVm(v1::StatsWindow& w, const std::string& id, const v1::SiblingShare& s) {
  v1::VMStats* v = w.add_vms();
  v->set_vm_id(id);
  *v->mutable_share() = s;
  return v;
}

using Windows = google::protobuf::RepeatedPtrField<v1::StatsWindow>;

Windows Of(std::vector<v1::StatsWindow> list) {
  Windows out;
  for (auto& w : list) *out.Add() = std::move(w);
  return out;
}

class StatsAggregatorTest : public ::testing::Test {
 protected:
  int64_t Add(const std::string& host, std::vector<v1::StatsWindow> windows,
              int64_t dropped = 0,
              const absl::flat_hash_map<std::string, std::string>& aliases = {}) {
    Windows w = Of(std::move(windows));
    EXPECT_OK(ValidateStatsWindows(w, dropped));
    // Hosts here report far fewer VMs than their series limit; the limit
    // has tests of its own below.
    return stats_.Add(host, w, dropped, aliases, /*reported_vms=*/1000);
  }

  std::atomic<int64_t> now_{kNow};
  StatsAggregator stats_{[this] { return now_.load(); }};
};

TEST_F(StatsAggregatorTest, SumsAVmsWindowsLongestIsAMaxForcedIdleOnlyWhereKnown) {
  v1::StatsWindow a = Window(30);
  v1::SiblingShare s = Share(1000, 500, 300, 150, 50);
  s.set_foreign_intervals(3);
  s.set_longest_foreign_ns(90);
  s.set_forced_idle_ns(40);
  s.set_forced_idle_known(true);
  AddVm(a, "vm-a", s);
  a.set_lost_events(2);
  v1::StatsWindow b = Window(20);
  s = Share(2000, 1000, 1000, 0);
  s.set_foreign_intervals(0);
  s.set_longest_foreign_ns(0);
  s.set_forced_idle_ns(999);  // not known: must not count
  AddVm(b, "vm-a", s);
  v1::StatsWindow c = Window(10);
  s = Share(500, 0, 0, 500);
  s.set_foreign_intervals(1);
  s.set_longest_foreign_ns(70);
  s.set_forced_idle_ns(5);
  s.set_forced_idle_known(true);
  AddVm(c, "vm-a", s);
  EXPECT_EQ(Add("h1", {a, b, c}), 0);

  v1::GetStatsResponse r = stats_.QueryVms({"vm-a"}, 300);
  ASSERT_EQ(r.vms_size(), 1);
  const v1::SiblingShare& t = r.vms(0).share();
  EXPECT_EQ(r.vms(0).vm_id(), "vm-a");
  EXPECT_EQ(t.run_ns(), 3500);
  EXPECT_EQ(t.same_ns(), 1500);
  EXPECT_EQ(t.idle_ns(), 1300);
  EXPECT_EQ(t.foreign_ns(), 650);
  EXPECT_EQ(t.unknown_ns(), 50);
  EXPECT_EQ(t.foreign_intervals(), 4);
  EXPECT_EQ(t.longest_foreign_ns(), 90);
  EXPECT_EQ(t.forced_idle_ns(), 45);
  EXPECT_TRUE(t.forced_idle_known());
  EXPECT_EQ(r.total().run_ns(), 3500);
  EXPECT_EQ(r.windows(), 3);
  EXPECT_EQ(r.lost_events(), 2);
  EXPECT_EQ(r.start_unix_ns(), a.start_unix_ns());
  EXPECT_EQ(r.end_unix_ns(), c.end_unix_ns());
  EXPECT_TRUE(r.cores().empty());
}

TEST_F(StatsAggregatorTest, ForcedIdleUnknownEverywhereStaysUnknown) {
  v1::StatsWindow a = Window(10);
  AddVm(a, "vm-a", Share(100, 100, 0, 0));
  Add("h1", {a});
  v1::GetStatsResponse r = stats_.QueryVms({"vm-a"}, 300);
  EXPECT_FALSE(r.total().forced_idle_known());
  EXPECT_EQ(r.total().forced_idle_ns(), 0);
}

TEST_F(StatsAggregatorTest, HostQuerySumsItsVmsAndCoresTotalOverVms) {
  v1::StatsWindow a = Window(20);
  AddVm(a, "vm-a", Share(100, 50, 50, 0));
  AddVm(a, "vm-b", Share(200, 0, 100, 100));
  v1::CoreShare* core = a.add_cores();
  core->set_core(1);
  core->set_both_busy_ns(7);
  core->set_one_idle_ns(3);
  v1::StatsWindow b = Window(10);
  AddVm(b, "vm-b", Share(300, 300, 0, 0));
  core = b.add_cores();
  core->set_core(1);
  core->set_both_busy_ns(1);
  core->set_both_idle_ns(4);
  core->set_unknown_ns(2);
  Add("h1", {a, b}, /*dropped=*/5);
  v1::StatsWindow other = Window(10);
  AddVm(other, "vm-c", Share(999, 999, 0, 0));
  Add("h2", {other});

  v1::GetStatsResponse r = stats_.QueryHost("h1", 300);
  ASSERT_EQ(r.vms_size(), 2);
  EXPECT_EQ(r.vms(0).vm_id(), "vm-a");
  EXPECT_EQ(r.vms(1).vm_id(), "vm-b");
  EXPECT_EQ(r.vms(1).share().run_ns(), 500);
  EXPECT_EQ(r.vms(1).share().foreign_ns(), 100);
  EXPECT_EQ(r.total().run_ns(), 600);
  EXPECT_EQ(r.total().same_ns(), 350);
  EXPECT_EQ(r.windows(), 2);
  EXPECT_EQ(r.dropped_windows(), 5);
  ASSERT_EQ(r.cores_size(), 2);  // index 0 was never reported: zeros
  EXPECT_EQ(r.cores(0).both_busy_ns(), 0);
  EXPECT_EQ(r.cores(1).core(), 1);
  EXPECT_EQ(r.cores(1).both_busy_ns(), 8);
  EXPECT_EQ(r.cores(1).one_idle_ns(), 3);
  EXPECT_EQ(r.cores(1).both_idle_ns(), 4);
  EXPECT_EQ(r.cores(1).unknown_ns(), 2);

  EXPECT_EQ(stats_.QueryHost("h3", 300).windows(), 0);
}

TEST_F(StatsAggregatorTest, VmSetSumsEveryHostAVmRanOnAndCountsEachHostOnce) {
  v1::StatsWindow a = Window(40);
  AddVm(a, "vm-a", Share(100, 100, 0, 0));
  AddVm(a, "vm-b", Share(10, 0, 10, 0));
  Add("h1", {a});
  v1::StatsWindow b = Window(20);  // vm-a moved to h2
  AddVm(b, "vm-a", Share(50, 0, 0, 50));
  b.set_lost_events(1);
  Add("h2", {b});
  v1::StatsWindow c = Window(10);
  AddVm(c, "vm-z", Share(7, 7, 0, 0));
  Add("h3", {c});

  v1::GetStatsResponse r = stats_.QueryVms({"vm-a", "vm-b", "vm-missing"}, 300);
  ASSERT_EQ(r.vms_size(), 2);
  EXPECT_EQ(r.vms(0).share().run_ns(), 150);
  EXPECT_EQ(r.vms(0).share().foreign_ns(), 50);
  EXPECT_EQ(r.total().run_ns(), 160);
  EXPECT_EQ(r.windows(), 2);  // h1's and h2's, not h3's
  EXPECT_EQ(r.lost_events(), 1);
  EXPECT_EQ(stats_.QueryVms({"vm-missing"}, 300).windows(), 0);
}

TEST_F(StatsAggregatorTest, AReportSentAgainIsNotCountedTwice) {
  v1::StatsWindow a = Window(20);
  AddVm(a, "vm-a", Share(100, 100, 0, 0));
  v1::StatsWindow b = Window(10);
  AddVm(b, "vm-a", Share(100, 100, 0, 0));
  EXPECT_EQ(Add("h1", {a}), 0);
  EXPECT_EQ(Add("h1", {a, b}), 1);
  v1::GetStatsResponse r = stats_.QueryVms({"vm-a"}, 300);
  EXPECT_EQ(r.total().run_ns(), 200);
  EXPECT_EQ(r.windows(), 2);
}

TEST_F(StatsAggregatorTest, WindowsTooOldOrAheadOfTheClockAreIgnored) {
  v1::StatsWindow old = Window(86400 + 60);
  AddVm(old, "vm-a", Share(1, 1, 0, 0));
  v1::StatsWindow ahead = Window(-90);
  AddVm(ahead, "vm-a", Share(1, 1, 0, 0));
  EXPECT_EQ(Add("h1", {old, ahead}), 2);
  EXPECT_EQ(stats_.QueryVms({"vm-a"}, 86400).windows(), 0);
}

TEST_F(StatsAggregatorTest, AWindowSlightlyAheadOfTheClockKeepsTheHourIntact) {
  v1::StatsWindow hour_ago = Window(59 * 60 + 30);
  AddVm(hour_ago, "vm-a", Share(100, 100, 0, 0));
  v1::StatsWindow ahead = Window(-50, 5);
  AddVm(ahead, "vm-a", Share(10, 10, 0, 0));
  EXPECT_EQ(Add("h1", {hour_ago, ahead}), 0);
  v1::GetStatsResponse r = stats_.QueryVms({"vm-a"}, 3600);
  EXPECT_EQ(r.total().run_ns(), 110);
  EXPECT_EQ(r.windows(), 2);
}

TEST_F(StatsAggregatorTest, TheSpanSelectsWindowsByTheirEnd) {
  v1::StatsWindow hours_ago = Window(5 * 3600);
  AddVm(hours_ago, "vm-a", Share(1000, 0, 0, 1000));
  v1::StatsWindow minutes_ago = Window(20 * 60);
  AddVm(minutes_ago, "vm-a", Share(100, 0, 100, 0));
  v1::StatsWindow recent = Window(30);
  AddVm(recent, "vm-a", Share(10, 10, 0, 0));
  Add("h1", {hours_ago, minutes_ago, recent});

  v1::GetStatsResponse r = stats_.QueryVms({"vm-a"}, 300);
  EXPECT_EQ(r.total().run_ns(), 10);
  EXPECT_EQ(r.windows(), 1);
  r = stats_.QueryVms({"vm-a"}, 3600);
  EXPECT_EQ(r.total().run_ns(), 110);
  EXPECT_EQ(r.start_unix_ns(), minutes_ago.start_unix_ns());
  r = stats_.QueryVms({"vm-a"}, 86400);
  EXPECT_EQ(r.total().run_ns(), 1110);
  EXPECT_EQ(r.windows(), 3);
  EXPECT_EQ(r.start_unix_ns(), hours_ago.start_unix_ns());
  EXPECT_EQ(r.end_unix_ns(), recent.end_unix_ns());

  // Two minutes on, the recent window is still in a 5-minute span; an
  // hour on, only the day-long span has anything.
  now_ += 120 * kSec;
  EXPECT_EQ(stats_.QueryVms({"vm-a"}, 300).total().run_ns(), 10);
  now_ += 3 * 3600 * kSec;
  EXPECT_EQ(stats_.QueryVms({"vm-a"}, 300).windows(), 0);
  EXPECT_EQ(stats_.QueryVms({"vm-a"}, 86400).total().run_ns(), 1110);
}

TEST_F(StatsAggregatorTest, AVmReportedByNameCountsUnderTheIdItIsTaggedWith) {
  v1::StatsWindow a = Window(10);
  AddVm(a, "instance-0001", Share(100, 100, 0, 0));
  Add("h1", {a}, 0, {{"instance-0001", "6c1f0e4a-uuid"}});
  EXPECT_EQ(stats_.QueryVms({"6c1f0e4a-uuid"}, 300).total().run_ns(), 100);
  EXPECT_EQ(stats_.QueryVms({"instance-0001"}, 300).windows(), 0);
}

TEST_F(StatsAggregatorTest, SeriesSilentForADayAreDropped) {
  v1::StatsWindow a = Window(10);
  AddVm(a, "vm-a", Share(100, 100, 0, 0));
  AddVm(a, "vm-b", Share(100, 100, 0, 0));
  Add("h1", {a});
  EXPECT_EQ(stats_.VmSeriesCount(), 2u);
  now_ += 12 * 3600 * kSec;
  v1::StatsWindow b = Window(-12 * 3600 + 10);
  AddVm(b, "vm-a", Share(1, 1, 0, 0));
  Add("h1", {b});
  now_ += 13 * 3600 * kSec;  // vm-b silent for 25 h, vm-a for 13 h
  Add("h2", {});
  EXPECT_EQ(stats_.VmSeriesCount(), 1u);
  now_ += 12 * 3600 * kSec;
  Add("h2", {});
  EXPECT_EQ(stats_.VmSeriesCount(), 0u);
}

// Issue #36 item 3: a VM that stops reporting keeps its minute buckets
// for the hour they answer, not for the day its series lasts; what is
// answered does not change.
TEST_F(StatsAggregatorTest, AVmThatStopsReportingFreesItsMinutesAfterTheHour) {
  // Thirty minutes of one window a minute, ending now.
  std::vector<v1::StatsWindow> windows;
  for (int m = 29; m >= 0; --m) {
    v1::StatsWindow w = Window(m * 60);
    AddVm(w, "vm-a", Share(100, 100, 0, 0));
    windows.push_back(std::move(w));
  }
  Add("h1", windows);
  const size_t buckets = stats_.VmBucketCount();
  EXPECT_GE(buckets, 31u);  // 30 minutes and at least one hour
  EXPECT_LE(buckets, 32u);
  const int64_t day_run = stats_.QueryVms({"vm-a"}, 86400).total().run_ns();
  EXPECT_EQ(day_run, 3000);
  // Silent for two hours; another host's Report runs the sweep.
  now_ += 2 * 3600 * kSec;
  Add("h2", {});
  EXPECT_LE(stats_.VmBucketCount(), 2u);  // its hour buckets only
  EXPECT_EQ(stats_.VmSeriesCount(), 1u);
  EXPECT_EQ(stats_.QueryVms({"vm-a"}, 3600).windows(), 0);
  EXPECT_EQ(stats_.QueryVms({"vm-a"}, 86400).total().run_ns(), day_run);
}

// Issue #32 item 3: a host keeps at most SeriesLimit(VMs it reports)
// series; a host that names new VMs at every Report (a churning or hostile
// one) pushes out its own oldest series, never grows without bound, and
// never touches another host's.
TEST_F(StatsAggregatorTest, AHostKeepsAtMostItsSeriesLimitTheOldestGoFirst) {
  EXPECT_EQ(StatsAggregator::SeriesLimit(0), StatsAggregator::kMinSeriesPerHost);
  EXPECT_EQ(StatsAggregator::SeriesLimit(10), StatsAggregator::kMinSeriesPerHost + 20);
  v1::StatsWindow other = Window(500);
  AddVm(other, "neighbour", Share(100, 100, 0, 0));
  Windows ws = Of({other});
  stats_.Add("h2", ws, 0, {}, 1);

  // 100 Reports of h1, each listing 10 VMs no earlier Report listed.
  const size_t limit = StatsAggregator::SeriesLimit(10);
  for (int r = 0; r < 100; ++r) {
    v1::StatsWindow w = Window(400 - r);
    w.set_start_unix_ns(w.end_unix_ns() - kSec / 2);
    for (int v = 0; v < 10; ++v) {
      AddVm(w, "vm-" + std::to_string(r) + "-" + std::to_string(v), Share(1, 1, 0, 0));
    }
    ws = Of({w});
    stats_.Add("h1", ws, 0, {}, 10);
  }
  EXPECT_EQ(stats_.VmSeriesCount(), limit + 1);
  EXPECT_EQ(stats_.EvictedSeriesCount(), 1000 - limit);
  // The newest stay, the oldest went, the other host's is untouched.
  EXPECT_EQ(stats_.QueryVms({"vm-99-9"}, 3600).total().run_ns(), 1);
  EXPECT_EQ(stats_.QueryVms({"vm-0-0"}, 3600).windows(), 0);
  EXPECT_EQ(stats_.QueryVms({"neighbour"}, 3600).windows(), 1);
  EXPECT_EQ(stats_.QueryHost("h1", 3600).vms_size(), static_cast<int>(limit));
}

// A ring holds buckets only for slots a window landed in: a VM seen in one
// window costs a few hundred bytes, not the ~8 KiB of two whole rings.
TEST_F(StatsAggregatorTest, AVmSeenOnceCostsTwoBucketsNotTwoRings) {
  v1::StatsWindow warm = Window(100);
  AddVm(warm, "warm", Share(1, 1, 0, 0));
  Add("h1", {warm});  // the host's own series, allocated once
  v1::StatsWindow w = Window(50);
  constexpr int kVms = 5000;
  for (int v = 0; v < kVms; ++v) AddVm(w, "vm-" + std::to_string(v), Share(1, 1, 0, 0));
  Windows ws = Of({w});
  const size_t before = mallinfo2().uordblks;
  stats_.Add("h1", ws, 0, {}, kVms);
  const size_t after = mallinfo2().uordblks;
  ASSERT_EQ(stats_.VmSeriesCount(), static_cast<size_t>(kVms + 1));
  const double per_series = static_cast<double>(after - before) / kVms;
  // Two packed buckets with their rings' room, the series, its map entry
  // and its index entry: well under 1 KiB; whole rings of 88 buckets would
  // be several KiB even packed.
  EXPECT_LT(per_series, 1024) << "bytes per series";
  EXPECT_LT(per_series, 88.0 * StatsAggregator::kMaxVmBucketBytes / 8);
  // Filling more slots grows a series to its rings, never past them.
  EXPECT_EQ(stats_.QueryVms({"vm-7"}, 3600).total().run_ns(), 1);
}

TEST_F(StatsAggregatorTest, InBackgroundAddsThenAnswersInCallOrder) {
  auto first = std::make_shared<v1::ReportRequest>();
  first->set_host_id("h1");
  *first->add_stats() = Window(20);
  AddVm(*first->mutable_stats(0), "vm-a", Share(100, 100, 0, 0));
  auto again = std::make_shared<v1::ReportRequest>(*first);  // taken already
  auto none = std::make_shared<const absl::flat_hash_map<std::string, std::string>>();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int64_t, int64_t>> answers;  // (ignored, run_ns seen)
  for (const auto& report : {first, again}) {
    stats_.AddInBackground(report, none, [&](int64_t ignored) {
      int64_t run = stats_.QueryVms({"vm-a"}, 300).total().run_ns();
      std::lock_guard lock(mu);
      answers.emplace_back(ignored, run);
      cv.notify_one();
    });
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return answers.size() == 2; });
  EXPECT_EQ(answers[0], std::make_pair(int64_t{0}, int64_t{100}));
  EXPECT_EQ(answers[1], std::make_pair(int64_t{1}, int64_t{100}));
}

TEST_F(StatsAggregatorTest, ConcurrentReportsAndQueriesAddUpExactly) {
  constexpr int kHosts = 4;
  constexpr int kReports = 200;
  std::vector<std::thread> threads;
  for (int h = 0; h < kHosts; ++h) {
    threads.emplace_back([&, h] {
      for (int i = 0; i < kReports; ++i) {
        v1::StatsWindow w;
        w.set_start_unix_ns(kNow - 250 * kSec + i * kSec);
        w.set_end_unix_ns(w.start_unix_ns() + kSec);
        AddVm(w, "shared-vm", Share(1, 1, 0, 0));
        AddVm(w, "vm-" + std::to_string(h), Share(2, 0, 2, 0));
        Windows ws = Of({w});
        stats_.Add("h" + std::to_string(h), ws, 0, {}, 2);
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 200; ++i) {
      v1::GetStatsResponse r = stats_.QueryVms({"shared-vm"}, 300);
      EXPECT_LE(r.total().run_ns(), kHosts * kReports);
    }
  });
  for (auto& t : threads) t.join();
  v1::GetStatsResponse r = stats_.QueryVms({"shared-vm", "vm-0", "vm-3"}, 300);
  EXPECT_EQ(r.vms(0).share().run_ns(), kHosts * kReports);
  EXPECT_EQ(r.total().run_ns(), kHosts * kReports + 2 * 2 * kReports);
  EXPECT_EQ(r.windows(), kHosts * kReports);
}

// --- VMs gone from every host (issue #36 item 3) ---

// The aggregator with csd's store played by `facts_`: what it says of each
// VM it is asked about (absent: untagged and reported nowhere).
class StatsFoldTest : public StatsAggregatorTest {
 protected:
  StatsFoldTest() {
    stats_.SetVmFacts([this](const std::vector<std::string>& ids)
                          -> absl::StatusOr<absl::flat_hash_map<std::string, StatsAggregator::VmFacts>> {
      std::lock_guard lock(mu_);
      asked_.push_back(ids);
      if (fail_) return absl::UnavailableError("store away");
      absl::flat_hash_map<std::string, StatsAggregator::VmFacts> out;
      for (const std::string& id : ids) {
        auto it = facts_.find(id);
        out[id] = it == facts_.end() ? StatsAggregator::VmFacts{} : it->second;
      }
      if (during_question_) during_question_();
      return out;
    });
  }

  void Running(const std::string& vm, const std::string& tenant) {
    std::lock_guard lock(mu_);
    facts_[vm] = {true, tenant};
  }
  void Deleted(const std::string& vm, bool untagged) {
    std::lock_guard lock(mu_);
    facts_[vm].reported = false;
    if (untagged) facts_[vm].tenant.reset();
  }
  // How many questions named `vm`.
  int TimesAsked(const std::string& vm) {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& ids : asked_) n += std::count(ids.begin(), ids.end(), vm);
    return n;
  }
  // A Report with nothing in it, `minutes` later: it runs the fold.
  void Later(int minutes) {
    now_ += minutes * 60 * kSec;
    Add("other-host", {});
  }
  // Thirty minutes of one window a minute, ending now, of these VMs.
  void HalfAnHour(const std::string& host, const std::vector<std::string>& vms) {
    std::vector<v1::StatsWindow> windows;
    for (int m = 29; m >= 0; --m) {
      v1::StatsWindow w = Window(m * 60);
      for (const std::string& vm : vms) AddVm(w, vm, Share(100, 60, 30, 10));
      windows.push_back(std::move(w));
    }
    Add(host, windows);
  }

  std::mutex mu_;
  absl::flat_hash_map<std::string, StatsAggregator::VmFacts> facts_;
  std::vector<std::vector<std::string>> asked_;
  bool fail_ = false;
  std::function<void()> during_question_;
};

TEST_F(StatsFoldTest, AVmGoneFromEveryHostIsFoldedIntoItsTenantAndFreedTheAnswersStay) {
  Running("vm-a", "acme");
  Running("vm-b", "acme");
  Running("vm-c", "globex");
  HalfAnHour("h1", {"vm-a", "vm-b"});
  HalfAnHour("h2", {"vm-c", "vm-b"});  // vm-b ran on both (a migration)
  // Learned while they run: their tenants (the first round asks them all).
  Later(1);
  ASSERT_EQ(TimesAsked("vm-b"), 1);
  const v1::GetStatsResponse hour = stats_.QueryTenant("acme", {"vm-a", "vm-b"}, 3600);
  const v1::GetStatsResponse day = stats_.QueryTenant("acme", {"vm-a", "vm-b"}, 86400);
  EXPECT_EQ(hour.total().run_ns(), 3 * 30 * 100);
  EXPECT_FALSE(hour.has_gone_vms());

  // vm-b deleted, and untagged as a control plane does: its series (two
  // hosts) are freed, its figures stay in acme's under the tenant learned.
  Deleted("vm-b", /*untagged=*/true);
  Later(1);
  EXPECT_EQ(stats_.FoldedSeriesCount(), 0u) << "quiet for 2 minutes only";
  Later(2);  // every VM quiet for 4 minutes now; asked: only vm-b is gone
  EXPECT_EQ(stats_.FoldedSeriesCount(), 2u);
  EXPECT_EQ(stats_.VmSeriesCount(), 2u);
  EXPECT_EQ(stats_.GoneTenantCount(), 1u);
  EXPECT_EQ(stats_.QueryVms({"vm-b"}, 86400).windows(), 0);

  // acme's answers are the same (4 minutes on: the same windows).
  for (const auto& [span, before] : {std::pair{3600, hour}, {86400, day}}) {
    v1::GetStatsResponse after = stats_.QueryTenant("acme", {"vm-a"}, span);
    EXPECT_EQ(after.total().DebugString(), before.total().DebugString()) << span;
    EXPECT_EQ(after.start_unix_ns(), before.start_unix_ns()) << span;
    EXPECT_EQ(after.end_unix_ns(), before.end_unix_ns()) << span;
    EXPECT_EQ(after.gone_vms().run_ns(), 2 * 30 * 100) << span;
    EXPECT_EQ(after.gone_vms().foreign_ns(), 2 * 30 * 10) << span;
    ASSERT_EQ(after.vms_size(), 1) << span;
    EXPECT_EQ(after.vms(0).vm_id(), "vm-a");
  }
  // Another tenant's answer has none of it.
  EXPECT_FALSE(stats_.QueryTenant("globex", {"vm-c"}, 3600).has_gone_vms());
  EXPECT_EQ(stats_.QueryTenant("globex", {"vm-c"}, 3600).total().run_ns(), 30 * 100);

  // Its minutes leave with the hour, its hours with the day.
  Later(61);
  EXPECT_FALSE(stats_.QueryTenant("acme", {}, 3600).has_gone_vms());
  EXPECT_EQ(stats_.QueryTenant("acme", {}, 86400).gone_vms().run_ns(), 2 * 30 * 100);
  Later(25 * 60);
  EXPECT_EQ(stats_.GoneTenantCount(), 0u);
}

TEST_F(StatsFoldTest, AQuietVmStillReportedStaysAndIsAskedAgainOnlyAfterTenMinutes) {
  Running("idle-vm", "acme");
  HalfAnHour("h1", {"idle-vm"});
  Later(3);
  EXPECT_EQ(TimesAsked("idle-vm"), 1);
  EXPECT_EQ(stats_.VmSeriesCount(), 1u);
  for (int m = 0; m < 9; ++m) Later(1);
  EXPECT_EQ(TimesAsked("idle-vm"), 1);
  Later(2);
  EXPECT_EQ(TimesAsked("idle-vm"), 2);
  EXPECT_EQ(stats_.VmSeriesCount(), 1u);
  EXPECT_EQ(stats_.FoldedSeriesCount(), 0u);
}

TEST_F(StatsFoldTest, AGoneVmThatWasNeverTaggedIsOnlyFreed) {
  HalfAnHour("h1", {"stray"});  // no facts: untagged, and reported nowhere
  Later(3);
  EXPECT_EQ(stats_.FoldedSeriesCount(), 1u);
  EXPECT_EQ(stats_.VmSeriesCount(), 0u);
  EXPECT_EQ(stats_.GoneTenantCount(), 0u);
}

TEST_F(StatsFoldTest, AVmWhoseWindowComesWhileCsdAsksKeepsItsSeries) {
  Running("vm-a", "acme");
  HalfAnHour("h1", {"vm-a"});
  Deleted("vm-a", false);
  // Its host reports it again while the store is being asked (the answer
  // read an older state).
  during_question_ = [&] {
    std::thread report([&] {
      v1::StatsWindow w = Window(-3 * 60);
      AddVm(w, "vm-a", Share(7, 7, 0, 0));
      Add("h1", {w});
    });
    report.join();
  };
  Later(3);
  EXPECT_EQ(stats_.FoldedSeriesCount(), 0u);
  during_question_ = nullptr;
  EXPECT_EQ(stats_.QueryVms({"vm-a"}, 3600).total().run_ns(), 30 * 100 + 7);
}

TEST_F(StatsFoldTest, TheStoreAwayFoldsNothingAndIsAskedAgainSoon) {
  HalfAnHour("h1", {"stray"});
  fail_ = true;
  Later(3);
  EXPECT_EQ(stats_.VmSeriesCount(), 1u);
  fail_ = false;
  now_ += 31 * kSec;  // half a minute on, not a whole one
  Add("other-host", {});
  EXPECT_EQ(stats_.VmSeriesCount(), 0u);
}

// A csd that starts under a large fleet learns the tenants in batches of
// kMaxAskedPerRound VMs a round, not all at once; quiet VMs go first.
TEST_F(StatsFoldTest, TenantsAreLearnedInBoundedBatchesQuietVmsFirst) {
  // Two hosts' 12 000 VMs, reported at kNow and again 90 s later.
  auto report_both = [&](int64_t ago) {
    for (int h = 0; h < 2; ++h) {
      v1::StatsWindow w = Window(ago);
      for (int v = 0; v < 6000; ++v) AddVm(w, absl::StrCat("h", h, "-vm", v), Share(1, 1, 0, 0));
      stats_.Add(absl::StrCat("h", h), Of({w}), 0, {}, 6000);
    }
  };
  report_both(10);
  Later(1);
  ASSERT_EQ(asked_.size(), 1u);
  EXPECT_EQ(asked_[0].size(), StatsAggregator::kMaxAskedPerRound);
  // A third host's VM, reported once a minute in; the others again at 90 s.
  v1::StatsWindow once = Window(-60);
  AddVm(once, "quiet-vm", Share(1, 1, 0, 0));
  Add("h2", {once});
  now_ = kNow + 90 * kSec;
  report_both(-90);
  // Two minutes and a second after its window the third host's VM is
  // quiet: asked first, then the 2 000 VMs the first round left.
  now_ = kNow + 181 * kSec;
  Add("other-host", {});
  ASSERT_EQ(asked_.size(), 2u);
  ASSERT_EQ(asked_[1].size(), 2001u);
  EXPECT_EQ(asked_[1][0], "quiet-vm");
  absl::flat_hash_set<std::string> all(asked_[0].begin(), asked_[0].end());
  all.insert(asked_[1].begin(), asked_[1].end());
  EXPECT_EQ(all.size(), 12001u);
}

TEST_F(StatsFoldTest, AVmDeletedAfterItsTenantWasLearnedFoldsIntoThatTenant) {
  // Tagged for acme, then retagged for globex while it ran: at the fold
  // the store's current tenant wins.
  Running("vm-a", "acme");
  HalfAnHour("h1", {"vm-a"});
  Later(1);
  Running("vm-a", "globex");
  Deleted("vm-a", /*untagged=*/false);
  Later(3);
  EXPECT_FALSE(stats_.QueryTenant("acme", {}, 3600).has_gone_vms());
  EXPECT_EQ(stats_.QueryTenant("globex", {}, 3600).gone_vms().run_ns(), 30 * 100);
}

// --- validation ---

absl::Status Validate(std::vector<v1::StatsWindow> windows, int64_t dropped = 0) {
  return ValidateStatsWindows(Of(std::move(windows)), dropped);
}

TEST(ValidateStatsWindowsTest, NamesTheFieldPathAndTheRule) {
  v1::StatsWindow good = Window(10);
  AddVm(good, "vm-a", Share(100, 50, 50, 0));
  EXPECT_OK(Validate({good}));

  v1::StatsWindow w = good;
  w.mutable_vms(0)->mutable_share()->set_same_ns(-1);
  absl::Status s = Validate({Window(40), Window(30), Window(20), w});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()), "stats[3].vms[0].share.same_ns must not be negative");

  w = good;
  w.mutable_vms(0)->mutable_share()->set_foreign_ns(1);
  EXPECT_THAT(Validate({w}).message(),
              HasSubstr("stats[0].vms[0].share same_ns + idle_ns + foreign_ns + "
                        "unknown_ns must not exceed run_ns"));
  w = good;
  w.mutable_vms(0)->mutable_share()->set_longest_foreign_ns(-5);
  EXPECT_THAT(Validate({w}).message(), HasSubstr("stats[0].vms[0].share.longest_foreign_ns"));
  w = good;
  w.set_end_unix_ns(w.start_unix_ns());
  EXPECT_THAT(Validate({w}).message(),
              HasSubstr("stats[0].end_unix_ns must be after start_unix_ns"));
  w = good;
  w.mutable_vms(0)->set_vm_id("bad id");
  EXPECT_THAT(Validate({w}).message(), HasSubstr("stats[0].vms[0].vm_id 'bad id' must be"));
  w = good;
  AddVm(w, "vm-a", Share(0, 0, 0, 0));
  EXPECT_THAT(Validate({w}).message(), HasSubstr("stats[0].vms[1].vm_id 'vm-a' appears twice"));
  w = good;
  w.set_lost_events(-1);
  EXPECT_THAT(Validate({w}).message(), HasSubstr("stats[0].lost_events must not be negative"));
  w = good;
  w.add_cores()->set_core(4096);
  EXPECT_THAT(Validate({w}).message(), HasSubstr("stats[0].cores[0].core must be between 0 and 4095"));
  w = good;
  w.add_cores()->set_one_idle_ns(-1);
  EXPECT_THAT(Validate({w}).message(), HasSubstr("stats[0].cores[0].one_idle_ns must not be negative"));
  EXPECT_THAT(Validate({Window(10), Window(15)}).message(),
              HasSubstr("stats[1].start_unix_ns must not be before the end of stats[0]"));
  EXPECT_THAT(Validate({good}, -1).message(), HasSubstr("dropped_windows must not be negative"));

  std::vector<v1::StatsWindow> many;
  for (int i = 121; i > 0; --i) many.push_back(Window(i * 10));
  EXPECT_THAT(Validate(many).message(), HasSubstr("stats has 121 windows; at most 120"));
  w = Window(10);
  for (int i = 0; i <= 10000; ++i) AddVm(w, "vm-" + std::to_string(i), Share(0, 0, 0, 0));
  EXPECT_THAT(Validate({w}).message(), HasSubstr("stats[0].vms has 10001 entries; at most 10000"));
}

TEST(ValidateStatsWindowsTest, HugeFiguresDoNotOverflowTheSumCheck) {
  v1::StatsWindow w = Window(10);
  const int64_t max = std::numeric_limits<int64_t>::max();
  AddVm(w, "vm-a", Share(max, max, max, max, max));
  EXPECT_THAT(Validate({w}).message(), HasSubstr("must not exceed run_ns"));
  v1::StatsWindow ok = Window(10);
  AddVm(ok, "vm-b", Share(max, max, 0, 0));
  EXPECT_OK(Validate({ok}));
}

}  // namespace
}  // namespace cosched::server
