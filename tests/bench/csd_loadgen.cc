// Load generator for csd: keeps N calls in flight for a while and prints
// throughput and latency percentiles, first for the health check (a no-op
// RPC: the ceiling of the transport) and then for TagVM (a durable write),
// against the same csd in the same run.
//
//   csd_loadgen [--server HOST:PORT] [--clients 64] [--seconds 5]
//
// Without --server it starts csd in-process on a temporary data dir.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "glog/logging.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/csd_server.h"
#include "tests/bench/loadgen_support.h"
#include "tests/testing/trusted_plaintext.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Figures {
  double per_second = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  uint64_t errors = 0;
  uint64_t calls = 0;
};

// Issues calls from `clients` logical clients, each starting its next call
// when the previous one completes, until `seconds` have passed.
class ClosedLoop {
 public:
  using StartFn = std::function<void(uint64_t seq, std::function<void(bool ok)>)>;

  ClosedLoop(int clients, double seconds, StartFn start)
      : clients_(clients), seconds_(seconds), start_(std::move(start)) {}

  Figures Run() {
    begin_ = Clock::now();
    deadline_ = begin_ + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(seconds_));
    active_ = clients_;
    for (int i = 0; i < clients_; ++i) Next();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return active_ == 0; });
    double elapsed = std::chrono::duration<double>(end_ - begin_).count();
    Figures f;
    f.calls = latencies_us_.size();
    f.errors = errors_;
    f.per_second = f.calls / elapsed;
    cosched::bench::LatencySummary latency =
        cosched::bench::Summarize(std::move(latencies_us_));
    f.p50_ms = latency.p50_ms;
    f.p99_ms = latency.p99_ms;
    return f;
  }

 private:
  void Next() {
    auto now = Clock::now();
    if (now >= deadline_) {
      std::lock_guard<std::mutex> lock(mu_);
      end_ = std::max(end_, now);
      if (--active_ == 0) done_cv_.notify_all();
      return;
    }
    uint64_t seq = seq_.fetch_add(1);
    start_(seq, [this, now](bool ok) {
      auto took = std::chrono::duration_cast<std::chrono::microseconds>(
                      Clock::now() - now).count();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (ok) {
          latencies_us_.push_back(took);
        } else {
          ++errors_;
        }
      }
      Next();
    });
  }

  const int clients_;
  const double seconds_;
  StartFn start_;
  Clock::time_point begin_, deadline_, end_;
  std::atomic<uint64_t> seq_{0};
  std::mutex mu_;
  std::condition_variable done_cv_;
  int active_ = 0;
  std::vector<int64_t> latencies_us_;
  uint64_t errors_ = 0;
};

// One call's state; the request must live until the call completes.
template <typename Request, typename Response>
struct Call {
  grpc::ClientContext context;
  Request request;
  Response response;
};

void Print(const char* name, const Figures& f) {
  std::printf("%-14s %10.0f calls/s   p50 %7.3f ms   p99 %7.3f ms   (%llu calls, %llu errors)\n",
              name, f.per_second, f.p50_ms, f.p99_ms,
              static_cast<unsigned long long>(f.calls),
              static_cast<unsigned long long>(f.errors));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"csd load generator"};
  std::string server;
  int clients = 64;
  int channels = 4;
  double seconds = 5;
  app.add_option("--server", server, "csd address; default: an in-process csd");
  app.add_option("--clients", clients, "calls in flight")->check(CLI::Range(1, 100000));
  app.add_option("--channels", channels, "HTTP/2 connections")->check(CLI::Range(1, 64));
  app.add_option("--seconds", seconds, "duration of each phase")->check(CLI::Range(0.1, 3600.0));
  CLI11_PARSE(app, argc, argv);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;
  google::InitGoogleLogging(argv[0]);

  std::unique_ptr<cosched::server::CsdServer> csd;
  std::string data_dir;
  if (server.empty()) {
    char pattern[] = "/tmp/csd-loadgen-XXXXXX";
    data_dir = mkdtemp(pattern);
    cosched::server::CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = data_dir;
    cosched::testing::TrustPlaintextCallers(options.authz);
    auto started = cosched::server::CsdServer::Start(options);
    if (!started.ok()) {
      std::fprintf(stderr, "csd_loadgen: %s\n", started.status().ToString().c_str());
      return 1;
    }
    csd = std::move(*started);
    server = csd->address();
  }

  std::vector<std::shared_ptr<grpc::Channel>> pool;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("cosched.loadgen.channel", i);  // distinct connections
    pool.push_back(grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args));
  }
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>> health;
  std::vector<std::unique_ptr<cosched::v1::ControlPlane::Stub>> control;
  for (auto& ch : pool) {
    health.push_back(grpc::health::v1::Health::NewStub(ch));
    control.push_back(cosched::v1::ControlPlane::NewStub(ch));
  }

  std::printf("csd at %s (%s), %d calls in flight over %d connections, %.1f s per phase\n",
              server.c_str(), csd ? "in-process, SQLite WAL, synchronous=FULL" : "external",
              clients, channels, seconds);

  Figures noop = ClosedLoop(clients, seconds, [&](uint64_t seq, auto done) {
    auto* call = new Call<grpc::health::v1::HealthCheckRequest,
                          grpc::health::v1::HealthCheckResponse>();
    health[seq % health.size()]->async()->Check(
        &call->context, &call->request, &call->response, [call, done](grpc::Status s) {
          done(s.ok());
          delete call;
        });
  }).Run();
  Print("Health.Check", noop);

  Figures tag = ClosedLoop(clients, seconds, [&](uint64_t seq, auto done) {
    auto* call = new Call<cosched::v1::TagVMRequest, cosched::v1::TagVMResponse>();
    call->request.set_vm_id("vm-" + std::to_string(seq));
    call->request.set_tenant_id("tenant-" + std::to_string(seq % 100));
    control[seq % control.size()]->async()->TagVM(
        &call->context, &call->request, &call->response, [call, done](grpc::Status s) {
          done(s.ok());
          delete call;
        });
  }).Run();
  Print("TagVM", tag);
  std::printf("TagVM rate is %.1f%% of the no-op rate\n",
              noop.per_second > 0 ? 100.0 * tag.per_second / noop.per_second : 0.0);

  csd.reset();
  if (!data_dir.empty()) std::filesystem::remove_all(data_dir);
  return tag.errors == 0 && noop.errors == 0 ? 0 : 1;
}
