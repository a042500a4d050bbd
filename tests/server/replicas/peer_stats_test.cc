// Adding up the replicas' GetStats answers (server/replicas/peer_stats.h): figures by
// their rules, VMs and cores merged in order, and what is missing named.
#include "server/replicas/peer_stats.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::server {
namespace {

v1::GetStatsResponse Answer(int64_t start, int64_t end, const std::string& vm, int64_t run,
                            int64_t longest, int core) {
  v1::GetStatsResponse r;
  r.set_start_unix_ns(start);
  r.set_end_unix_ns(end);
  r.set_windows(3);
  r.set_lost_events(1);
  v1::VMStats* v = r.add_vms();
  v->set_vm_id(vm);
  v->mutable_share()->set_run_ns(run);
  v->mutable_share()->set_foreign_ns(run / 2);
  v->mutable_share()->set_longest_foreign_ns(longest);
  *r.mutable_total() = v->share();
  v1::CoreShare* c = r.add_cores();
  c->set_core(core);
  c->set_both_busy_ns(run);
  return r;
}

TEST(AddStatsAnswer, AddsFiguresMergesVmsAndCoresAndWidensTheSpan) {
  v1::GetStatsResponse sum = Answer(100, 200, "vm-b", 1000, 40, 1);
  AddStatsAnswer(Answer(50, 150, "vm-a", 3000, 70, 0), sum);
  AddStatsAnswer(Answer(120, 260, "vm-b", 10, 5, 1), sum);
  EXPECT_EQ(sum.start_unix_ns(), 50);
  EXPECT_EQ(sum.end_unix_ns(), 260);
  EXPECT_EQ(sum.windows(), 9);
  EXPECT_EQ(sum.lost_events(), 3);
  ASSERT_EQ(sum.vms_size(), 2);
  EXPECT_EQ(sum.vms(0).vm_id(), "vm-a");
  EXPECT_EQ(sum.vms(0).share().run_ns(), 3000);
  EXPECT_EQ(sum.vms(1).vm_id(), "vm-b");
  EXPECT_EQ(sum.vms(1).share().run_ns(), 1010);
  EXPECT_EQ(sum.vms(1).share().foreign_ns(), 505);
  EXPECT_EQ(sum.vms(1).share().longest_foreign_ns(), 40);
  EXPECT_EQ(sum.total().run_ns(), 4010);
  EXPECT_EQ(sum.total().longest_foreign_ns(), 70);
  ASSERT_EQ(sum.cores_size(), 2);
  EXPECT_EQ(sum.cores(0).core(), 0);
  EXPECT_EQ(sum.cores(0).both_busy_ns(), 3000);
  EXPECT_EQ(sum.cores(1).core(), 1);
  EXPECT_EQ(sum.cores(1).both_busy_ns(), 1010);
}

TEST(AddStatsAnswer, AnEmptySideTakesTheOthersSpan) {
  v1::GetStatsResponse sum;
  AddStatsAnswer(Answer(50, 150, "vm-a", 3000, 70, 0), sum);
  EXPECT_EQ(sum.start_unix_ns(), 50);
  EXPECT_EQ(sum.end_unix_ns(), 150);
  v1::GetStatsResponse before = sum;
  AddStatsAnswer(v1::GetStatsResponse(), sum);
  EXPECT_EQ(sum.DebugString(), before.DebugString());
}

// A replica whose agents ran a tenant's VMs that are gone now answers with
// gone_vms alone (no window of a current VM): that is an answer, added up.
TEST(AddStatsAnswer, GoneVmsAloneAreAnAnswerAndAddUp) {
  v1::GetStatsResponse gone;
  gone.set_start_unix_ns(40);
  gone.set_end_unix_ns(90);
  gone.mutable_gone_vms()->set_run_ns(500);
  *gone.mutable_total() = gone.gone_vms();
  v1::GetStatsResponse sum;
  AddStatsAnswer(gone, sum);
  EXPECT_EQ(sum.gone_vms().run_ns(), 500);
  EXPECT_EQ(sum.start_unix_ns(), 40);
  AddStatsAnswer(Answer(50, 150, "vm-a", 3000, 70, 0), sum);
  AddStatsAnswer(gone, sum);
  EXPECT_EQ(sum.gone_vms().run_ns(), 1000);
  EXPECT_EQ(sum.total().run_ns(), 4000);
  EXPECT_EQ(sum.start_unix_ns(), 40);
  EXPECT_EQ(sum.end_unix_ns(), 150);
  EXPECT_EQ(sum.windows(), 3);
  auto combined = CombineStatsAnswers(v1::GetStatsResponse(), {{"csd-b", gone}}, {}, "none");
  ASSERT_OK(combined);
  EXPECT_EQ(combined->gone_vms().run_ns(), 500);
}

TEST(CombineStatsAnswers, ErrorsBecomeNamedGapsAndNotFoundIsNone) {
  std::vector<PeerStatsAnswer> peers;
  peers.push_back({"csd-c", absl::NotFoundError("no stats")});
  peers.push_back({"csd-b", Answer(10, 20, "vm-b", 5, 1, 0)});
  peers.push_back({"csd-d", absl::UnavailableError("at 10.0.0.4:7443: connection refused")});
  v1::StatsReplicaGap mute;
  mute.set_replica("csd-a");
  mute.set_reason("it registered no address");
  auto combined = CombineStatsAnswers(Answer(15, 30, "vm-a", 7, 1, 0), peers, {mute}, "none");
  ASSERT_OK(combined);
  EXPECT_EQ(combined->vms_size(), 2);
  EXPECT_TRUE(combined->partial());
  ASSERT_EQ(combined->missing_replicas_size(), 2);
  EXPECT_EQ(combined->missing_replicas(0).replica(), "csd-a");
  EXPECT_EQ(combined->missing_replicas(1).replica(), "csd-d");
  EXPECT_EQ(combined->missing_replicas(1).reason(),
            "UNAVAILABLE: at 10.0.0.4:7443: connection refused");

  auto whole = CombineStatsAnswers(v1::GetStatsResponse(), {peers[0], peers[1]}, {}, "none");
  ASSERT_OK(whole);
  EXPECT_FALSE(whole->partial());
  EXPECT_EQ(whole->total().run_ns(), 5);
}

TEST(CombineStatsAnswers, NoWindowAnywhereIsNotFoundNamingTheGaps) {
  auto none = CombineStatsAnswers(v1::GetStatsResponse(),
                                  {{"csd-c", absl::NotFoundError("no stats")}}, {},
                                  "no stats were reported for vm 'x' in the last 300 s");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(), "no stats were reported for vm 'x' in the last 300 s");
  auto missing = CombineStatsAnswers(
      v1::GetStatsResponse(), {{"csd-d", absl::DeadlineExceededError("no answer within 1s")}}, {},
      "no stats were reported for vm 'x' in the last 300 s");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "no stats were reported for vm 'x' in the last 300 s by the replicas that answered; "
            "missing: csd-d (DEADLINE_EXCEEDED: no answer within 1s)");
}

