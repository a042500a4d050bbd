// csd as a process of its own, for tests that kill it with SIGKILL (a crash,
// not a clean stop): the binary the build made, plaintext on a loopback
// port, metrics on a port of the OS's choosing, no Unix socket.
#ifndef COSCHED_TESTS_TESTING_CSD_PROCESS_H_
#define COSCHED_TESTS_TESTING_CSD_PROCESS_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cosched::testing {

class CsdProcess {
 public:
  // Runs `binary --config CONFIG --listen ADDRESS --data-dir DATA_DIR`.
  CsdProcess(const std::string& binary, const std::string& address,
             const std::string& data_dir, const std::string& config)
      : address_(address) {
    pid_ = fork();
    if (pid_ == 0) {
      execl(binary.c_str(), "csd", "--config", config.c_str(), "--listen", address.c_str(),
            "--data-dir", data_dir.c_str(), "--metrics-listen", "127.0.0.1:0", "--socket", "off",
            static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~CsdProcess() { Kill(); }
  CsdProcess(const CsdProcess&) = delete;
  CsdProcess& operator=(const CsdProcess&) = delete;

  // SIGKILL, and waits for the process to be gone. Idempotent.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  bool running() const { return pid_ > 0; }
  const std::string& address() const { return address_; }

  // Whether csd answers gRPC health checks within about ten seconds.
  bool WaitServing() const {
    auto health = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    for (int i = 0; i < 200; ++i) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
      grpc::health::v1::HealthCheckRequest request;
      grpc::health::v1::HealthCheckResponse response;
      if (health->Check(&context, request, &response).ok() &&
          response.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  std::string address_;
  pid_t pid_ = -1;
};

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_CSD_PROCESS_H_
