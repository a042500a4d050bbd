// Assignments stream to the watching agent of the right host: a snapshot,
// then deltas, across many concurrent streams; and csd serves the stock
// health checking API.
#include <chrono>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/server/csd_fixture.h"
#include "tests/testing/status_matchers.h"

namespace cosched::server {
namespace {

using std::chrono::seconds;
using std::chrono::system_clock;

class FanoutTest : public CsdFixture {
 protected:
  void Register(const std::string& host) {
    grpc::ClientContext context;
    v1::RegisterRequest request;
    request.set_host_id(host);
    v1::RegisterResponse response;
    ASSERT_OK(agent_->Register(&context, request, &response));
  }
  void Report(const std::string& host, std::vector<std::string> vms) {
    grpc::ClientContext context;
    v1::ReportRequest request;
    request.set_host_id(host);
    for (auto& vm : vms) request.add_vms()->set_vm_id(vm);
    v1::ReportResponse response;
    auto s = agent_->Report(&context, request, &response);
    ASSERT_OK(s) << s.error_message();
  }
  void Tag(const std::string& vm) {
    grpc::ClientContext context;
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    v1::TagVMResponse response;
    ASSERT_OK(control_->TagVM(&context, request, &response));
  }
};

TEST_F(FanoutTest, SnapshotThenDeltasToTheRightHost) {
  Register("host-a");
  Register("host-b");
  Tag("vm-a1");
  Report("host-a", {"vm-a1"});

  grpc::ClientContext context;
  context.set_deadline(system_clock::now() + seconds(20));
  v1::WatchAssignmentsRequest request;
  request.set_host_id("host-a");
  auto stream = agent_->WatchAssignments(&context, request);
  v1::WatchAssignmentsResponse message;
  ASSERT_TRUE(stream->Read(&message));
  EXPECT_EQ(message.kind(), v1::WatchAssignmentsResponse::KIND_SNAPSHOT);
  ASSERT_EQ(message.assignments_size(), 1);
  EXPECT_EQ(message.assignments(0).trust_group(), "default/vm/vm-a1");
  int64_t revision = message.revision();

  Tag("vm-b1");
  Report("host-b", {"vm-b1"});  // another host: nothing for host-a
  Report("host-a", {"vm-a1", "vm-a2"});
  Tag("vm-a2");
  ASSERT_TRUE(stream->Read(&message));
  EXPECT_EQ(message.kind(), v1::WatchAssignmentsResponse::KIND_DELTA);
  EXPECT_GT(message.revision(), revision);
  ASSERT_EQ(message.assignments_size(), 1);
  EXPECT_EQ(message.assignments(0).vm_id(), "vm-a2");

  // Connected shows in the host listing.
  grpc::ClientContext get_context;
  v1::GetHostRequest get;
  get.set_host_id("host-a");
  v1::Host host;
  ASSERT_OK(control_->GetHost(&get_context, get, &host));
  EXPECT_TRUE(host.connected());
  context.TryCancel();
}

TEST_F(FanoutTest, ManyWatchersEachGetTheirDelta) {
  constexpr int kHosts = 50;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::WatchAssignmentsResponse>>> streams;
  for (int i = 0; i < kHosts; ++i) {
    std::string host = "host-" + std::to_string(i);
    Register(host);
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(system_clock::now() + seconds(30));
    v1::WatchAssignmentsRequest request;
    request.set_host_id(host);
    streams.push_back(agent_->WatchAssignments(contexts.back().get(), request));
    v1::WatchAssignmentsResponse first;
    ASSERT_TRUE(streams.back()->Read(&first));
  }
  for (int i = 0; i < kHosts; ++i) {
    Report("host-" + std::to_string(i), {"vm-" + std::to_string(i)});
    Tag("vm-" + std::to_string(i));
  }
  for (int i = 0; i < kHosts; ++i) {
    v1::WatchAssignmentsResponse message;
    ASSERT_TRUE(streams[i]->Read(&message));
    ASSERT_EQ(message.assignments_size(), 1);
    EXPECT_EQ(message.assignments(0).vm_id(), "vm-" + std::to_string(i));
  }
  for (auto& c : contexts) c->TryCancel();
}

TEST_F(FanoutTest, ServesHealthChecks) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_OK(health->Check(&context, request, &response));
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace cosched::server
