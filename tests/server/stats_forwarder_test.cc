// StatsForwarder and the leader's side of Replica.ForwardStats (issue #16):
// windows reach the leader's aggregator through a real gRPC service; a
// replica that leads forwards nothing; what cannot be sent is dropped and
// counted, never queued without bound; bad input names its field.
#include "server/stats_forwarder.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace cosched::server {
namespace {

using testing::Eventually;

// A leader's Replica service over a real aggregator.
class FakeLeader final : public v1::Replica::Service {
 public:
  grpc::Status ForwardStats(grpc::ServerContext*, const v1::ForwardStatsRequest* request,
                            v1::ForwardStatsResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_;
    absl::StatusOr<v1::ForwardStatsResponse> taken = TakeForwardedStats(*request, stats_);
    if (!taken.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad");
    *response = *taken;
    return grpc::Status::OK;
  }
  int requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  StatsAggregator stats_;

 private:
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

  std::unique_ptr<StatsForwarder> Forwarder(std::string leader, size_t max_queued = 100) {
    StatsForwarderOptions options;
    options.flush_interval = absl::Milliseconds(50);
    options.max_queued = max_queued;
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
  v1::ForwardedStats* good = request.add_reports();
  good->set_host_id("hv-1");
  *good->mutable_stats() = ReportOf("hv-1", "vm-1", 100)->stats();
  v1::ForwardedStats* bad = request.add_reports();
  bad->set_host_id("hv-2");
  (*bad->mutable_tagged_id())["instance 2"] = "vm-2";
  absl::StatusOr<v1::ForwardStatsResponse> taken = TakeForwardedStats(request, into);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(taken.status().message().find("reports[1].tagged_id key"), std::string::npos)
      << taken.status();
  EXPECT_EQ(into.QueryHost("hv-1", 300).windows(), 0) << "nothing half-taken";

  request.mutable_reports()->RemoveLast();
  taken = TakeForwardedStats(request, into);
  ASSERT_OK(taken.status());
  EXPECT_EQ(taken->ignored_windows(), 0);
  EXPECT_EQ(into.QueryHost("hv-1", 300).windows(), 1);
  // The same again: the aggregator already has it.
  taken = TakeForwardedStats(request, into);
  ASSERT_OK(taken.status());
  EXPECT_EQ(taken->ignored_windows(), 1);

  for (int i = 0; i <= kMaxForwardedReports; ++i) request.add_reports()->set_host_id("hv-3");
  EXPECT_NE(TakeForwardedStats(request, into).status().message().find(
                "reports has 1002 entries; at most 1000"),
            std::string::npos);
}

}  // namespace
}  // namespace cosched::server
