// Local access is not admin access (issue #17). A real csd with its
// defaults for plaintext callers (viewer, no host) and a Unix socket that
// anyone may connect to (mode 0666, so that the role, not the file mode, is
// what refuses): uid 65534 is refused TagVM with PERMISSION_DENIED on the
// socket and on loopback TCP, root is accepted on the socket and audited as
// "uid:0", and csctl reaches csd through `--server unix:PATH`. Runs as root
// (it changes uid); skipped otherwise.
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uid_t kNobody = 65534;

struct Exited {
  int code = -1;
  std::string output;
};

// Runs `argv` as `uid` (its gid too, no supplementary groups) and returns
// its exit code and what it printed. fork + exec: a forked copy of this
// process, which runs gRPC's threads, must not use gRPC itself.
Exited RunAs(uid_t uid, const std::vector<std::string>& argv) {
  int out[2];
  if (pipe(out) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    close(out[0]);
    close(out[1]);
    if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 ||
        setresuid(uid, uid, uid) != 0) {
      _exit(126);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  Exited run;
  char buffer[4096];
  for (ssize_t n; (n = read(out[0], buffer, sizeof(buffer))) > 0;) run.output.append(buffer, n);
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

class LocalSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "needs root (CI runs as root): it calls csd as uid " << kNobody;
    // uid 65534 must reach the socket: the test's directory is 0700.
    ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
    server::CsdOptions options;  // plaintext callers: csd's defaults
    options.listen = "127.0.0.1:0";
    options.data_dir = dir_.Sub("data");
    options.local_socket.path = socket_;
    options.local_socket.required = true;
    options.local_socket.group = "0";
    options.local_socket.mode = "0666";
    auto csd = server::CsdServer::Start(options);
    ASSERT_OK(csd);
    csd_ = std::move(*csd);
  }

  Exited Probe(uid_t uid, const std::string& target, const std::string& vm) {
    return RunAs(uid, {TAG_VM_PROBE, target, vm});
  }

  grpc::Status GetVM(const std::string& vm) {
    auto stub = v1::ControlPlane::NewStub(
        grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    v1::GetVMRequest request;
    request.set_vm_id(vm);
    v1::VM reply;
    return stub->GetVM(&context, request, &reply);
  }

  cosched::testing::TempDir dir_;
  const std::string socket_ = dir_.Sub("csd.sock");
  std::unique_ptr<server::CsdServer> csd_;
};

TEST_F(LocalSocketTest, AnUnprivilegedUidIsRefusedTagVMOnTheSocketAndOnLoopbackTcp) {
  Exited socket = Probe(kNobody, "unix:" + socket_, "vm-nobody");
  EXPECT_EQ(socket.code, 0) << socket.output;
  EXPECT_THAT(socket.output, StartsWith("PERMISSION_DENIED uid:65534 has role viewer; TagVM "
                                        "needs role operator"));

  Exited tcp = Probe(kNobody, csd_->address(), "vm-nobody");
  EXPECT_EQ(tcp.code, 0) << tcp.output;
  EXPECT_THAT(tcp.output, StartsWith("PERMISSION_DENIED plaintext:ipv4:127.0.0.1:"));
  EXPECT_THAT(tcp.output, HasSubstr("has role viewer; TagVM needs role operator"));
  // Root over TCP is no one in particular either.
  Exited root_tcp = Probe(0, csd_->address(), "vm-nobody");
  EXPECT_THAT(root_tcp.output, StartsWith("PERMISSION_DENIED")) << root_tcp.output;

  EXPECT_EQ(GetVM("vm-nobody").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(LocalSocketTest, RootIsAcceptedOnTheSocketAndAuditedByUid) {
  Exited root = Probe(0, "unix:" + socket_, "vm-root");
  EXPECT_THAT(root.output, StartsWith("OK")) << root.output;
  EXPECT_TRUE(GetVM("vm-root").ok());

  auto stub = v1::ControlPlane::NewStub(
      grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::ListAuditRecordsRequest request;
  request.set_subject("vm-root");
  v1::ListAuditRecordsResponse audit;
  ASSERT_TRUE(stub->ListAuditRecords(&context, request, &audit).ok());
  ASSERT_EQ(audit.records_size(), 1);
  EXPECT_EQ(audit.records(0).who(), "uid:0");
  EXPECT_EQ(audit.records(0).role(), "admin");
}

TEST_F(LocalSocketTest, CsctlReachesCsdThroughTheSocket) {
  const std::string server = "--server=unix:" + socket_;
  Exited root = RunAs(0, {CSCTL_BINARY, server, "tag", "vm-csctl"});
  EXPECT_EQ(root.code, 0) << root.output;
  Exited nobody = RunAs(kNobody, {CSCTL_BINARY, server, "untag", "vm-csctl"});
  EXPECT_EQ(nobody.code, 1) << nobody.output;
  EXPECT_THAT(nobody.output,
              HasSubstr("csctl: uid:65534 has role viewer; UntagVM needs role operator"));
  EXPECT_TRUE(GetVM("vm-csctl").ok());
}

// With the default mode, only root and the socket's group connect: others
// are stopped by the file's mode before csd sees them.
TEST(LocalSocketModeTest, TheDefaultModeKeepsOtherUsersOut) {
  ASSERT_EQ(geteuid(), 0u) << "needs root (CI runs as root): it calls csd as uid " << kNobody;
  cosched::testing::TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  server::CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = dir.Sub("data");
  options.local_socket.path = dir.Sub("csd.sock");
  options.local_socket.required = true;
  options.local_socket.group = "0";
  auto csd = server::CsdServer::Start(options);
  ASSERT_OK(csd);
  struct stat st {};
  ASSERT_EQ(stat(options.local_socket.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  Exited nobody = RunAs(kNobody, {TAG_VM_PROBE, "unix:" + options.local_socket.path, "vm-x"});
  EXPECT_THAT(nobody.output, StartsWith("UNAVAILABLE")) << nobody.output;
}

}  // namespace
}  // namespace cosched
