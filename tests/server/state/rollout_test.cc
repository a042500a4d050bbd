// Staged rollouts in csd: which hosts a stage enables, what HostEnablement
// a rollout gives each host, and RolloutControl's writes and checks on a
// The desired state over SQLite, with a clock of the test's own for the soak.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "google/protobuf/util/time_util.h"
#include "server/state/host_enablement.h"
#include "server/state/rollout_control.h"
#include "server/state/rollout_view.h"
#include "tests/server/state/rollout_fixture.h"
#include "tests/server/state_testing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

using ::cosched::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

std::vector<std::string> Hosts(int n) {
  std::vector<std::string> hosts;
  for (int i = 0; i < n; ++i) hosts.push_back(absl::StrCat("hv-", i));
  return hosts;
}

TEST(StageHostsTest, GrowsMonotonicallyAndTakesEveryHostAt100) {
  const std::vector<std::string> hosts = Hosts(20);
  std::vector<std::string> previous;
  for (int percent : {1, 5, 10, 25, 50, 75, 99, 100}) {
    std::vector<std::string> stage = StageHosts(hosts, percent);
    EXPECT_EQ(stage.size(), std::max<size_t>(1, (20 * percent + 99) / 100)) << percent;
    EXPECT_THAT(stage, IsSupersetOf(previous)) << percent;
    previous = stage;
  }
  std::vector<std::string> all = StageHosts(hosts, 100);
  std::sort(all.begin(), all.end());
  std::vector<std::string> sorted = hosts;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(all, sorted);
  EXPECT_TRUE(StageHosts({}, 50).empty());
  EXPECT_EQ(StageHosts({"only"}, 1).size(), 1u);
}

TEST(StageHostsTest, IsStableWhateverTheOrderAndGrowsWithNewHosts) {
  std::vector<std::string> hosts = Hosts(50);
  const std::vector<std::string> stage = StageHosts(hosts, 10);
  std::reverse(hosts.begin(), hosts.end());
  EXPECT_THAT(StageHosts(hosts, 10), ElementsAreArray(stage));
  // A host that registers later never pushes an earlier pick out of a
  // larger stage: the order is by each host's own hash.
  std::vector<std::string> more = hosts;
  for (int i = 50; i < 60; ++i) more.push_back(absl::StrCat("hv-", i));
  const std::vector<std::string> half_before = StageHosts(hosts, 50);
  const std::vector<std::string> all_after = StageHosts(more, 100);
  EXPECT_THAT(all_after, IsSupersetOf(half_before));
}

v1::Rollout RolloutOf(v1::Rollout::State state, std::vector<std::string> enabled,
                      std::string selector = "") {
  v1::Rollout r;
  r.set_rollout_id("r-9");
  r.set_state(state);
  r.set_selector(std::move(selector));
  for (int percent : {10, 50, 100}) r.add_stage_percents(percent);
  std::sort(enabled.begin(), enabled.end());
  for (const std::string& h : enabled) r.add_enabled_hosts(h);
  return r;
}

v1::Host HostOf(const std::string& id, bool waits, std::string zone = "a") {
  v1::Host host;
  host.set_host_id(id);
  host.set_waits_for_rollout(waits);
  (*host.mutable_labels())["zone"] = std::move(zone);
  return host;
}

