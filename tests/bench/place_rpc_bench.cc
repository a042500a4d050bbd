// Place through csd's gRPC API (server/daemon/csd_server.h) on the fleet of
// policy_bench's BM_Place: 10 000 hosts of 32-64 cores and 200 000 tagged
// VMs, written straight into a fresh store, then loaded by a csd started on
// it (the start-up time of the placement view is printed). A client on
// loopback calls Place one call at a time, and from 4 threads; the
// counters are decisions per second and the p99 latency seen by the client
// (plaintext, no TLS). Prints figures, asserts nothing.
//
//   build/tests/bench/place_rpc_bench
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/daemon/csd_server.h"
#include "store/sqlite_store.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/trusted_plaintext.h"

namespace cosched {
namespace {

constexpr int kHosts = 10000;
constexpr int kVms = 200000;

// The same shape as policy_bench's fleet: 20 VMs per host of 1-4 vCPUs, a
// tenth with a class, a quarter at level tenant, every 8th dedicated.
void WriteFleet(const std::string& data_dir) {
  store::SqliteStoreOptions options;
  options.data_dir = data_dir;
  auto store = store::SqliteStore::Open(options);
  if (!store.ok()) std::abort();
  absl::Status written = (*store)->WriteSync([](store::Transaction& txn) -> absl::Status {
    std::mt19937_64 rng(1);
    std::vector<std::vector<v1::VMObservation>> reported(kHosts);
    for (int h = 0; h < kHosts; ++h) {
      v1::Host host;
      host.set_host_id("host-" + std::to_string(h));
      const int cores = 32 + 16 * (h % 3);
      for (int c = 0; c < cores; ++c) {
        v1::Core* core = host.mutable_topology()->add_cores();
        core->set_core_id(c);
        core->add_cpus(c);
        core->add_cpus(c + cores);
      }
      if (absl::Status s = txn.PutHost(host); !s.ok()) return s;
    }
    for (int v = 0; v < kVms; ++v) {
      const int h = v % kHosts;
      v1::VM vm;
      vm.set_vm_id("vm-" + std::to_string(v));
      vm.set_tenant_id("t" + std::to_string(rng() % 500));
      vm.set_host_id("host-" + std::to_string(h));
      if (rng() % 10 == 0) {
        vm.add_interference_classes(rng() % 2 ? "avx512" : "latency-critical");
      }
      v1::Assignment* a = vm.mutable_assignment();
      a->set_vm_id(vm.vm_id());
      a->set_tenant_id(vm.tenant_id());
      a->set_isolation(v % 8 == 0        ? v1::ISOLATION_LEVEL_DEDICATED
                       : rng() % 4 == 0 ? v1::ISOLATION_LEVEL_TENANT
                                        : v1::ISOLATION_LEVEL_VM);
      a->set_trust_group(vm.tenant_id() + "/vm/" + vm.vm_id());
      if (absl::Status s = txn.PutVm(vm); !s.ok()) return s;
      v1::VMObservation o;
      o.set_vm_id(vm.vm_id());
      o.mutable_enforcement()->set_vcpus(1 << (rng() % 3));
      reported[h].push_back(std::move(o));
    }
    for (int h = 0; h < kHosts; ++h) {
      absl::Status s =
          store::ReplaceObservations(txn, "host-" + std::to_string(h), reported[h]).status();
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  });
  if (!written.ok()) {
    std::fprintf(stderr, "writing the fleet failed: %s\n", written.ToString().c_str());
    std::abort();
  }
}

struct Csd {
  cosched::testing::TempDir dir;
  std::unique_ptr<server::CsdServer> server;
  std::shared_ptr<grpc::Channel> channel;
};

Csd& Fleet() {
  static Csd* csd = [] {
    auto* c = new Csd();
    WriteFleet(c->dir.Sub("data"));
    server::CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = c->dir.Sub("data");
    cosched::testing::TrustPlaintextCallers(options.authz);
    options.metrics_listen = "";
    options.class_conflicts = {{"avx512", "latency-critical"}};
    const auto start = std::chrono::steady_clock::now();
    auto server = server::CsdServer::Start(options);
    if (!server.ok()) std::abort();
    std::fprintf(stderr, "csd started on %d hosts / %d VMs in %.2f s\n", kHosts, kVms,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                     .count());
    c->server = std::move(*server);
    c->channel = grpc::CreateChannel(c->server->address(),
                                     grpc::InsecureChannelCredentials());
    return c;
  }();
  return *csd;
}

void BM_PlaceRpc(benchmark::State& state) {
  Csd& csd = Fleet();
  // One stub per thread; all share the channel's connection.
  auto stub = v1::ControlPlane::NewStub(csd.channel);
  std::mt19937_64 rng(2 + state.thread_index());
  std::vector<double> latencies_us;
  int64_t refused = 0;
  for (auto _ : state) {
    v1::PlaceRequest r;
    r.set_tenant_id("t" + std::to_string(rng() % 500));
    r.set_vcpus(1 << (rng() % 4));
    r.set_pin(rng() % 2 == 0);
    r.set_isolation(rng() % 8 == 0   ? v1::ISOLATION_LEVEL_DEDICATED
                    : rng() % 4 == 0 ? v1::ISOLATION_LEVEL_TENANT
                                     : v1::ISOLATION_LEVEL_VM);
    if (rng() % 10 == 0) r.add_interference_classes("latency-critical");
    grpc::ClientContext context;
    v1::PlaceResponse response;
    const auto start = std::chrono::steady_clock::now();
    grpc::Status s = stub->Place(&context, r, &response);
    latencies_us.push_back(std::chrono::duration<double, std::micro>(
                               std::chrono::steady_clock::now() - start)
                               .count());
    if (!s.ok()) ++refused;
  }
  std::sort(latencies_us.begin(), latencies_us.end());
  state.counters["decisions_per_s"] = benchmark::Counter(
      static_cast<double>(latencies_us.size()), benchmark::Counter::kIsRate);
  // Averaged over threads: each thread's own p99.
  state.counters["p99_us"] = benchmark::Counter(
      latencies_us[latencies_us.size() * 99 / 100], benchmark::Counter::kAvgThreads);
  state.counters["refused"] = static_cast<double>(refused);
}
BENCHMARK(BM_PlaceRpc)->Unit(benchmark::kMicrosecond)->MinTime(2)->UseRealTime();
BENCHMARK(BM_PlaceRpc)->Unit(benchmark::kMicrosecond)->MinTime(2)->UseRealTime()->Threads(4);

}  // namespace
}  // namespace cosched

BENCHMARK_MAIN();
