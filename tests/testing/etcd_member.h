// A real etcd (/usr/bin/etcd, Debian's etcd-server) for tests: one member on
// 127.0.0.1 with ports of its own and a data dir under /tmp, started by the
// test and killed at its end, or a cluster of them (EtcdCluster). --unsafe-no-fsync unless `fsync`: the tests
// that use it are about csd's use of etcd, not about etcd's durability
// (benchmarks that compare durable writes keep etcd's fsync).
#ifndef COSCHED_TESTS_TESTING_ETCD_MEMBER_H_
#define COSCHED_TESTS_TESTING_ETCD_MEMBER_H_

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "etcdserverpb/rpc.grpc.pb.h"
#include "etcd/client.h"
#include "grpcpp/create_channel.h"
#include "tests/testing/free_port.h"
#include "tests/testing/temp_dir.h"

namespace cosched::testing {

inline constexpr char kEtcdBinary[] = "/usr/bin/etcd";
inline constexpr char kSetpriv[] = "/usr/bin/setpriv";

struct EtcdMemberOptions {
  // etcd's --max-txn-ops (its default is 128).
  int max_txn_ops = 128;
  // etcd's own fsync of each write (off: --unsafe-no-fsync).
  bool fsync = false;
  // How long Start waits for the member to answer.
  std::chrono::milliseconds start_timeout{15000};
  // With server_cert set: clients must speak TLS and present a
  // certificate signed by ca (etcd's --client-cert-auth); the member's own
  // probe uses client_cert.
  std::string ca, server_cert, server_key, client_cert, client_key;
  // The member's name, and etcd's --initial-cluster (empty: this member
  // alone). EtcdCluster sets both.
  std::string name = "m0";
  std::string initial_cluster;
};

// Not thread-safe; one per test.
class EtcdMember {
 public:
  explicit EtcdMember(EtcdMemberOptions options = {}) : options_(options) {}
  ~EtcdMember() { Kill(); }
  EtcdMember(const EtcdMember&) = delete;
  EtcdMember& operator=(const EtcdMember&) = delete;

  // Starts the member and waits until it serves a read. FAILED_PRECONDITION
  // when /usr/bin/etcd is missing (scripts/install-deps.sh installs it).
  absl::Status Start() {
    if (access(kEtcdBinary, X_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          kEtcdBinary, " is missing: install etcd-server (scripts/install-deps.sh)"));
    }
    absl::Status last;
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (client_port_ == 0 || attempt > 0) PickPorts();
      last = Launch();
      if (last.ok()) return last;
      Kill();
    }
    return last;
  }

  // The parts of Start for a cluster, whose members wait for each other:
  // the ports, known before any member starts; the process; and the wait
  // until it serves a read.
  void PickPorts() {
    client_port_ = FreeLoopbackPort();
    peer_port_ = FreeLoopbackPort();
  }
  absl::Status Spawn();
  absl::Status WaitServing();
  void set_initial_cluster(std::string cluster) { options_.initial_cluster = std::move(cluster); }
  std::string peer_url() const { return absl::StrCat("http://127.0.0.1:", peer_port_); }
  const std::string& name() const { return options_.name; }

  // SIGKILL, as a crash; the data dir stays for Restart.
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // Starts it again on the same ports and data.
  absl::Status Restart() {
    Kill();
    return Launch();
  }

  bool running() const { return pid_ > 0; }
  bool tls() const { return !options_.server_cert.empty(); }
  std::string endpoint() const { return absl::StrCat("127.0.0.1:", client_port_); }
  std::string log_path() const { return dir_.Sub("etcd.log"); }
  // etcd's backend database (bbolt): its size is what etcd's quota counts.
  std::string db_path() const { return dir_.Sub("data") + "/member/snap/db"; }

  etcd::ClientOptions ClientOptions() const {
    etcd::ClientOptions options;
    options.endpoints = {endpoint()};
    options.max_txn_ops = options_.max_txn_ops;
    if (tls()) {
      options.tls.set_ca_file(options_.ca);
      options.tls.set_cert_file(options_.client_cert);
      options.tls.set_key_file(options_.client_key);
    }
    return options;
  }

 private:
  absl::Status Launch() {
    RETURN_IF_ERROR(Spawn());
    return WaitServing();
  }

  EtcdMemberOptions options_;
  TempDir dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
  std::unique_ptr<etcd::Client> probe_;
};