TEST(RolloutEnablementTest, ARolloutOnlyEnablesHostsThatWaitForOne) {
  const v1::HostPreflight preflight;
  auto state_of = [&](const v1::Rollout* rollout, const v1::Host& host) {
    return EnablementOf(preflight, EnforcePolicy{}, VerdictOf(rollout, host)).state();
  };
  const v1::Host enforcing = HostOf("hv-2", false);
  const v1::Host waiting = HostOf("hv-2", true);
  // A host that does not wait enforces whatever the rollout says: a
  // rollout never turns enforcement off.
  EXPECT_EQ(state_of(nullptr, enforcing), v1::HostEnablement::STATE_ENFORCE);
  for (auto s : {v1::Rollout::STATE_RUNNING, v1::Rollout::STATE_PAUSED,
                 v1::Rollout::STATE_HALTED, v1::Rollout::STATE_ABORTED, v1::Rollout::STATE_DONE}) {
    const v1::Rollout r = RolloutOf(s, {"hv-1", "hv-3"}, "zone=b");
    EXPECT_EQ(state_of(&r, enforcing), v1::HostEnablement::STATE_ENFORCE) << s;
    EXPECT_EQ(state_of(&r, HostOf("hv-1", true)), v1::HostEnablement::STATE_ENFORCE) << s;
    EXPECT_EQ(state_of(&r, waiting), v1::HostEnablement::STATE_NOT_ENABLED) << s;
  }
  // A waiting host with no rollout, or only the new_hosts setting.
  v1::Rollout setting;
  setting.set_new_hosts(v1::NEW_HOSTS_WAIT_FOR_ROLLOUT);
  EXPECT_EQ(state_of(nullptr, waiting), v1::HostEnablement::STATE_NOT_ENABLED);
  EXPECT_THAT(VerdictOf(&setting, waiting).reason,
              HasSubstr("registered while new_hosts was wait-for-rollout"));
  const v1::Rollout running = RolloutOf(v1::Rollout::STATE_RUNNING, {"hv-1"});
  EXPECT_EQ(EnablementOf(preflight, EnforcePolicy{}, VerdictOf(&running, waiting)).reason(),
            "rollout r-9 (running, stage 1 of 3 at 10%) has not enabled this host yet");
  const v1::Rollout aborted = RolloutOf(v1::Rollout::STATE_ABORTED, {"hv-1"});
  EXPECT_EQ(VerdictOf(&aborted, waiting).reason,
            "rollout r-9 was aborted before it enabled this host");
  // Done over every host: every waiting host, including those never seen.
  const v1::Rollout done_all = RolloutOf(v1::Rollout::STATE_DONE, {"hv-1"});
  EXPECT_EQ(state_of(&done_all, HostOf("hv-new", true)), v1::HostEnablement::STATE_ENFORCE);
  // Done over a selector: the waiting hosts it matches, later ones too.
  const v1::Rollout done_zone = RolloutOf(v1::Rollout::STATE_DONE, {"hv-1"}, "zone=a");
  EXPECT_EQ(state_of(&done_zone, HostOf("hv-new", true, "a")), v1::HostEnablement::STATE_ENFORCE);
  EXPECT_EQ(state_of(&done_zone, HostOf("hv-new", true, "b")),
            v1::HostEnablement::STATE_NOT_ENABLED);
  // A host the operator waived says so, whatever the rollout.
  v1::HostPreflight clear;
  for (const char* name : {"l1tf", "mds"}) {
    v1::CpuVulnerability* v = clear.add_vulnerabilities();
    v->set_name(name);
    v->set_smt_relevant(true);
  }
  EXPECT_EQ(EnablementOf(clear, EnforcePolicy{true, {"l1tf", "mds"}}, VerdictOf(&running, waiting)).state(),
            v1::HostEnablement::STATE_WAIVED);
}

TEST(RolloutOptionsTest, ConfigFillsThemAndBadValuesNameTheField) {
  v1::RolloutConfig config;
  RolloutOptions defaults = RolloutOptionsFromConfig(config);
  EXPECT_EQ(defaults.check_interval, std::chrono::seconds(10));
  EXPECT_EQ(defaults.no_report_halt, std::chrono::seconds(120));
  EXPECT_EQ(defaults.min_soak_s, 60);
  EXPECT_OK(ValidateRolloutOptions(defaults));
  config.set_check_interval_s(0);
  EXPECT_THAT(ValidateRolloutOptions(RolloutOptionsFromConfig(config)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "rollout.check_interval_s must be 1 to 3600 seconds (unset: 10), got 0"));
  config.set_check_interval_s(5);
  config.set_no_report_halt_s(100000);
  EXPECT_THAT(ValidateRolloutOptions(RolloutOptionsFromConfig(config)),
              StatusIs(absl::StatusCode::kInvalidArgument, "rollout.no_report_halt_s must be 1"));
  config.set_no_report_halt_s(30);
  config.set_min_soak_s(0);
  EXPECT_THAT(ValidateRolloutOptions(RolloutOptionsFromConfig(config)),
              StatusIs(absl::StatusCode::kInvalidArgument, "rollout.min_soak_s must be 1"));
  config.set_min_soak_s(1);
  const RolloutOptions set = RolloutOptionsFromConfig(config);
  EXPECT_OK(ValidateRolloutOptions(set));
  EXPECT_EQ(set.check_interval, std::chrono::seconds(5));
  EXPECT_EQ(set.no_report_halt, std::chrono::seconds(30));
  EXPECT_EQ(set.min_soak_s, 1);
}

