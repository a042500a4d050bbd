// csd's Unix socket: its settings from csd.yaml and their checks, and the
// socket's life (made with its group and mode, served, refused to a second
// csd, replaced when stale, removed at stop). Runs as any user; calls as
// another user are in tests/integration/local_socket_test.cc.
#include "server/api/local_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/config_loader.h"
#include "common/transport.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;

CsdOptions FromYaml(const std::string& yaml) {
  v1::CsdConfig config;
  EXPECT_OK(ParseYamlConfig(yaml, "csd.yaml", &config));
  return CsdOptionsFromConfig(config);
}

TEST(LocalSocketOptions, TheDefaultSocketIsTriedOffIsNoneANamedOneIsRequired) {
  CsdOptions defaults = FromYaml("");
  EXPECT_EQ(defaults.local_socket.path, "/run/cosched/csd.sock");
  EXPECT_FALSE(defaults.local_socket.required);
  EXPECT_EQ(defaults.local_socket.group, "");
  EXPECT_EQ(defaults.local_socket.mode, "0660");
  EXPECT_EQ(defaults.authz.plaintext_role, "viewer");
  EXPECT_FALSE(defaults.authz.plaintext_agents);

  EXPECT_EQ(FromYaml("local_socket: {path: \"off\"}").local_socket.path, "");
  CsdOptions named = FromYaml(
      "local_socket: {path: /srv/csd.sock, group: wheel, mode: \"0600\"}\nplaintext_agents: true\n");
  EXPECT_EQ(named.local_socket.path, "/srv/csd.sock");
  EXPECT_TRUE(named.local_socket.required);
  EXPECT_EQ(named.local_socket.group, "wheel");
  EXPECT_EQ(named.local_socket.mode, "0600");
  EXPECT_TRUE(named.authz.plaintext_agents);
  // Tests build their options directly: no socket unless they ask.
  EXPECT_EQ(CsdOptions().local_socket.path, "");
}

TEST(LocalSocketOptions, ModesAreOctalWithinTheRulesAndGiveTheOwnerReadWrite) {
  EXPECT_EQ(*ParseSocketMode("0660"), 0660u);
  EXPECT_EQ(*ParseSocketMode("600"), 0600u);
  EXPECT_EQ(*ParseSocketMode("0666"), 0666u);
  for (const char* bad : {"", "66", "06600", "0699", "rw-rw----", "4660", "0460", "0266", "+660"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<uint32_t> mode = ParseSocketMode(bad);
    ASSERT_FALSE(mode.ok());
    EXPECT_EQ(mode.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(mode.status().message()),
                HasSubstr(absl::StrCat("local_socket.mode '", bad, "' must be 3 or 4 octal")));
  }
}

TEST(LocalSocketOptions, BadValuesAreRefusedAtStartNamingTheFieldAndTheRule) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"local_socket: {path: csd.sock}", "local_socket.path 'csd.sock' must be an absolute"},
      {"local_socket: {path: /run/cosched/}", "must be an absolute file path"},
      {absl::StrCat("local_socket: {path: /", std::string(95, 'a'), "}"),
       "bytes: at most 90 fit a Unix socket"},
      {"local_socket: {mode: \"0777x\"}", "local_socket.mode '0777x'"},
      {"local_socket: {group: no-such-group-cosched-test}",
       "local_socket.group 'no-such-group-cosched-test' is not a group of this host"},
      {"plaintext_role: superuser", "plaintext_role 'superuser' is not a role"},
      {"roles: [{role: operator, unix_users: [no-such-user-cosched-test]}]",
       "roles[0].unix_users[0] 'no-such-user-cosched-test' is not a user of this host"},
  };
  for (const auto& [yaml, says] : cases) {
    SCOPED_TRACE(yaml);
    absl::Status valid = ValidateCsdOptions(FromYaml(yaml));
    EXPECT_EQ(valid.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(valid.message()), HasSubstr(says));
  }
  EXPECT_OK(ValidateCsdOptions(FromYaml("local_socket: {group: \"0\", mode: \"0600\"}")));
}