inline absl::Status EtcdMember::Spawn() {
  const std::string client_url = absl::StrCat(tls() ? "https://" : "http://", endpoint());
  const std::string peer_url = this->peer_url();
  const std::string cluster = options_.initial_cluster.empty()
                                  ? absl::StrCat(options_.name, "=", peer_url)
                                  : options_.initial_cluster;
  std::vector<std::string> args = {
      kEtcdBinary,
      "--name", options_.name,
      "--data-dir", dir_.Sub("data"),
      "--listen-client-urls", client_url,
      "--advertise-client-urls", client_url,
      "--listen-peer-urls", peer_url,
      "--initial-advertise-peer-urls", peer_url,
      "--initial-cluster", cluster,
      "--initial-cluster-token", absl::StrCat("cosched-test-", getpid()),
      "--max-txn-ops", std::to_string(options_.max_txn_ops),
      "--logger", "zap",
      "--log-level", "warn",
  };
  if (!options_.fsync) args.push_back("--unsafe-no-fsync");
  if (tls()) {
    for (const std::string& arg :
         {std::string("--cert-file"), options_.server_cert, std::string("--key-file"),
          options_.server_key, std::string("--trusted-ca-file"), options_.ca,
          std::string("--client-cert-auth")}) {
      args.push_back(arg);
    }
  }
  const std::string log = log_path();
  // posix_spawn, not fork: gRPC's fork handlers, run by fork in a process
  // that already uses gRPC, left the test's own connections waiting for
  // connects that had completed.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // Through setpriv (util-linux, always on Debian) with a parent-death
  // signal: a test that crashes, or is killed by ctest's timeout, takes
  // its etcd with it instead of leaving it running. (The signal follows
  // the thread that started the member: tests start it from SetUp, on
  // the main thread.)
  const char* program = kEtcdBinary;
  if (access(kSetpriv, X_OK) == 0) {
    program = kSetpriv;
    args.insert(args.begin(), {kSetpriv, "--pdeathsig", "KILL"});
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, program, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", kEtcdBinary, ": errno ", spawned));
  }
  pid_ = pid;
  return absl::OkStatus();
}

inline absl::Status EtcdMember::WaitServing() {
  const std::string log = log_path();
  // Up when a read is answered; a member that exited (a port taken) is
  // not waited for.
  etcd::ClientOptions probe_options = ClientOptions();
  probe_options.timeout = absl::Milliseconds(500);
  auto probe = etcd::Client::Create(probe_options);
  if (!probe.ok()) return probe.status();
  // Kept: gRPC stays initialized from here to the end of the test
  // (etcd/client.cc says why that matters).
  probe_ = std::move(*probe);
  const auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  absl::Status last = absl::UnavailableError("not probed");
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::UnavailableError(
          absl::StrCat("etcd exited while starting on ", endpoint(), "; see ", log));
    }
    last = probe_->Range("/health-probe", "").status();
    if (last.ok()) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::UnavailableError(absl::StrCat("etcd on ", endpoint(), " did not answer within ",
                                             options_.start_timeout.count(), " ms: ",
                                             last.message(), "; see ", log));
}

// A cluster of `size` members on 127.0.0.1, for tests that stop members:
// the leader among them, or a minority.
class EtcdCluster {
 public:
  explicit EtcdCluster(int size, EtcdMemberOptions options = {}) {
    for (int i = 0; i < size; ++i) {
      EtcdMemberOptions member = options;
      member.name = absl::StrCat("m", i);
      members_.push_back(std::make_unique<EtcdMember>(member));
    }
  }

  // Starts every member (they elect a leader once a majority is up) and
  // waits until each serves a read.
  absl::Status Start() {
    std::vector<std::string> peers;
    for (auto& m : members_) {
      m->PickPorts();
      peers.push_back(absl::StrCat(m->name(), "=", m->peer_url()));
    }
    const std::string cluster = absl::StrJoin(peers, ",");
    for (auto& m : members_) {
      m->set_initial_cluster(cluster);
      RETURN_IF_ERROR(m->Spawn());
    }
    for (auto& m : members_) RETURN_IF_ERROR(m->WaitServing());
    return absl::OkStatus();
  }

  int size() const { return static_cast<int>(members_.size()); }
  EtcdMember& member(int i) { return *members_[i]; }

  // Every member's endpoint, starting with member `first`'s (a client
  // talks to its first until it fails).
  std::vector<std::string> Endpoints(int first = 0) const {
    std::vector<std::string> endpoints;
    for (int i = 0; i < size(); ++i) endpoints.push_back(members_[(first + i) % size()]->endpoint());
    return endpoints;
  }
  etcd::ClientOptions ClientOptions(int first = 0) const {
    etcd::ClientOptions options = members_[0]->ClientOptions();
    options.endpoints = Endpoints(first);
    return options;
  }

  // The index of the member that the running members agree leads;
  // UNAVAILABLE while they do not (an election).
  absl::StatusOr<int> Leader() const {
    std::vector<uint64_t> ids(members_.size(), 0);
    uint64_t leader = 0;
    for (size_t i = 0; i < members_.size(); ++i) {
      if (!members_[i]->running()) continue;
      auto channel =
          grpc::CreateChannel(members_[i]->endpoint(), grpc::InsecureChannelCredentials());
      auto stub = etcdserverpb::Maintenance::NewStub(channel);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      etcdserverpb::StatusResponse status;
      grpc::Status s = stub->Status(&context, etcdserverpb::StatusRequest(), &status);
      if (!s.ok()) continue;
      ids[i] = status.header().member_id();
      if (leader == 0) leader = status.leader();
      if (status.leader() != leader) return absl::UnavailableError("the members disagree");
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (leader != 0 && ids[i] == leader) return static_cast<int>(i);
    }
    return absl::UnavailableError("no running member leads");
  }

 private:
  std::vector<std::unique_ptr<EtcdMember>> members_;
};

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_ETCD_MEMBER_H_