TEST_F(RolloutControlTest, RefusesBadInputNamingTheFieldAndTheRule) {
  const absl::StatusCode bad = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(Start({}, 600).status(), StatusIs(bad, "stage_percents is empty"));
  EXPECT_THAT(Start({10, 10}, 600).status(), StatusIs(bad, "stages strictly increase"));
  EXPECT_THAT(Start({10, 150}, 600).status(), StatusIs(bad, "stage_percents[1] 150% must be 1%"));
  EXPECT_THAT(Start({10}, 30).status(),
              StatusIs(bad, "soak_seconds 30s is out of range: 1m to 7d"));
  EXPECT_THAT(Start({10}, 8 * 86400).status(), StatusIs(bad, "soak_seconds"));
  EXPECT_THAT(Start({10}, 600, "zone").status(), StatusIs(bad, "selector"));
  EXPECT_THAT(Start({10}, 600, "zone=c").status(),
              StatusIs(bad, "selector 'zone=c' must match a registered host; it matches none "
                            "of the 20 registered"));
  // Nothing was started: the record holds the new_hosts setting only.
  ASSERT_OK_AND_ASSIGN(v1::Rollout record, control_->GetRollout());
  EXPECT_EQ(record.rollout_id(), "");
  EXPECT_THAT(Change(RolloutControl::Change::kPause).status(),
              StatusIs(absl::StatusCode::kNotFound, "no rollout"));
}

TEST_F(RolloutControlTest, StagesSoakAdvanceAndEndDone) {
  ASSERT_OK_AND_ASSIGN(v1::Rollout started, Start({10, 50, 100}, 600));
  EXPECT_EQ(started.state(), v1::Rollout::STATE_RUNNING);
  EXPECT_EQ(started.stage(), 0);
  EXPECT_EQ(started.matching_hosts(), 20);
  const std::vector<std::string> stage1 = StageHosts(Hosts(20), 10);
  std::vector<std::string> want = stage1;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(EnabledBy(started.rollout_id()), want);
  EXPECT_EQ(started.enabled_count(), 2);
  EXPECT_EQ(started.carried_count(), 0);
  for (int i = 0; i < 20; ++i) {
    const std::string host = absl::StrCat("hv-", i);
    const bool in = std::count(stage1.begin(), stage1.end(), host) > 0;
    EXPECT_EQ(EnablementOfHost(host), in ? v1::HostEnablement::STATE_ENFORCE
                                         : v1::HostEnablement::STATE_NOT_ENABLED)
        << host;
  }
  // What a Register answers says the same.
  const std::vector<std::string> all = Hosts(20);
  const std::string outside = *std::find_if(
      all.begin(), all.end(),
      [&](const std::string& h) { return std::count(stage1.begin(), stage1.end(), h) == 0; });
  ASSERT_OK_AND_ASSIGN(v1::RegisterResponse again, Register(outside));
  EXPECT_EQ(again.enablement().state(), v1::HostEnablement::STATE_NOT_ENABLED);

  EXPECT_THAT(Start({50}, 600).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("rollout ", started.rollout_id(),
                                    " is running: only one rollout runs at a time")));

  // Before the soak ends, nothing moves.
  now_ += absl::Seconds(599);
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(v1::Rollout r, control_->GetRollout());
  EXPECT_EQ(r.stage(), 0);
  now_ += absl::Seconds(1);
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(r, control_->GetRollout());
  EXPECT_EQ(r.stage(), 1);
  EXPECT_EQ(r.enabled_count(), 10);
  EXPECT_THAT(EnabledBy(r.rollout_id()), IsSupersetOf(stage1));
  // A host registered during stage 2 is enrolled when it falls in the
  // stage's share.
  for (int i = 20; i < 24; ++i) ASSERT_OK(Register(absl::StrCat("hv-", i)));
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(r, control_->GetRollout());
  EXPECT_EQ(r.matching_hosts(), 24);
  EXPECT_EQ(r.enabled_count(), 12);

  now_ += absl::Seconds(600);
  ASSERT_OK(control_->RunPass());
  now_ += absl::Seconds(600);
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(r, control_->GetRollout());
  EXPECT_EQ(r.state(), v1::Rollout::STATE_DONE);
  EXPECT_EQ(r.enabled_count(), 24);
  // Its record lists no host: each is on its own host record.
  EXPECT_EQ(r.enabled_hosts_size(), 0);
  EXPECT_EQ(EnabledBy(r.rollout_id()).size(), 24u);
  // Done over every host: one registered now is enabled at once.
  ASSERT_OK_AND_ASSIGN(v1::RegisterResponse late, Register("hv-99"));
  EXPECT_EQ(late.enablement().state(), v1::HostEnablement::STATE_ENFORCE);
  EXPECT_THAT(AuditMethods(),
              ElementsAreArray({"StartRollout", "EnableRolloutHosts", "AdvanceRollout",
                                "EnableRolloutHosts", "EnableRolloutHosts", "AdvanceRollout",
                                "EnableRolloutHosts", "FinishRollout"}));
}

