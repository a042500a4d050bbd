// StatsForwarder and the leader's side of Replica.ForwardStats (issue #16):
// windows reach the leader's aggregator through a real gRPC service; a
// replica that leads forwards nothing; what cannot be sent is dropped and
// counted, never queued without bound; bad input names its field.
#include "server/replicas/stats_forwarder.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace cosched::server {
namespace {

using testing::Eventually;

// Every host is the sender's.
bool AnyHost(const std::string&, const std::string&) { return true; }

// A leader's Replica service over a real aggregator.
class FakeLeader final : public v1::Replica::Service {
 public:
  grpc::Status ForwardStats(grpc::ServerContext*, const v1::ForwardStatsRequest* request,
                            v1::ForwardStatsResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_;
    absl::StatusOr<v1::ForwardStatsResponse> taken = TakeForwardedStats(*request, served_, stats_);
    if (!taken.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad");
    *response = *taken;
    return grpc::Status::OK;
  }
  int requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  void SetServed(ServedHost served) {
    std::lock_guard<std::mutex> lock(mu_);
    served_ = std::move(served);
  }
  StatsAggregator stats_;

 private:
  ServedHost served_ = AnyHost;  // guarded by mu_
  std::mutex mu_;
  int requests_ = 0;
};

std::shared_ptr<const v1::ReportRequest> ReportOf(const std::string& host, const std::string& vm,
                                                  int64_t run_ms) {
  auto report = std::make_shared<v1::ReportRequest>();
  report->set_host_id(host);
  v1::StatsWindow* w = report->add_stats();
  w->set_end_unix_ns(absl::ToUnixNanos(absl::Now() - absl::Seconds(1)));
  w->set_start_unix_ns(w->end_unix_ns() - 1000000000);
  v1::VMStats* stats = w->add_vms();
  stats->set_vm_id(vm);
  stats->mutable_share()->set_run_ns(run_ms * 1000000);
  return report;
}

class StatsForwarderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&leader_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<StatsForwarder> Forwarder(std::string leader, size_t max_queued = 100,
                                            absl::Duration unserved_retry_for = absl::Seconds(1)) {
    StatsForwarderOptions options;
    options.flush_interval = absl::Milliseconds(50);
    options.max_queued = max_queued;
    options.unserved_retry_for = unserved_retry_for;
    return std::make_unique<StatsForwarder>([leader] { return leader; }, directory_,
                                            std::move(options));
  }

  // This replica is "b"; "a" is the fake leader, "mute" gave no address.
  static PeerDirectoryOptions AsB() {
    PeerDirectoryOptions options;
    options.self = "b";
    return options;
  }
  PeerDirectory directory_{[this]() -> absl::StatusOr<std::vector<store::EtcdReplica>> {
                             store::EtcdReplica a;
                             a.set_name("a");
                             a.set_address(absl::StrCat("127.0.0.1:", port_));
                             store::EtcdReplica mute;
                             mute.set_name("mute");
                             return std::vector<store::EtcdReplica>{a, mute};
                           },
                           AsB()};

