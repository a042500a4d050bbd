// Starts a real csd (CsdServer) on an ephemeral loopback port with a
// temporary data dir, and gives stubs to it.
#ifndef COSCHED_TESTS_SERVER_CSD_FIXTURE_H_
#define COSCHED_TESTS_SERVER_CSD_FIXTURE_H_

#include <memory>

#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/trusted_plaintext.h"

namespace cosched::server {

class CsdFixture : public ::testing::Test {
 protected:
  void SetUp() override { StartCsd(); }

  void StartCsd() {
    CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = dir_.Sub("data");
    testing::TrustPlaintextCallers(options.authz);
    // Reports back to back; the rate limit has tests of its own.
    options.report_rate.per_second = 0;
    auto csd = CsdServer::Start(options);
    ASSERT_TRUE(csd.ok()) << csd.status();
    csd_ = std::move(*csd);
    channel_ = grpc::CreateChannel(csd_->address(),
                                   grpc::InsecureChannelCredentials());
    control_ = v1::ControlPlane::NewStub(channel_);
    agent_ = v1::AgentService::NewStub(channel_);
  }

  void StopCsd() { csd_.reset(); }

  cosched::testing::TempDir dir_;
  std::unique_ptr<CsdServer> csd_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ControlPlane::Stub> control_;
  std::unique_ptr<v1::AgentService::Stub> agent_;
};

}  // namespace cosched::server

#endif  // COSCHED_TESTS_SERVER_CSD_FIXTURE_H_