TEST_F(RolloutControlTest, PauseResumeAbortFollowTheirRules) {
  ASSERT_OK_AND_ASSIGN(v1::Rollout started, Start({10, 100}, 600, "zone=a"));
  EXPECT_EQ(started.matching_hosts(), 10);
  EXPECT_EQ(started.enabled_count(), 1);
  EXPECT_THAT(Change(RolloutControl::Change::kResume).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "is running; only a paused or halted rollout resumes"));
  ASSERT_OK_AND_ASSIGN(v1::Rollout paused, Change(RolloutControl::Change::kPause));
  EXPECT_EQ(paused.state(), v1::Rollout::STATE_PAUSED);
  // Paused: the soak passes and nothing moves.
  now_ += absl::Seconds(3600);
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(v1::Rollout r, control_->GetRollout());
  EXPECT_EQ(r.stage(), 0);
  ASSERT_OK_AND_ASSIGN(r, Change(RolloutControl::Change::kResume));
  EXPECT_EQ(r.state(), v1::Rollout::STATE_RUNNING);
  // The stage soaks again from the resume.
  now_ += absl::Seconds(300);
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(r, control_->GetRollout());
  EXPECT_EQ(r.stage(), 0);

  ASSERT_OK_AND_ASSIGN(r, Change(RolloutControl::Change::kAbort));
  EXPECT_EQ(r.state(), v1::Rollout::STATE_ABORTED);
  EXPECT_EQ(r.enabled_count(), 1);
  EXPECT_THAT(Change(RolloutControl::Change::kAbort).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "is aborted"));
  // Aborted: no stage comes, the host it enabled stays enabled, the others
  // wait.
  now_ += absl::Seconds(3600);
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(r, control_->GetRollout());
  EXPECT_EQ(r.enabled_count(), 1);
  const std::vector<std::string> aborted = EnabledBy(r.rollout_id());
  ASSERT_EQ(aborted.size(), 1u);
  EXPECT_EQ(EnablementOfHost(aborted[0]), v1::HostEnablement::STATE_ENFORCE);

  // The next rollout carries the host the aborted one enabled.
  ASSERT_OK_AND_ASSIGN(v1::Rollout next, Start({5}, 600, "zone=b"));
  EXPECT_EQ(next.carried_count(), 1);
  EXPECT_EQ(next.enabled_count(), 2);
  EXPECT_EQ(EnabledBy(r.rollout_id()), aborted);
  EXPECT_EQ(EnabledBy(next.rollout_id()).size(), 1u);
  EXPECT_THAT(AuditMethods(),
              ElementsAreArray({"StartRollout", "EnableRolloutHosts", "PauseRollout",
                                "ResumeRollout", "AbortRollout", "StartRollout",
                                "EnableRolloutHosts"}));
}

