// Failover between csd replicas (issue #16, part 5): two csd processes share
// one real etcd member; an agent is given both addresses and csctl a list.
// When the agent's replica is killed with SIGKILL, the agent moves to the
// other and resumes its stream by revision: no snapshot, and every later
// change arrives once. csctl reaches whichever replica of its list answers.
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "cli/csctl.h"
#include "cosched/store/etcd_records.pb.h"
#include "etcd/client.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/csd_process.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/eventually.h"
#include "tests/testing/free_port.h"
#include "tests/testing/mini_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/trusted_plaintext.h"

namespace cosched {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::CsdProcess;
using testing::Eventually;

class FailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(etcd_.Start());
    for (int i = 0; i < 2; ++i) {
      // A name each: their default, the host name, is one for both.
      const std::string config = dir_.Sub("csd-" + std::to_string(i) + ".yaml");
      std::ofstream(config) << testing::kTrustedPlaintextYaml << "store:\n  etcd:\n    endpoints: [\""
                            << etcd_.endpoint() << "\"]\n    prefix: /cosched\n"
                            << "    lease_ttl_s: 2\n    replica_name: csd-" << i << "\n";
      const std::string address = "127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
      replicas_[i] = std::make_unique<CsdProcess>(CSD_BINARY, address,
                                                  dir_.Sub("csd-" + std::to_string(i)), config);
      ASSERT_TRUE(replicas_[i]->WaitServing()) << "replica " << i << " did not start on " << address;
    }
  }

  std::unique_ptr<v1::ControlPlane::Stub> Control(int replica) {
    return v1::ControlPlane::NewStub(
        grpc::CreateChannel(replicas_[replica]->address(), grpc::InsecureChannelCredentials()));
  }

  // Tags `vm` for `tenant` at `level` through `replica`; the response's
  // revision.
  int64_t Tag(int replica, const std::string& vm, const std::string& tenant,
              v1::IsolationLevel level = v1::ISOLATION_LEVEL_VM) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + seconds(10));
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id(tenant);
    request.set_isolation(level);
    v1::TagVMResponse response;
    EXPECT_OK(Control(replica)->TagVM(&context, request, &response));
    return response.vm().assignment().revision();
  }

  testing::EtcdMember etcd_;
  testing::TempDir dir_;
  std::unique_ptr<CsdProcess> replicas_[2];
};

TEST_F(FailoverTest, AnAgentMovesToAnotherReplicaAndResumesByRevision) {
  testing::MiniHostOptions options;
  options.host_id = "hv-1";
  options.server_address = replicas_[0]->address() + "," + replicas_[1]->address();
  testing::MiniHost host(options, "", dir_.Sub("agent"));
  ASSERT_OK(host.Start());
  host.AddVm("vm-1", 100);
  host.AddVm("vm-2", 200);
  const agent::ServerSession* session = host.agent().session();
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(Eventually([&] { return session->watching(); }, seconds(10)));
  EXPECT_EQ(session->current_address(), replicas_[0]->address());

  // A change made on replica 1 reaches the agent through replica 0.
  const int64_t first = Tag(1, "vm-1", "acme");
  ASSERT_TRUE(Eventually([&] { return host.agent().cache().revision() >= first; }, seconds(10)));
  ASSERT_TRUE(Eventually([&] { return host.VmCookie(100) != 0; }, seconds(10)));
  const int snapshots = host.agent().cache().snapshots_applied();
  const int deltas = host.agent().cache().deltas_applied();

  // Replica 0 crashes; the agent resumes on replica 1 from the revision it
  // holds. Its first message there is a delta: empty when nothing changed
  // meanwhile, which tells it that it is current.
  replicas_[0]->Kill();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually(
      [&] {
        return session->watching() && session->current_address() == replicas_[1]->address();
      },
      seconds(15)))
      << "the agent did not resume on replica 1; it is on " << session->current_address();
  const auto resumed = std::chrono::steady_clock::now();
  EXPECT_EQ(host.agent().cache().snapshots_applied(), snapshots);
  EXPECT_LE(host.agent().cache().deltas_applied(), deltas + 1);
  const int deltas_resumed = host.agent().cache().deltas_applied();

  // Changes go on through replica 1: vm-2 joins acme's tenant group, then
  // vm-1 does.
  const int64_t second = Tag(1, "vm-2", "acme", v1::ISOLATION_LEVEL_TENANT);
  ASSERT_TRUE(Eventually([&] { return host.agent().cache().revision() >= second; }, seconds(15)))
      << "the agent did not receive revision " << second << " from replica 1; it is at "
      << host.agent().cache().revision() << " on " << session->current_address();
  ASSERT_TRUE(Eventually([&] { return host.VmCookie(200) != 0; }, seconds(10)));
  EXPECT_NE(host.VmCookie(200), host.VmCookie(100));
  const int64_t third = Tag(1, "vm-1", "acme", v1::ISOLATION_LEVEL_TENANT);
  ASSERT_TRUE(Eventually([&] { return host.agent().cache().revision() >= third; }, seconds(10)));
  ASSERT_TRUE(Eventually([&] { return host.VmCookie(100) == host.VmCookie(200); }, seconds(10)))
      << "vm-1 on " << host.VmCookie(100) << ", vm-2 on " << host.VmCookie(200);

  EXPECT_EQ(session->current_address(), replicas_[1]->address());
  EXPECT_GE(session->failovers(), 1);
  // Resumed by revision: no snapshot, and the two changes as two deltas,
  // none lost and none applied twice.
  EXPECT_EQ(host.agent().cache().snapshots_applied(), snapshots);
  EXPECT_EQ(host.agent().cache().deltas_applied(), deltas_resumed + 2);
  EXPECT_EQ(host.agent().cache().Find("vm-1")->isolation(), v1::ISOLATION_LEVEL_TENANT);
  EXPECT_EQ(host.agent().cache().Find("vm-2")->tenant_id(), "acme");
  std::cout << "failover: the agent watched replica 1 "
            << std::chrono::duration_cast<milliseconds>(resumed - killed).count()
            << " ms after its replica was killed\n";
  host.Stop();
}