class LocalSocketTest : public ::testing::Test {
 protected:
  CsdOptions Options(const std::string& data) {
    CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = dir_.Sub(data);
    options.local_socket.path = socket_;
    options.local_socket.required = true;
    // A group this process may give a file without privilege.
    options.local_socket.group = std::to_string(getgid());
    return options;
  }

  grpc::Status TagVM(const std::string& target, const std::string& vm) {
    auto stub = v1::ControlPlane::NewStub(
        grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    v1::TagVMResponse response;
    return stub->TagVM(&context, request, &response);
  }

  cosched::testing::TempDir dir_;
  const std::string socket_ = dir_.Sub("csd.sock");
};

TEST_F(LocalSocketTest, TheSocketHasItsGroupAndModeAndKnowsItsCallerByUid) {
  auto csd = CsdServer::Start(Options("data"));
  ASSERT_OK(csd);
  EXPECT_EQ((*csd)->local_socket_path(), socket_);
  struct stat st {};
  ASSERT_EQ(stat(socket_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, getgid());
  EXPECT_FALSE(std::ifstream(absl::StrCat(socket_, ".", getpid())).good())
      << "the temporary name is left behind";

  grpc::Status tag = TagVM("unix:" + socket_, "vm-1");
  if (getuid() == 0) {
    EXPECT_TRUE(tag.ok()) << tag.error_message();
  } else {
    // No binding for this uid: the viewer role, by name.
    EXPECT_EQ(tag.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(tag.error_message(),
                HasSubstr(absl::StrCat("uid:", getuid(), " has role viewer; TagVM needs role "
                                       "operator")));
  }
  // Loopback TCP: viewer, whoever calls.
  grpc::Status tcp = TagVM((*csd)->address(), "vm-2");
  EXPECT_EQ(tcp.error_code(), grpc::StatusCode::PERMISSION_DENIED) << tcp.error_message();
  EXPECT_THAT(tcp.error_message(), HasSubstr("has role viewer"));

  (*csd)->Shutdown();
  EXPECT_NE(access(socket_.c_str(), F_OK), 0) << "the socket outlived csd";
}

TEST_F(LocalSocketTest, ASecondCsdDoesNotTakeALiveSocketButReplacesAStaleOne) {
  auto first = CsdServer::Start(Options("a"));
  ASSERT_OK(first);
  auto second = CsdServer::Start(Options("b"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("served by another process"));
  first->reset();

  // A socket whose csd died: bound, never unlinked, nobody listening.
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  close(fd);
  auto third = CsdServer::Start(Options("c"));
  ASSERT_OK(third);
  grpc::Status tag = TagVM("unix:" + socket_, "vm-3");
  EXPECT_NE(tag.error_code(), grpc::StatusCode::UNAVAILABLE) << tag.error_message();
}

TEST_F(LocalSocketTest, APathThatIsNotASocketIsLeftAlone) {
  std::ofstream(socket_) << "not a socket";
  auto csd = CsdServer::Start(Options("data"));
  ASSERT_FALSE(csd.ok());
  EXPECT_EQ(csd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(csd.status().message()), HasSubstr("exists and is not a socket"));
  std::string kept;
  std::getline(std::ifstream(socket_), kept);
  EXPECT_EQ(kept, "not a socket");
}

TEST_F(LocalSocketTest, TheDefaultSocketMayFailANamedOneMayNot) {
  CsdOptions options = Options("data");
  options.local_socket.path = dir_.Sub("no/such/dir/csd.sock");
  auto required = CsdServer::Start(options);
  ASSERT_FALSE(required.ok());
  EXPECT_EQ(required.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(required.status().message()),
              HasSubstr("cannot create its directory"));

  options.local_socket.required = false;
  auto optional = CsdServer::Start(options);
  ASSERT_OK(optional);
  EXPECT_EQ((*optional)->local_socket_path(), "");
}

}  // namespace
}  // namespace cosched::server