// A stage of more hosts than one commit takes: they are marked in commits
// of at most kEnableChunk, each audited with the hosts it names.
TEST_F(RolloutControlTest, ALargeStageIsEnabledInCommitsOfAtMostAChunk) {
  for (int i = 20; i < 150; ++i) ASSERT_OK(Register(absl::StrCat("hv-", i)));
  ASSERT_OK_AND_ASSIGN(v1::Rollout started, Start({100}, 600));
  EXPECT_EQ(started.enabled_count(), 150);
  EXPECT_EQ(EnabledBy(started.rollout_id()).size(), 150u);
  v1::ListAuditRecordsRequest request;
  request.set_page_size(100);
  ASSERT_OK_AND_ASSIGN(v1::ListAuditRecordsResponse records,
                       sqlite_.state()->audit.ListAuditRecords(request));
  int commits = 0;
  for (const v1::AuditRecord& r : records.records()) {
    if (r.method() != "EnableRolloutHosts") continue;
    ++commits;
    EXPECT_EQ(r.subject(), started.rollout_id());
    EXPECT_THAT(r.reason(), ::testing::StartsWith("stage 1 of 1 (100%): "));
  }
  EXPECT_EQ(commits, (150 + static_cast<int>(kEnableChunk) - 1) / static_cast<int>(kEnableChunk));
  // The leader's next check finds nothing left to enable.
  ASSERT_OK(control_->RunPass());
  EXPECT_EQ(AuditMethods("EnableRolloutHosts").size(), static_cast<size_t>(commits));
}

// A record an older csd wrote lists its hosts: they keep enforcing, the
// leader copies them onto their host records (a carried one as such), and
// the next rollout's record lists none and carries them all.
TEST_F(RolloutControlTest, AnOlderCsdsListsHoldAndMoveOntoTheHostRecords) {
  v1::Rollout legacy;
  legacy.set_rollout_id("r-5");
  legacy.set_state(v1::Rollout::STATE_RUNNING);
  legacy.add_stage_percents(10);
  legacy.add_stage_percents(100);
  legacy.set_soak_seconds(3600);
  *legacy.mutable_stage_started_time() =
      google::protobuf::util::TimeUtil::SecondsToTimestamp(absl::ToUnixSeconds(now_));
  for (const char* h : {"hv-1", "hv-2", "hv-3"}) legacy.add_enabled_hosts(h);
  legacy.add_carried_hosts("hv-3");
  legacy.set_new_hosts(v1::NEW_HOSTS_WAIT_FOR_ROLLOUT);
  TestState& state = *sqlite_.state();
  ASSERT_OK(state.store.WriteSync(
      [&](store::Transaction& txn) { return txn.PutRollout(legacy); }));
  ASSERT_OK(state.rollout.Load(state.store));
  for (const char* h : {"hv-1", "hv-2", "hv-3"}) {
    EXPECT_EQ(EnablementOfHost(h), v1::HostEnablement::STATE_ENFORCE) << h;
  }
  ASSERT_OK_AND_ASSIGN(v1::Rollout r, control_->GetRollout());
  EXPECT_GE(r.enabled_count(), 3);
  EXPECT_EQ(r.carried_count(), 1);

  ASSERT_OK(control_->RunPass());
  std::vector<std::string> by_r5 = EnabledBy("r-5");
  EXPECT_THAT(by_r5, IsSupersetOf({"hv-1", "hv-2"}));
  EXPECT_THAT(EnabledBy("before r-5"), ElementsAreArray({"hv-3"}));
  // Only a host this rollout enabled halts it; hv-3 was carried.
  ASSERT_OK_AND_ASSIGN(r, control_->GetRollout());
  EXPECT_EQ(r.state(), v1::Rollout::STATE_RUNNING);

  ASSERT_OK(Change(RolloutControl::Change::kAbort).status());
  ASSERT_OK_AND_ASSIGN(v1::Rollout next, Start({10}, 600));
  EXPECT_EQ(next.enabled_hosts_size(), 0);
  EXPECT_EQ(next.carried_hosts_size(), 0);
  EXPECT_EQ(next.carried_count(), static_cast<int>(by_r5.size()) + 1);
  for (const char* h : {"hv-1", "hv-2", "hv-3"}) {
    EXPECT_EQ(EnablementOfHost(h), v1::HostEnablement::STATE_ENFORCE) << h;
  }
}

