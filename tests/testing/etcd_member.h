// A real etcd (/usr/bin/etcd, Debian's etcd-server) for tests: one member on
// 127.0.0.1 with ports of its own and a data dir under /tmp, started by the
// test and killed at its end. --unsafe-no-fsync unless `fsync`: the tests
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
#include "absl/strings/str_cat.h"
#include "etcd/client.h"
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
      if (client_port_ == 0 || attempt > 0) {
        client_port_ = FreeLoopbackPort();
        peer_port_ = FreeLoopbackPort();
      }
      last = Launch();
      if (last.ok()) return last;
      Kill();
    }
    return last;
  }

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
    const std::string client_url = absl::StrCat(tls() ? "https://" : "http://", endpoint());
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port_);
    std::vector<std::string> args = {
        kEtcdBinary,
        "--name", "m0",
        "--data-dir", dir_.Sub("data"),
        "--listen-client-urls", client_url,
        "--advertise-client-urls", client_url,
        "--listen-peer-urls", peer_url,
        "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", absl::StrCat("m0=", peer_url),
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

  const EtcdMemberOptions options_;
  TempDir dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
  std::unique_ptr<etcd::Client> probe_;
};

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_ETCD_MEMBER_H_