// The gaps of a gathering that has nobody to ask: `done` must be called at
// once, on this thread, with no answers.
std::vector<v1::StatsReplicaGap> GapsWithNobodyToAsk(PeerStats& peers) {
  std::optional<std::vector<v1::StatsReplicaGap>> gaps;
  peers.Gather(v1::GetStatsRequest(), [&](std::vector<PeerStatsAnswer> answers,
                                          std::vector<v1::StatsReplicaGap> found) {
    EXPECT_TRUE(answers.empty());
    gaps = std::move(found);
  });
  EXPECT_TRUE(gaps.has_value()) << "with nobody to ask, done is called at once";
  return gaps.value_or(std::vector<v1::StatsReplicaGap>());
}

TEST(PeerStats, AListThatCannotBeReadIsAGapNamedStar) {
  PeerDirectory directory(
      [] { return absl::UnavailableError("etcd at 127.0.0.1:1 is unavailable"); }, {});
  PeerStats peers(directory, absl::Seconds(1));
  std::vector<v1::StatsReplicaGap> gaps = GapsWithNobodyToAsk(peers);
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_EQ(gaps[0].replica(), "*");
  EXPECT_NE(gaps[0].reason().find("etcd at 127.0.0.1:1 is unavailable"), std::string::npos);
}

TEST(PeerStats, ItselfIsNotAskedAndNoAddressIsAGap) {
  PeerDirectoryOptions options;
  options.self = "csd-a";
  PeerDirectory directory(
      [] {
        std::vector<store::EtcdReplica> replicas(2);
        replicas[0].set_name("csd-a");
        replicas[0].set_address("127.0.0.1:1");
        replicas[1].set_name("csd-b");
        return absl::StatusOr<std::vector<store::EtcdReplica>>(replicas);
      },
      options);
  PeerStats peers(directory, absl::Seconds(1));
  std::vector<v1::StatsReplicaGap> gaps = GapsWithNobodyToAsk(peers);
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_EQ(gaps[0].replica(), "csd-b");
  EXPECT_NE(gaps[0].reason().find("registered no address"), std::string::npos);
}

}  // namespace
}  // namespace cosched::server