// A rolling upgrade: while a replica of an older csd shares the store, a
// start would make it read every carried host as not enabled.
TEST_F(RolloutControlTest, AStartWaitsForEveryReplicaToReadTheNewRecords) {
  RolloutOptions options;
  options.min_soak_s = 60;
  TestState& state = *sqlite_.state();
  RolloutControl held(state.store, state.rollout, state.host_status, state.placement, options,
                      [this] { return now_; }, nullptr, [] {
                        return absl::FailedPreconditionError("replica csd-old runs an older csd");
                      });
  v1::StartRolloutRequest request;
  request.add_stage_percents(100);
  request.set_soak_seconds(600);
  EXPECT_THAT(testing::Wait<v1::Rollout>([&](auto done) {
                held.StartRollout(request, Actor{"alice", "admin"}, std::move(done));
              }).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "replica csd-old"));
  ASSERT_OK_AND_ASSIGN(v1::Rollout record, control_->GetRollout());
  EXPECT_EQ(record.rollout_id(), "");
  EXPECT_EQ(EnablementOfHost("hv-0"), v1::HostEnablement::STATE_NOT_ENABLED);

  // A rollout started before: its stages still soak and advance, but
  // enable no more hosts until every replica reads their marks.
  ASSERT_OK_AND_ASSIGN(v1::Rollout started, Start({10, 100}, 600));
  EXPECT_EQ(started.enabled_count(), 2);
  now_ += absl::Seconds(600);
  ASSERT_OK(held.RunPass());
  ASSERT_OK_AND_ASSIGN(v1::Rollout r, control_->GetRollout());
  EXPECT_EQ(r.stage(), 1);
  EXPECT_EQ(r.enabled_count(), 2);
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(r, control_->GetRollout());
  EXPECT_EQ(r.enabled_count(), 20);
}

// Done over a selector: a waiting host that registers later enforces at
// once when the selector matches it; one that does not match waits.
TEST_F(RolloutControlTest, DoneOverASelectorEnablesLateMatchingHostsOnly) {
  ASSERT_OK_AND_ASSIGN(v1::Rollout started, Start({100}, 60, "zone=a"));
  EXPECT_EQ(started.enabled_count(), 10);
  now_ += absl::Seconds(60);
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(v1::Rollout done, control_->GetRollout());
  EXPECT_EQ(done.state(), v1::Rollout::STATE_DONE);
  ASSERT_OK_AND_ASSIGN(v1::RegisterResponse zone_a, Register("hv-30"));
  ASSERT_OK_AND_ASSIGN(v1::RegisterResponse zone_b, Register("hv-31"));
  EXPECT_EQ(zone_a.enablement().state(), v1::HostEnablement::STATE_ENFORCE);
  EXPECT_EQ(zone_b.enablement().state(), v1::HostEnablement::STATE_NOT_ENABLED);
  EXPECT_EQ(zone_b.enablement().reason(),
            absl::StrCat("rollout ", done.rollout_id(), " enables hosts matching zone=a only"));
  ASSERT_OK(control_->RunPass());
  EXPECT_EQ(EnablementOfHost("hv-30"), v1::HostEnablement::STATE_ENFORCE);
  EXPECT_EQ(EnablementOfHost("hv-31"), v1::HostEnablement::STATE_NOT_ENABLED);
}

