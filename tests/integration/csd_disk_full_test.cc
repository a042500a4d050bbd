// csd on a full disk, through its RPCs: a TagVM that cannot be stored fails
// with RESOURCE_EXHAUSTED and says so, reads keep answering, and once space
// returns csd writes again and, restarted on the same data dir, holds every
// acknowledged tag and nothing else. Run by tests/store/with_small_fs.sh,
// which mounts a 400 KiB tmpfs at $COSCHED_TEST_SMALL_FS in a private mount
// namespace (root); the test grows it with `mount -o remount,size=`.
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/trusted_plaintext.h"

namespace cosched {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<server::CsdServer> StartCsd(const std::string& data_dir) {
  server::CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = data_dir;
  testing::TrustPlaintextCallers(options.authz);
  auto csd = server::CsdServer::Start(options);
  EXPECT_OK(csd);
  return csd.ok() ? std::move(*csd) : nullptr;
}

// A TagVM as big as the rules allow: 16 classes of 100 characters.
grpc::Status Tag(v1::ControlPlane::Stub& stub, const std::string& vm) {
  v1::TagVMRequest request;
  request.set_vm_id(vm);
  request.set_tenant_id("t1");
  for (int c = 0; c < 16; ++c)
    request.add_interference_classes(absl::StrCat("c", c, "-", std::string(96, 'x')));
  grpc::ClientContext context;
  v1::TagVMResponse response;
  return stub.TagVM(&context, request, &response);
}

grpc::Status Get(v1::ControlPlane::Stub& stub, const std::string& vm) {
  v1::GetVMRequest request;
  request.set_vm_id(vm);
  grpc::ClientContext context;
  v1::VM response;
  return stub.GetVM(&context, request, &response);
}

std::set<std::string> ListAll(v1::ControlPlane::Stub& stub) {
  std::set<std::string> ids;
  v1::ListVMsRequest request;
  request.set_page_size(1000);
  do {
    grpc::ClientContext context;
    v1::ListVMsResponse response;
    grpc::Status s = stub.ListVMs(&context, request, &response);
    EXPECT_OK(s) << s.error_message();
    if (!s.ok()) break;
    for (const v1::VM& vm : response.vms()) ids.insert(vm.vm_id());
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return ids;
}

TEST(CsdDiskFull, WritesFailClearlyReadsGoOnAndNothingIsLostWhenSpaceReturns) {
  const char* small_fs = std::getenv("COSCHED_TEST_SMALL_FS");
  ASSERT_NE(small_fs, nullptr) << "run through tests/store/with_small_fs.sh";
  const std::string data_dir = absl::StrCat(small_fs, "/csd-", getpid());

  std::set<std::string> acknowledged;
  {
    auto csd = StartCsd(data_dir);
    ASSERT_NE(csd, nullptr);
    auto stub = v1::ControlPlane::NewStub(
        grpc::CreateChannel(csd->address(), grpc::InsecureChannelCredentials()));
    grpc::Status full;
    for (int i = 0; i < 10000; ++i) {
      const std::string vm = absl::StrCat("vm-", i);
      grpc::Status s = Tag(*stub, vm);
      if (!s.ok()) {
        full = s;
        break;
      }
      acknowledged.insert(vm);
    }
    ASSERT_FALSE(full.ok()) << "400 KiB never filled";
    EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << full.error_message();
    EXPECT_THAT(full.error_message(), HasSubstr("disk full"));
    ASSERT_GT(acknowledged.size(), 0u);
    std::printf("%zu tags acknowledged before the disk was full: %s\n", acknowledged.size(),
                full.error_message().c_str());

    // Reads go on: every acknowledged tag, and not the refused one.
    EXPECT_EQ(ListAll(*stub), acknowledged);
    EXPECT_OK(Get(*stub, *acknowledged.begin()));
    EXPECT_EQ(Get(*stub, absl::StrCat("vm-", acknowledged.size())).error_code(),
              grpc::StatusCode::NOT_FOUND);

    // Space returns: the same csd writes again.
    const std::string grow = absl::StrCat("mount -o remount,size=8m ", small_fs);
    ASSERT_EQ(std::system(grow.c_str()), 0) << grow;
    for (int i = 0; i < 5; ++i) {
      const std::string vm = absl::StrCat("vm-after-", i);
      grpc::Status s = Tag(*stub, vm);
      EXPECT_OK(s) << vm << ": " << s.error_message();
      if (s.ok()) acknowledged.insert(vm);
    }
    csd->Shutdown();
  }

  // Restarted on the same data dir: the store opens (it refuses a corrupt
  // one) and holds exactly what was acknowledged.
  auto csd = StartCsd(data_dir);
  ASSERT_NE(csd, nullptr);
  auto stub = v1::ControlPlane::NewStub(
      grpc::CreateChannel(csd->address(), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(ListAll(*stub), acknowledged);
  EXPECT_OK(Tag(*stub, "vm-after-restart"));
}

}  // namespace
}  // namespace cosched
