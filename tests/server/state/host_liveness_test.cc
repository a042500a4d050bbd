// HostLiveness: what this csd heard of each host merged with the other
// replicas' seen records, as Place, csctl hosts and staged rollouts judge
// liveness and health (issue #16).
#include "server/state/host_liveness.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1800000000);

v1::ReportRequest Report(const std::string& host) {
  v1::ReportRequest report;
  report.set_host_id(host);
  return report;
}

// A record `replica` wrote at kT0 + 60 s.
store::EtcdSeen Record(const std::string& replica, const std::string& host, absl::Time reported,
                       bool connected, const std::string& problem = "",
                       absl::Time written = kT0 + absl::Seconds(60)) {
  store::EtcdSeen record;
  record.set_replica(replica);
  record.set_written_unix_ns(absl::ToUnixNanos(written));
  store::EtcdSeenHost* seen = record.add_hosts();
  seen->set_host_id(host);
  if (reported != absl::InfinitePast()) seen->set_last_report_unix_ns(absl::ToUnixNanos(reported));
  seen->set_connected(connected);
  seen->set_problem(problem);
  return record;
}

TEST(HostLivenessTest, TheLatestReportToAnyReplicaSpeaks) {
  HostLiveness liveness;
  EXPECT_FALSE(liveness.Latest("hv-1").has_value());
  liveness.Note(Report("hv-1"), kT0);
  ASSERT_TRUE(liveness.Latest("hv-1").has_value());
  EXPECT_EQ(liveness.Latest("hv-1")->time, kT0);
  EXPECT_EQ(liveness.Latest("hv-1")->replica, "");

  // The agent moved to replica b, which heard it later, with a problem.
  liveness.SetOthers({Record("b", "hv-1", kT0 + absl::Seconds(30), true, "reports the hazard X")});
  std::optional<HostLiveness::Seen> seen = liveness.Latest("hv-1");
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->time, kT0 + absl::Seconds(30));
  EXPECT_EQ(seen->replica, "b");
  EXPECT_EQ(seen->problem, "reports the hazard X");
  EXPECT_TRUE(seen->connected);
  EXPECT_TRUE(liveness.ConnectedElsewhere("hv-1", kT0));
  // What this csd heard itself stays its own.
  EXPECT_EQ(liveness.Local("hv-1")->time, kT0);

  // Back here, later and healthy: this csd's Report speaks.
  liveness.Note(Report("hv-1"), kT0 + absl::Seconds(60));
  seen = liveness.Latest("hv-1");
  EXPECT_EQ(seen->time, kT0 + absl::Seconds(60));
  EXPECT_EQ(seen->replica, "");
  EXPECT_EQ(seen->problem, "");

  // b's next record no longer has it: nothing connects it elsewhere.
  liveness.SetOthers({});
  EXPECT_FALSE(liveness.ConnectedElsewhere("hv-1", kT0));
  EXPECT_EQ(liveness.Latest("hv-1")->time, kT0 + absl::Seconds(60));
}

TEST(HostLivenessTest, AHostInTwoRecordsIsConnectedIfEitherHoldsItsStream) {
  HostLiveness liveness;
  // Mid-move: b has the later Report, c holds the stream and has none yet.
  liveness.SetOthers({Record("b", "hv-1", kT0 + absl::Seconds(5), false),
                      Record("c", "hv-1", absl::InfinitePast(), true)});
  std::optional<HostLiveness::Seen> seen = liveness.Latest("hv-1");
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->time, kT0 + absl::Seconds(5));
  EXPECT_EQ(seen->replica, "b");
  EXPECT_TRUE(seen->connected);
  EXPECT_TRUE(liveness.ConnectedElsewhere("hv-1", kT0));
  EXPECT_EQ(liveness.ConnectedReplica("hv-1", kT0), "c");
  EXPECT_FALSE(liveness.ConnectedElsewhere("hv-2", kT0));
  EXPECT_EQ(liveness.ConnectedReplica("hv-2", kT0), "");
}