// Issue #32 item 2: before, every host outside stage 1 of the first
// rollout became not-enabled. Hosts that enforce when a rollout starts
// keep enforcing through every stage, pause, abort and finish.
TEST_F(RolloutControlTest, ARolloutNeverTurnsEnforcementOff) {
  ASSERT_OK(SetNewHosts(v1::NEW_HOSTS_ENFORCE));
  const std::vector<std::string> enforcing = {"hv-40", "hv-41", "hv-42", "hv-43"};
  for (const std::string& h : enforcing) {
    ASSERT_OK_AND_ASSIGN(v1::RegisterResponse r, Register(h));
    EXPECT_EQ(r.enablement().state(), v1::HostEnablement::STATE_ENFORCE) << h;
  }
  auto all_enforce = [&](const std::string& when) {
    for (const std::string& h : enforcing) {
      EXPECT_EQ(EnablementOfHost(h), v1::HostEnablement::STATE_ENFORCE) << h << " " << when;
    }
  };
  ASSERT_OK_AND_ASSIGN(v1::Rollout started, Start({25, 100}, 600));
  // The stages are shares of the 20 hosts that wait, not of all 24.
  EXPECT_EQ(started.matching_hosts(), 20);
  EXPECT_EQ(started.enabled_count(), 5);
  all_enforce("at stage 1");
  ASSERT_OK(Change(RolloutControl::Change::kPause).status());
  all_enforce("paused");
  ASSERT_OK(Change(RolloutControl::Change::kAbort).status());
  all_enforce("aborted");
  // After the abort, a host new to csd follows new_hosts: enforce.
  ASSERT_OK_AND_ASSIGN(v1::RegisterResponse late, Register("hv-50"));
  EXPECT_EQ(late.enablement().state(), v1::HostEnablement::STATE_ENFORCE);
  // A known host that re-registers keeps what it had.
  ASSERT_OK_AND_ASSIGN(v1::RegisterResponse again, Register("hv-40"));
  EXPECT_EQ(again.enablement().state(), v1::HostEnablement::STATE_ENFORCE);
  ASSERT_OK_AND_ASSIGN(v1::Rollout next, Start({100}, 60));
  now_ += absl::Seconds(60);
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(v1::Rollout done, control_->GetRollout());
  EXPECT_EQ(done.state(), v1::Rollout::STATE_DONE);
  all_enforce("done");
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(EnablementOfHost(absl::StrCat("hv-", i)), v1::HostEnablement::STATE_ENFORCE) << i;
  }
}

TEST_F(RolloutControlTest, NewHostsIsAnAuditedSettingThatChangesNoRegisteredHost) {
  EXPECT_THAT(SetNewHosts(v1::NEW_HOSTS_UNSPECIFIED).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "new_hosts must be NEW_HOSTS_ENFORCE or NEW_HOSTS_WAIT_FOR_ROLLOUT"));
  // No rollout was started: the record holds the setting only.
  ASSERT_OK_AND_ASSIGN(v1::Rollout record, control_->GetRollout());
  EXPECT_EQ(record.rollout_id(), "");
  EXPECT_EQ(record.new_hosts(), v1::NEW_HOSTS_WAIT_FOR_ROLLOUT);
  EXPECT_THAT(Change(RolloutControl::Change::kPause).status(),
              StatusIs(absl::StatusCode::kNotFound, "no rollout"));
  ASSERT_OK_AND_ASSIGN(record, SetNewHosts(v1::NEW_HOSTS_ENFORCE));
  EXPECT_EQ(record.new_hosts(), v1::NEW_HOSTS_ENFORCE);
  // The hosts that registered while it was wait-for-rollout still wait.
  EXPECT_EQ(EnablementOfHost("hv-0"), v1::HostEnablement::STATE_NOT_ENABLED);
  ASSERT_OK_AND_ASSIGN(v1::RegisterResponse fresh, Register("hv-60"));
  EXPECT_EQ(fresh.enablement().state(), v1::HostEnablement::STATE_ENFORCE);
  // Setting the value it has writes nothing.
  ASSERT_OK(SetNewHosts(v1::NEW_HOSTS_ENFORCE).status());
  EXPECT_THAT(AuditMethods("SetNewHosts"), ElementsAreArray({"SetNewHosts", "SetNewHosts"}));
  // A rollout started later keeps the setting.
  ASSERT_OK_AND_ASSIGN(v1::Rollout started, Start({10}, 600));
  EXPECT_EQ(started.new_hosts(), v1::NEW_HOSTS_ENFORCE);
}

