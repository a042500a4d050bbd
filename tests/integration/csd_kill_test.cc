// csd is killed with SIGKILL while clients tag VMs in a loop, then restarted
// on the same data dir: every tag that a client saw acknowledged is still
// there, with the trust group it was acknowledged with. The clients are 16
// gRPC writers and the csctl binary run in a loop (`csctl tag VM -o json`,
// acknowledged when it exits 0).
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/csd_process.h"
#include "tests/testing/free_port.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/trusted_plaintext.h"

namespace cosched {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

using testing::CsdProcess;
using testing::FreeLoopbackPort;

// Runs `csctl --server ADDRESS tag VM --tenant TENANT -o json`. Returns the
// trust group it printed when it exited 0 (the tag was acknowledged), else
// nothing.
std::optional<std::string> CsctlTag(const std::string& address, const std::string& vm,
                                    const std::string& tenant) {
  const std::string command = std::string(CSCTL_BINARY) + " --server " + address + " tag " +
                              vm + " --tenant " + tenant + " -o json 2>/dev/null";
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return std::nullopt;
  std::string text;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, out)) > 0;) text.append(buf, n);
  const int status = pclose(out);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("trust_group") || !json["trust_group"].is_string()) {
    ADD_FAILURE() << "csctl exited 0 without a trust group: " << text;
    return std::nullopt;
  }
  return json["trust_group"].get<std::string>();
}

TEST(CsdKill, NoAcknowledgedTagIsLost) {
  cosched::testing::TempDir dir;
  const std::string address = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  const std::string data_dir = dir.Sub("data");
  const std::string config = dir.Sub("csd.yaml");
  std::ofstream(config) << cosched::testing::kTrustedPlaintextYaml;
  std::map<std::string, std::string> acknowledged;  // vm -> trust group
  int csctl_acknowledged = 0;
  std::mutex mu;

  for (int round = 0; round < 3; ++round) {
    CsdProcess csd(CSD_BINARY, address, data_dir, config);
    auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    ASSERT_TRUE(csd.WaitServing()) << "csd did not start on " << address;

    std::atomic<bool> stop{false};
    std::atomic<int> acks_this_round{0};
    std::vector<std::thread> writers;
    for (int w = 0; w < 16; ++w) {
      writers.emplace_back([&, w] {
        auto stub = v1::ControlPlane::NewStub(channel);
        for (int i = 0; !stop; ++i) {
          v1::TagVMRequest request;
          request.set_vm_id("vm-r" + std::to_string(round) + "-w" +
                            std::to_string(w) + "-" + std::to_string(i));
          request.set_tenant_id("t" + std::to_string(w % 3));
          request.set_isolation(i % 2 ? v1::ISOLATION_LEVEL_TENANT
                                      : v1::ISOLATION_LEVEL_VM);
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() + seconds(5));
          v1::TagVMResponse response;
          if (stub->TagVM(&context, request, &response).ok()) {
            std::lock_guard<std::mutex> lock(mu);
            acknowledged[request.vm_id()] = response.vm().assignment().trust_group();
            ++acks_this_round;
          }
        }
      });
    }
    std::atomic<int> csctl_acks{0};
    writers.emplace_back([&] {
      for (int i = 0; !stop; ++i) {
        const std::string vm = "vm-r" + std::to_string(round) + "-csctl-" + std::to_string(i);
        if (std::optional<std::string> group = CsctlTag(address, vm, "t-csctl")) {
          std::lock_guard<std::mutex> lock(mu);
          acknowledged[vm] = *group;
          ++csctl_acks;
          ++csctl_acknowledged;
        }
      }
    });
    // Kill mid-stream, once writes are flowing (csctl's too).
    while (acks_this_round < 200 || csctl_acks < 3) std::this_thread::sleep_for(milliseconds(5));
    std::this_thread::sleep_for(milliseconds(100 + 150 * round));
    csd.Kill();
    stop = true;
    for (auto& t : writers) t.join();
  }

  CsdProcess csd(CSD_BINARY, address, data_dir, config);
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  ASSERT_TRUE(csd.WaitServing());
  auto stub = v1::ControlPlane::NewStub(channel);
  std::map<std::string, std::string> stored;
  v1::ListVMsRequest request;
  request.set_page_size(1000);
  do {
    grpc::ClientContext context;
    v1::ListVMsResponse response;
    ASSERT_OK(stub->ListVMs(&context, request, &response));
    for (const auto& vm : response.vms()) {
      stored[vm.vm_id()] = vm.assignment().trust_group();
      // No half-written record: the assignment is whole.
      EXPECT_FALSE(vm.assignment().trust_group().empty()) << vm.vm_id();
      EXPECT_EQ(vm.assignment().vm_id(), vm.vm_id());
      EXPECT_GT(vm.assignment().revision(), 0);
    }
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());

  size_t lost = 0;
  for (const auto& [vm, group] : acknowledged) {
    auto it = stored.find(vm);
    if (it == stored.end()) {
      ++lost;
    } else {
      EXPECT_EQ(it->second, group) << vm;
    }
  }
  std::printf("acknowledged %zu tags over 3 kills (%d by csctl); %zu stored; %zu lost\n",
              acknowledged.size(), csctl_acknowledged, stored.size(), lost);
  EXPECT_GT(csctl_acknowledged, 0);
  EXPECT_EQ(lost, 0u);
  EXPECT_GE(stored.size(), acknowledged.size());
}

}  // namespace
}  // namespace cosched
