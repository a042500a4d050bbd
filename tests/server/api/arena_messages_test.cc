// Requests parsed into an arena of their own (server/api/arena_messages.h):
// a handler that takes the request keeps it whole after the call is done
// and the server gone, without a copy.
#include "server/api/arena_messages.h"

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "cosched/v1/agent.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace cosched::server {
namespace {

// Takes each Report's request with SharedRequest and answers at once.
class KeepingService final : public v1::AgentService::CallbackService {
 public:
  explicit KeepingService(bool with_arena) {
    if (with_arena) SetMessageAllocatorFor_Report(&allocator_);
  }

  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* context,
                                   const v1::ReportRequest* request,
                                   v1::ReportResponse* response) override {
    std::shared_ptr<v1::ReportRequest> taken =
        SharedRequest<v1::ReportRequest, v1::ReportResponse>(context, request);
    {
      std::lock_guard<std::mutex> lock(mu_);
      kept_ = taken;
      // What gRPC's own pointer shows after the taking.
      left_in_call_ = request->host_id();
    }
    response->set_dropped_vm_stats(taken->vms_size());
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // The request kept, which the service then lets go of.
  std::shared_ptr<v1::ReportRequest> TakeKept() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(kept_);
  }
  std::string left_in_call() {
    std::lock_guard<std::mutex> lock(mu_);
    return left_in_call_;
  }

 private:
  ArenaAllocator<v1::ReportRequest, v1::ReportResponse> allocator_;
  std::mutex mu_;
  std::shared_ptr<v1::ReportRequest> kept_;
  std::string left_in_call_;
};

v1::ReportRequest ManyVms() {
  v1::ReportRequest report;
  report.set_host_id("hv-1");
  for (int i = 0; i < 200; ++i) {
    v1::VMObservation* vm = report.add_vms();
    vm->set_vm_id("vm-" + std::to_string(i));
    vm->set_uuid(std::string(36, static_cast<char>('a' + i % 26)));
  }
  v1::StatsWindow* window = report.add_stats();
  for (int i = 0; i < 200; ++i) {
    v1::VMStats* stats = window->add_vms();
    stats->set_vm_id("vm-" + std::to_string(i));
    stats->mutable_share()->set_run_ns(1000 + i);
  }
  return report;
}

// Sends one Report to a server on a free loopback port, shuts it down and
// returns what the service kept.
std::shared_ptr<v1::ReportRequest> ReportThenStop(KeepingService& service,
                                                  const v1::ReportRequest& report) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  EXPECT_NE(port, 0);
  auto stub = v1::AgentService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::ReportResponse response;
  grpc::Status status = stub->Report(&context, report, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.dropped_vm_stats(), report.vms_size());
  server->Shutdown();
  server->Wait();
  return service.TakeKept();
}

TEST(ArenaMessages, ATakenRequestIsTheCallsOwnArenaMessageAndOutlivesTheServer) {
  KeepingService service(/*with_arena=*/true);
  const v1::ReportRequest sent = ManyVms();
  std::shared_ptr<v1::ReportRequest> kept = ReportThenStop(service, sent);
  ASSERT_NE(kept, nullptr);
  // Parsed into an arena, not moved out of one: gRPC's message is the one
  // kept, so it still has its contents.
  EXPECT_NE(kept->GetArena(), nullptr);
  EXPECT_EQ(service.left_in_call(), "hv-1");
  // The call and the server are gone; the arena lives as long as the
  // pointer (a use after free here is what the fuzz build's ASan finds).
  EXPECT_EQ(kept->SerializeAsString(), sent.SerializeAsString());
  std::weak_ptr<v1::ReportRequest> weak = kept;
  kept.reset();
  EXPECT_TRUE(weak.expired()) << "the arena outlived every holder";
}

TEST(ArenaMessages, WithoutTheAllocatorTheContentsMoveToAMessageOfTheirOwn) {
  KeepingService service(/*with_arena=*/false);
  const v1::ReportRequest sent = ManyVms();
  std::shared_ptr<v1::ReportRequest> kept = ReportThenStop(service, sent);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->GetArena(), nullptr);
  EXPECT_EQ(service.left_in_call(), "") << "moved, not copied";
  EXPECT_EQ(kept->SerializeAsString(), sent.SerializeAsString());
}

}  // namespace
}  // namespace cosched::server