// Hosts that registered with new_hosts at its default all enforce.
class RolloutOnAnEnforcingFleetTest : public RolloutControlTest {
 protected:
  bool HostsWait() const override { return false; }
};

TEST_F(RolloutOnAnEnforcingFleetTest, StartSaysEveryHostEnforcesAndChangesNothing) {
  EXPECT_THAT(Start({25, 100}, 600).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "every one of the 20 host(s) registered already enforces"));
  EXPECT_THAT(Start({100}, 600, "zone=a").status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "every one of the 10 host(s) matching 'zone=a' already enforces"));
  EXPECT_EQ(control_->GetRollout().status().code(), absl::StatusCode::kNotFound);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(EnablementOfHost(absl::StrCat("hv-", i)), v1::HostEnablement::STATE_ENFORCE) << i;
  }
  EXPECT_TRUE(AuditMethods().empty());
}

TEST_F(RolloutControlTest, HaltsNamingAHostWithReconcileErrorsOrAHazard) {
  ASSERT_OK_AND_ASSIGN(v1::Rollout started, Start({10, 50, 100}, 600));
  const std::string canary = EnabledBy(started.rollout_id()).at(0);
  v1::ReportRequest report;
  report.set_host_id(canary);
  v1::VMObservation* vm = report.add_vms();
  vm->set_vm_id("vm-1");
  vm->mutable_enforcement()->set_state(v1::ENFORCEMENT_STATE_FAILED);
  vm->mutable_enforcement()->set_last_error("EPERM on tid 101");
  ASSERT_OK(testing::Wait<v1::ReportResponse>([&](auto done) {
              sqlite_.state()->reports.ApplyReport(report, std::move(done));
            }).status());
  now_ += absl::Seconds(600);
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(v1::Rollout r, control_->GetRollout());
  EXPECT_EQ(r.state(), v1::Rollout::STATE_HALTED);
  EXPECT_EQ(r.stage(), 0);
  EXPECT_EQ(r.halted_host(), canary);
  EXPECT_EQ(r.halt_reason(), absl::StrCat("host ", canary,
                                          " has reconcile errors: VM vm-1 is failed "
                                          "(EPERM on tid 101)"));
  // Halted: no stage comes however long it waits.
  now_ += absl::Seconds(6000);
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(r, control_->GetRollout());
  EXPECT_EQ(r.stage(), 0);

  // Resumed while the host still reports a hazard: halted again.
  report.clear_vms();
  v1::Hazard* hazard = report.mutable_preflight()->add_hazards();
  hazard->set_name("sched_ext");
  hazard->set_detail("sched_ext state 'enabled'");
  ASSERT_OK(testing::Wait<v1::ReportResponse>([&](auto done) {
              sqlite_.state()->reports.ApplyReport(report, std::move(done));
            }).status());
  ASSERT_OK(Change(RolloutControl::Change::kResume).status());
  ASSERT_OK(control_->RunPass());
  ASSERT_OK_AND_ASSIGN(r, control_->GetRollout());
  EXPECT_EQ(r.state(), v1::Rollout::STATE_HALTED);
  EXPECT_EQ(r.halt_reason(), absl::StrCat("host ", canary,
                                          " reports the hazard sched_ext (sched_ext state "
                                          "'enabled')"));
}

}  // namespace
}  // namespace cosched::server