  FakeLeader leader_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(StatsForwarderTest, WindowsReachTheLeadersAggregatorWithTheirTaggedIds) {
  std::unique_ptr<StatsForwarder> forwarder = Forwarder("a");
  auto tagged = std::make_shared<const absl::flat_hash_map<std::string, std::string>>(
      absl::flat_hash_map<std::string, std::string>{{"instance-1", "vm-1"}});
  forwarder->Enqueue(ReportOf("hv-1", "instance-1", 300), tagged);
  forwarder->Enqueue(ReportOf("hv-2", "vm-2", 200), nullptr);
  EXPECT_TRUE(Eventually([&] { return forwarder->forwarded() == 2; }));
  EXPECT_EQ(forwarder->dropped(), 0);
  const v1::GetStatsResponse vm1 = leader_.stats_.QueryVms({"vm-1"}, 300);
  EXPECT_EQ(vm1.windows(), 1);
  EXPECT_EQ(vm1.total().run_ns(), 300000000);
  EXPECT_EQ(leader_.stats_.QueryHost("hv-2", 300).total().run_ns(), 200000000);
}

// The leader does not take the Reports of hosts it does not (yet) know as
// this replica's: the forwarder sends them again for a while (an agent that
// just moved here is known at this replica's next liveness record), in
// order, then drops and counts them.
TEST_F(StatsForwarderTest, ReportsTheLeaderDoesNotYetTakeAreSentAgainForAWhileThenDropped) {
  leader_.SetServed([](const std::string& host, const std::string& replica) {
    return host == "hv-1" && replica == "b";
  });
  std::unique_ptr<StatsForwarder> forwarder = Forwarder("a", 100, absl::Seconds(30));
  forwarder->Enqueue(ReportOf("hv-1", "vm-1", 300), nullptr);
  forwarder->Enqueue(ReportOf("hv-2", "vm-2", 200), nullptr);
  EXPECT_TRUE(Eventually([&] { return forwarder->forwarded() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a few flushes
  EXPECT_EQ(forwarder->dropped(), 0);
  EXPECT_EQ(leader_.stats_.QueryHost("hv-2", 300).windows(), 0);
  // The leader now knows hv-2 as b's: the Report it kept sending is taken.
  leader_.SetServed(AnyHost);
  EXPECT_TRUE(Eventually([&] { return forwarder->forwarded() == 2; }));
  EXPECT_EQ(leader_.stats_.QueryHost("hv-2", 300).total().run_ns(), 200000000);

  // A host the leader never takes as this replica's: dropped in the end.
  leader_.SetServed([](const std::string&, const std::string&) { return false; });
  std::unique_ptr<StatsForwarder> brief = Forwarder("a", 100, absl::Milliseconds(200));
  brief->Enqueue(ReportOf("hv-3", "vm-3", 100), nullptr);
  EXPECT_TRUE(Eventually([&] { return brief->dropped() == 1; }));
  EXPECT_EQ(brief->forwarded(), 0);
  EXPECT_EQ(leader_.stats_.QueryHost("hv-3", 300).windows(), 0);
}

TEST_F(StatsForwarderTest, TheLeaderForwardsNothingAndWhatCannotBeSentIsDropped) {
  // This replica leads: its own aggregator has the windows.
  std::unique_ptr<StatsForwarder> self = Forwarder("b");
  self->Enqueue(ReportOf("hv-1", "vm-1", 100), nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(self->forwarded(), 0);
  EXPECT_EQ(self->dropped(), 0);
  EXPECT_EQ(leader_.requests(), 0);

  // Nobody leads, or the leader gave no address: dropped, counted.
  for (const std::string& leader : {std::string(""), std::string("mute")}) {
    std::unique_ptr<StatsForwarder> forwarder = Forwarder(leader);
    forwarder->Enqueue(ReportOf("hv-1", "vm-1", 100), nullptr);
    EXPECT_TRUE(Eventually([&] { return forwarder->dropped() == 1; })) << leader;
    EXPECT_EQ(forwarder->forwarded(), 0);
  }
  // A full queue drops what comes on top.
  std::unique_ptr<StatsForwarder> small = Forwarder("", /*max_queued=*/0);
  small->Enqueue(ReportOf("hv-1", "vm-1", 100), nullptr);
  EXPECT_EQ(small->dropped(), 1);
  EXPECT_EQ(leader_.requests(), 0);
}

TEST(TakeForwardedStatsTest, BadInputNamesTheFieldAndAddsNothing) {
  StatsAggregator into;
  v1::ForwardStatsRequest request;
  request.set_replica("csd-b");
  v1::ForwardedStats* good = request.add_reports();
  good->set_host_id("hv-1");
  *good->mutable_stats() = ReportOf("hv-1", "vm-1", 100)->stats();
  v1::ForwardedStats* bad = request.add_reports();
  bad->set_host_id("hv-2");
  (*bad->mutable_tagged_id())["instance 2"] = "vm-2";
  absl::StatusOr<v1::ForwardStatsResponse> taken = TakeForwardedStats(request, AnyHost, into);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(taken.status().message().find("reports[1].tagged_id key"), std::string::npos)
      << taken.status();
  EXPECT_EQ(into.QueryHost("hv-1", 300).windows(), 0) << "nothing half-taken";

  request.mutable_reports()->RemoveLast();
  taken = TakeForwardedStats(request, AnyHost, into);
  ASSERT_OK(taken.status());
  EXPECT_EQ(taken->ignored_windows(), 0);
  EXPECT_EQ(into.QueryHost("hv-1", 300).windows(), 1);
  // The same again: the aggregator already has it.
  taken = TakeForwardedStats(request, AnyHost, into);
  ASSERT_OK(taken.status());
  EXPECT_EQ(taken->ignored_windows(), 1);

  for (int i = 0; i <= kMaxForwardedReports; ++i) request.add_reports()->set_host_id("hv-3");
  EXPECT_NE(TakeForwardedStats(request, AnyHost, into).status().message().find(
                "reports has 1002 entries; at most 1000"),
            std::string::npos);
}

TEST(TakeForwardedStatsTest, ANameIsNeeded) {
  StatsAggregator into;
  v1::ForwardStatsRequest request;
  request.add_reports()->set_host_id("hv-1");
  absl::StatusOr<v1::ForwardStatsResponse> taken = TakeForwardedStats(request, AnyHost, into);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(taken.status().message().find("replica"), std::string::npos) << taken.status();
}

// Issue #32 item 3: a replica speaks for the hosts whose Reports it takes,
// no others; their windows are kept under the host's own series limit.
TEST(TakeForwardedStatsTest, OnlyHostsTheSenderServesAreTakenUnderTheirSeriesLimit) {
  StatsAggregator into;
  std::vector<std::pair<std::string, std::string>> asked;
  const ServedHost served = [&](const std::string& host, const std::string& replica) {
    asked.emplace_back(host, replica);
    return host == "hv-1" && replica == "csd-b";
  };
  v1::ForwardStatsRequest request;
  request.set_replica("csd-b");
  for (const std::string host : {"hv-1", "hv-2"}) {
    v1::ForwardedStats* report = request.add_reports();
    report->set_host_id(host);
    *report->mutable_stats() = ReportOf(host, "vm-of-" + host, 100)->stats();
  }
  // Its windows name 201 VMs: the limit is the one of a host reporting them.
  v1::StatsWindow* window = request.mutable_reports(0)->mutable_stats(0);
  for (int v = 0; v < 200; ++v) window->add_vms()->set_vm_id("extra-" + std::to_string(v));
  absl::StatusOr<v1::ForwardStatsResponse> taken = TakeForwardedStats(request, served, into);
  ASSERT_OK(taken.status());
  EXPECT_THAT(taken->unserved(), ::testing::ElementsAre(1));
  EXPECT_EQ(asked, (std::vector<std::pair<std::string, std::string>>{{"hv-1", "csd-b"},
                                                                      {"hv-2", "csd-b"}}));
  EXPECT_EQ(into.QueryHost("hv-2", 300).windows(), 0);
  EXPECT_EQ(into.QueryHost("hv-1", 300).windows(), 1);
  EXPECT_EQ(into.VmSeriesCount(), 201u);
  // The next forward names 100 other VMs: the host keeps SeriesLimit(100).
  v1::StatsWindow next = *window;
  next.set_start_unix_ns(window->end_unix_ns());
  next.set_end_unix_ns(window->end_unix_ns() + 1000000);
  next.clear_vms();
  for (int v = 0; v < 100; ++v) next.add_vms()->set_vm_id("next-" + std::to_string(v));
  request.mutable_reports()->RemoveLast();
  request.mutable_reports(0)->clear_stats();
  *request.mutable_reports(0)->add_stats() = next;
  ASSERT_OK(TakeForwardedStats(request, served, into).status());
  EXPECT_EQ(into.VmSeriesCount(), StatsAggregator::SeriesLimit(100));
}

}  // namespace
}  // namespace cosched::server
