// Plan and ExplainVM as csd serves them (issue #32 item 9): a Plan of the
// whole fleet needs operator, and both run on csd's bounded query pool,
// which refuses past its limits with RESOURCE_EXHAUSTED.
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;

class QueryCallsTest : public ::testing::Test {
 protected:
  void Start(const std::string& plaintext_role, QueryPoolOptions queries = {}) {
    CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = dir_.Sub("data");
    options.authz.plaintext_role = plaintext_role;
    options.queries = queries;
    auto csd = CsdServer::Start(options);
    ASSERT_TRUE(csd.ok()) << csd.status();
    csd_ = std::move(*csd);
    control_ = v1::ControlPlane::NewStub(
        grpc::CreateChannel(csd_->address(), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Plan(const std::string& tenant, bool report = false) {
    grpc::ClientContext context;
    v1::PlanRequest request;
    request.set_tenant_id(tenant);
    request.set_report(report);
    v1::PlanResponse response;
    return control_->Plan(&context, request, &response);
  }

  cosched::testing::TempDir dir_;
  std::unique_ptr<CsdServer> csd_;
  std::unique_ptr<v1::ControlPlane::Stub> control_;
};

TEST_F(QueryCallsTest, AFleetWidePlanNeedsOperatorAViewerAsksPerTenant) {
  Start("viewer");
  grpc::Status fleet = Plan("");
  EXPECT_EQ(fleet.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(fleet.error_message(), HasSubstr("a Plan of the whole fleet (no tenant_id) needs operator"));
  EXPECT_TRUE(Plan("acme").ok());
  EXPECT_TRUE(Plan("", /*report=*/true).ok());
}

TEST_F(QueryCallsTest, AnOperatorPlansTheFleet) {
  Start("operator");
  EXPECT_TRUE(Plan("").ok());
}

TEST_F(QueryCallsTest, PlanAndExplainRunOnTheQueryPoolAndAreRefusedPastIt) {
  // No query may wait: every one is refused, naming the limits.
  Start("operator", {.threads = 1, .max_waiting = 0});
  grpc::Status plan = Plan("acme");
  EXPECT_EQ(plan.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(plan.error_message(), HasSubstr("Plan is refused"));
  grpc::ClientContext context;
  v1::ExplainVMRequest explain;
  explain.set_vm_id("vm-1");
  v1::ExplainVMResponse response;
  grpc::Status explained = control_->ExplainVM(&context, explain, &response);
  EXPECT_EQ(explained.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(explained.error_message(), HasSubstr("ExplainVM is refused"));
}

}  // namespace
}  // namespace cosched::server
