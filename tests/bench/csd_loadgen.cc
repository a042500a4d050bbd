// Load generator for csd: keeps N calls in flight for a while and prints
// throughput and latency percentiles, first for the health check (a no-op
// RPC: the ceiling of the transport) and then for TagVM (a durable write),
// against the same csd in the same run.
//
//   csd_loadgen [--server HOST:PORT] [--clients 64] [--seconds 5] [--etcd [--replicas N]]
//
// Without --server it starts csd in-process on a temporary data dir. With
// --etcd it also starts an etcd member (fsync on, as a durable store) and,
// with the same clients, runs TagVM on a second in-process csd whose store
// is that etcd, then etcd's own raw write Txn (one key each, compared on
// its absence) from the same number of callers: the ratio of the last two
// is what csd's write path adds on etcd. With --replicas N (N > 1) it then
// starts N csd replicas on one prefix of that etcd and runs TagVM through
// all of them at once (the clients' connections spread over them, each
// tag a VM of its own): their aggregate rate against one replica's, and
// the calls that failed (ABORTED: a write lost too many races).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "glog/logging.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/daemon/csd_server.h"
#include "tests/bench/loadgen_support.h"
#include "tests/testing/etcd_member.h"
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

// The no-op and TagVM phases against the csd at `server`.
struct CsdFigures {
  Figures noop, tag;
};

// `channels` connections to each of `servers`; the no-op phase unless
// `noop` is false.
CsdFigures RunCsd(const std::vector<std::string>& servers, int clients, int channels,
                  double seconds, const std::string& vm_prefix, bool noop = true) {
  std::vector<std::shared_ptr<grpc::Channel>> pool;
  for (int i = 0; i < channels; ++i) {
    for (const std::string& server : servers) {
      grpc::ChannelArguments args;
      args.SetInt("cosched.loadgen.channel", i);  // distinct connections
      pool.push_back(grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args));
    }
  }
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>> health;
  std::vector<std::unique_ptr<cosched::v1::ControlPlane::Stub>> control;
  for (auto& ch : pool) {
    health.push_back(grpc::health::v1::Health::NewStub(ch));
    control.push_back(cosched::v1::ControlPlane::NewStub(ch));
  }
  CsdFigures out;
  if (noop) out.noop = ClosedLoop(clients, seconds, [&](uint64_t seq, auto done) {
    auto* call = new Call<grpc::health::v1::HealthCheckRequest,
                          grpc::health::v1::HealthCheckResponse>();
    health[seq % health.size()]->async()->Check(
        &call->context, &call->request, &call->response, [call, done](grpc::Status s) {
          done(s.ok());
          delete call;
        });
  }).Run();
  out.tag = ClosedLoop(clients, seconds, [&](uint64_t seq, auto done) {
    auto* call = new Call<cosched::v1::TagVMRequest, cosched::v1::TagVMResponse>();
    call->request.set_vm_id(vm_prefix + std::to_string(seq));
    call->request.set_tenant_id("tenant-" + std::to_string(seq % 100));
    control[seq % control.size()]->async()->TagVM(
        &call->context, &call->request, &call->response, [call, done](grpc::Status s) {
          done(s.ok());
          delete call;
        });
  }).Run();
  return out;
}

std::unique_ptr<cosched::server::CsdServer> StartCsd(
    const std::string& data_dir, std::optional<cosched::store::EtcdStoreOptions> etcd) {
  cosched::server::CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = data_dir;
  options.metrics_listen = "";
  options.etcd_store = std::move(etcd);
  cosched::testing::TrustPlaintextCallers(options.authz);
  auto started = cosched::server::CsdServer::Start(options);
  if (!started.ok()) {
    std::fprintf(stderr, "csd_loadgen: %s\n", started.status().ToString().c_str());
    return nullptr;
  }
  return std::move(*started);
}