// A replica that could not read the records for a while keeps the last
// ones: a stream they name counts only while the record is recent enough.
TEST(HostLivenessTest, AStreamCountsOnlyByARecentRecord) {
  HostLiveness liveness;
  liveness.SetOthers({Record("b", "hv-1", absl::InfinitePast(), true, "", kT0),
                      Record("c", "hv-1", absl::InfinitePast(), true, "", kT0 - absl::Hours(1))});
  EXPECT_EQ(liveness.ConnectedReplica("hv-1", kT0 - absl::Seconds(60)), "b");
  EXPECT_TRUE(liveness.ConnectedElsewhere("hv-1", kT0));
  EXPECT_FALSE(liveness.ConnectedElsewhere("hv-1", kT0 + absl::Seconds(1)));
  EXPECT_EQ(liveness.ConnectedReplica("hv-1", kT0 + absl::Seconds(1)), "");
}

TEST(HostLivenessTest, TheRecordHasEveryHostHeardAndEveryStreamHeld) {
  HostLiveness liveness;
  v1::ReportRequest failing = Report("hv-1");
  v1::VMObservation* vm = failing.add_vms();
  vm->set_vm_id("vm-9");
  vm->mutable_enforcement()->set_state(v1::ENFORCEMENT_STATE_FAILED);
  vm->mutable_enforcement()->set_last_error("prctl: EPERM");
  liveness.Note(failing, kT0);
  liveness.Note(Report("hv-2"), kT0);
  liveness.Forget("hv-2");  // removed

  std::vector<store::EtcdSeenHost> record = liveness.Record({"hv-1", "hv-3"});
  ASSERT_EQ(record.size(), 2u);
  const store::EtcdSeenHost& one = record[0].host_id() == "hv-1" ? record[0] : record[1];
  const store::EtcdSeenHost& three = record[0].host_id() == "hv-3" ? record[0] : record[1];
  EXPECT_EQ(one.host_id(), "hv-1");
  EXPECT_EQ(one.last_report_unix_ns(), absl::ToUnixNanos(kT0));
  EXPECT_TRUE(one.connected());
  EXPECT_THAT(one.problem(), HasSubstr("has reconcile errors: VM vm-9"));
  EXPECT_THAT(one.problem(), HasSubstr("prctl: EPERM"));
  EXPECT_EQ(three.host_id(), "hv-3");
  EXPECT_EQ(three.last_report_unix_ns(), 0);  // holds a stream, no Report yet
  EXPECT_TRUE(three.connected());
}

TEST(HostLivenessTest, AProblemIsAShortSentence) {
  v1::ReportRequest report = Report("hv-1");
  EXPECT_EQ(ReportProblem(report), "");
  v1::Hazard* hazard = report.mutable_preflight()->add_hazards();
  hazard->set_name("sched_ext");
  hazard->set_detail(std::string(1000, 'd'));
  const std::string problem = ReportProblem(report);
  EXPECT_THAT(problem, HasSubstr("reports the hazard sched_ext"));
  EXPECT_LE(problem.size(), 240u);
  EXPECT_THAT(problem, ::testing::EndsWith("..."));
}

// An observing agent's VM that enforcing would leave partial is a problem
// before any cookie is set; one it would enforce is none.
TEST(HostLivenessTest, AFailureAnObservingAgentForeseesIsAProblem) {
  v1::ReportRequest report = Report("hv-1");
  v1::VMObservation* vm = report.add_vms();
  vm->set_vm_id("vm-1");
  vm->mutable_enforcement()->set_state(v1::ENFORCEMENT_STATE_OBSERVED);
  vm->mutable_enforcement()->set_observed_state(v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_EQ(ReportProblem(report), "");
  vm->mutable_enforcement()->set_observed_state(v1::ENFORCEMENT_STATE_PARTIAL);
  vm->mutable_enforcement()->set_last_error("thread 102: prctl: EPERM");
  EXPECT_THAT(ReportProblem(report),
              HasSubstr("has reconcile errors: VM vm-1 would be partial (thread 102"));
}

}  // namespace
}  // namespace cosched::server
