// GetStatus on csd with its SQLite store: one replica, leading, reaching
// its store, at the revision of its last commit.
#include "common/version.h"
#include "gtest/gtest.h"
#include "tests/server/csd_fixture.h"

namespace cosched::server {
namespace {

class StatusRpcTest : public CsdFixture {};

TEST_F(StatusRpcTest, OneReplicaThatLeadsAndReachesItsStore) {
  v1::TagVMRequest tag;
  tag.set_vm_id("vm-1");
  tag.set_tenant_id("acme");
  v1::TagVMResponse tagged;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(control_->TagVM(&context, tag, &tagged).ok());
  }
  grpc::ClientContext context;
  v1::GetStatusResponse status;
  grpc::Status answer = control_->GetStatus(&context, v1::GetStatusRequest(), &status);
  ASSERT_TRUE(answer.ok()) << answer.error_message();
  ASSERT_EQ(status.replicas_size(), 1);
  const v1::ReplicaStatus& self = status.replicas(0);
  EXPECT_EQ(self.store(), "sqlite");
  EXPECT_TRUE(self.leader());
  EXPECT_TRUE(self.store_reachable());
  EXPECT_EQ(self.store_problem(), "");
  EXPECT_EQ(self.version(), CoschedVersion());
  EXPECT_GT(self.revision(), 0);
  EXPECT_EQ(self.revision(), csd_->revision());
  EXPECT_EQ(self.agents_connected(), 0);
  EXPECT_TRUE(self.has_started_time());
  EXPECT_EQ(self.name(), "");
  EXPECT_EQ(self.unreachable(), "");
}

}  // namespace
}  // namespace cosched::server