// etcd's raw write Txn, `callers` threads each with its next call when the
// last one returned (etcd::Client's calls block), for `seconds`.
Figures RunRawTxn(cosched::etcd::Client& client, int callers, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  std::mutex mu;
  std::vector<int64_t> latencies_us;
  uint64_t errors = 0;
  std::atomic<uint64_t> seq{0};
  const auto begin = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < callers; ++t) {
    threads.emplace_back([&] {
      while (Clock::now() < deadline) {
        const std::string key = "/raw/" + std::to_string(seq.fetch_add(1));
        etcdserverpb::TxnRequest request;
        etcdserverpb::Compare* absent = request.add_compare();
        absent->set_key(key);
        absent->set_target(etcdserverpb::Compare::CREATE);
        absent->set_create_revision(0);
        etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
        put->set_key(key);
        put->set_value(std::string(200, 'v'));  // about a VM record's size
        const auto start = Clock::now();
        const bool ok = client.Txn(request).ok();
        const auto took =
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
        std::lock_guard<std::mutex> lock(mu);
        if (ok) {
          latencies_us.push_back(took);
        } else {
          ++errors;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
  Figures f;
  f.calls = latencies_us.size();
  f.errors = errors;
  f.per_second = f.calls / elapsed;
  cosched::bench::LatencySummary latency = cosched::bench::Summarize(std::move(latencies_us));
  f.p50_ms = latency.p50_ms;
  f.p99_ms = latency.p99_ms;
  return f;
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
  bool etcd = false;
  app.add_flag("--etcd", etcd,
               "also TagVM on a csd whose store is a local etcd member, and etcd's raw Txn");
  int replicas = 1;
  app.add_option("--replicas", replicas,
                 "with --etcd: then TagVM through this many csd replicas on that etcd at once")
      ->check(CLI::Range(1, 8));
  CLI11_PARSE(app, argc, argv);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;
  google::InitGoogleLogging(argv[0]);

  std::unique_ptr<cosched::server::CsdServer> csd;
  std::string data_dir;
  if (server.empty()) {
    char pattern[] = "/tmp/csd-loadgen-XXXXXX";
    data_dir = mkdtemp(pattern);
    csd = StartCsd(data_dir + "/sqlite", std::nullopt);
    if (csd == nullptr) return 1;
    server = csd->address();
  }
  std::printf("csd at %s (%s), %d calls in flight over %d connections, %.1f s per phase\n",
              server.c_str(), csd ? "in-process, SQLite WAL, synchronous=FULL" : "external",
              clients, channels, seconds);
  CsdFigures sqlite = RunCsd({server}, clients, channels, seconds, "vm-");
  Print("Health.Check", sqlite.noop);
  Print("TagVM", sqlite.tag);
  std::printf("TagVM rate is %.1f%% of the no-op rate\n",
              sqlite.noop.per_second > 0 ? 100.0 * sqlite.tag.per_second / sqlite.noop.per_second
                                         : 0.0);
  csd.reset();
  bool ok = sqlite.tag.errors == 0 && sqlite.noop.errors == 0;

  if (etcd) {
    cosched::testing::EtcdMemberOptions member_options;
    member_options.fsync = true;
    cosched::testing::EtcdMember member(member_options);
    if (absl::Status started = member.Start(); !started.ok()) {
      std::fprintf(stderr, "csd_loadgen: etcd: %s\n", started.ToString().c_str());
      return 1;
    }
    cosched::store::EtcdStoreOptions store;
    store.client = member.ClientOptions();
    store.prefix = "/cosched";
    csd = StartCsd(data_dir + "/unused", store);
    if (csd == nullptr) return 1;
    std::printf("\ncsd at %s on etcd %s (one member, fsync on), same clients\n",
                csd->address().c_str(), member.endpoint().c_str());
    CsdFigures on_etcd = RunCsd({csd->address()}, clients, channels, seconds, "vm-etcd-", false);
    Print("TagVM (etcd)", on_etcd.tag);
    csd.reset();
    auto client = cosched::etcd::Client::Create(member.ClientOptions());
    if (!client.ok()) {
      std::fprintf(stderr, "csd_loadgen: %s\n", client.status().ToString().c_str());
      return 1;
    }
    Figures raw = RunRawTxn(**client, clients, seconds);
    Print("etcd raw Txn", raw);
    std::printf("TagVM on etcd: %.1f%% of SQLite's rate, %.1f%% of etcd's raw Txn rate\n",
                sqlite.tag.per_second > 0 ? 100.0 * on_etcd.tag.per_second / sqlite.tag.per_second
                                          : 0.0,
                raw.per_second > 0 ? 100.0 * on_etcd.tag.per_second / raw.per_second : 0.0);
    ok = ok && on_etcd.tag.errors == 0 && raw.errors == 0;
    if (replicas > 1) {
      // A prefix of their own: a fleet that starts empty, as the one above.
      store.prefix = "/cosched-replicas";
      std::vector<std::unique_ptr<cosched::server::CsdServer>> fleet;
      std::vector<std::string> addresses;
      for (int r = 0; r < replicas; ++r) {
        fleet.push_back(StartCsd(data_dir + "/unused-" + std::to_string(r), store));
        if (fleet.back() == nullptr) return 1;
        addresses.push_back(fleet.back()->address());
      }
      std::printf("\n%d csd replicas on etcd %s, one prefix, the same %d clients over them\n",
                  replicas, member.endpoint().c_str(), clients);
      Figures all = RunCsd(addresses, clients, channels, seconds, "vm-replicas-", false).tag;
      Print("TagVM (all)", all);
      std::printf("%d replicas together: %.1f%% of one replica's TagVM rate; %llu calls "
                  "failed (lost too many races)\n",
                  replicas,
                  on_etcd.tag.per_second > 0 ? 100.0 * all.per_second / on_etcd.tag.per_second
                                             : 0.0,
                  static_cast<unsigned long long>(all.errors));
    }
  }
  if (!data_dir.empty()) std::filesystem::remove_all(data_dir);
  return ok ? 0 : 1;
}