// The leader crashes without resigning: the other replica leads once the
// dead one's lease (lease_ttl_s: 2) expired.
TEST_F(FailoverTest, ACrashedLeaderIsReplacedOnceItsLeaseExpires) {
  auto client = etcd::Client::Create(etcd_.ClientOptions());
  ASSERT_OK(client);
  auto leader = [&]() -> std::string {
    auto range = (*client)->Range("/cosched/leader", "");
    store::EtcdReplica replica;
    if (!range.ok() || range->kvs.size() != 1 || !replica.ParseFromString(range->kvs[0].value())) {
      return "";
    }
    return replica.name();
  };
  // Replica 0 started first, and leads.
  const std::string first = leader();
  ASSERT_FALSE(first.empty());
  replicas_[0]->Kill();
  const auto killed = std::chrono::steady_clock::now();
  // The bound is generous: etcd expires leases on its own schedule, late
  // on a loaded machine; the figure printed below is the measurement.
  ASSERT_TRUE(Eventually([&] { return !leader().empty() && leader() != first; }, seconds(15)))
      << "no other replica led within 15 s of the leader's SIGKILL (lease ttl 2 s)";
  const auto took = std::chrono::steady_clock::now() - killed;
  // Not before the lease could expire: the dead one's key held it off.
  EXPECT_GE(took, milliseconds(1000));
  std::cout << "leadership moved " << std::chrono::duration_cast<milliseconds>(took).count()
            << " ms after the leader was killed (lease ttl 2 s)\n";
  // Writes go on through it.
  EXPECT_GT(Tag(1, "vm-after", "acme"), 0);
}

TEST_F(FailoverTest, CsctlUsesTheFirstReplicaOfItsListThatAnswers) {
  Tag(1, "vm-1", "acme");
  replicas_[0]->Kill();
  cli::CsctlEnvironment env = cli::ProcessEnvironment();
  env.can_connect = [](const std::string&) { return false; };
  const std::string list = replicas_[0]->address() + "," + replicas_[1]->address();
  std::ostringstream out, err;
  const char* argv[] = {"csctl", "--server", list.c_str(), "get", "vm-1", "-o", "json"};
  EXPECT_EQ(cli::RunCsctl(7, argv, env, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("\"acme\""), std::string::npos) << out.str();

  // A list of replicas none of which answers fails as an unreachable csd
  // does, naming the list.
  replicas_[1]->Kill();
  std::ostringstream out2, err2;
  EXPECT_NE(cli::RunCsctl(7, argv, env, out2, err2), 0);
  EXPECT_NE(err2.str().find("cannot reach csd at " + list), std::string::npos) << err2.str();
}

TEST_F(FailoverTest, BadServerListsAreRefusedNamingTheRule) {
  cli::CsctlEnvironment env = cli::ProcessEnvironment();
  for (const std::string list : {"127.0.0.1:1,,127.0.0.1:2", "127.0.0.1:1,127.0.0.1:1", ""}) {
    std::ostringstream out, err;
    const char* argv[] = {"csctl", "--server", list.c_str(), "get", "vm-1"};
    EXPECT_NE(cli::RunCsctl(5, argv, env, out, err), 0) << list;
    if (!list.empty()) {
      EXPECT_NE(err.str().find("server"), std::string::npos) << err.str();
    }
  }
  testing::MiniHostOptions options;
  options.server_address = replicas_[0]->address() + "," + replicas_[0]->address();
  testing::MiniHost host(options, "", dir_.Sub("agent"));
  absl::Status started = host.Start();
  EXPECT_TRUE(absl::IsInvalidArgument(started)) << started;
  EXPECT_NE(started.message().find("twice"), std::string::npos) << started;
}

}  // namespace
}  // namespace cosched
