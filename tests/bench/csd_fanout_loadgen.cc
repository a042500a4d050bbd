// Fan-out load on one csd. Simulated agents, each its own host, Register,
// Report a few VMs and watch their host's assignments; then a control-plane
// client tags VMs of random hosts at a steady open-loop rate. Prints csd's
// memory per connected agent and its CPU, and the fan-out latency: TagVM
// sent -> the agent of the VM's host has the delta.
//
//   csd_fanout_loadgen [--agents 10000] [--tag-rate 500] [--seconds 30]
//                      [--connections 0] [--server HOST:PORT [--csd-pid PID]]
//
// Without --server it runs the csd binary as a separate process on a
// temporary data dir, so that /proc shows csd's own memory and CPU.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/bench/loadgen_support.h"

namespace cosched::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             Clock::now().time_since_epoch())
      .count();
}

std::chrono::system_clock::time_point DeadlineIn(seconds s) {
  return std::chrono::system_clock::now() + s;
}

// Every tag the control plane sends: when it was sent, acknowledged, and
// when its delta reached the agent. Each tag gives its VM a new interference
// class "<run>-<seq>", so every tag is a change (a delta), and an agent
// tells from the assignment which tag a delta brings. A VM has at most one
// tag in flight: a second one would merge with the first into one delta.
class TagLedger {
 public:
  TagLedger(std::string run, size_t capacity, size_t vms)
      : class_prefix_(absl::StrCat(run, "-")),
        capacity_(capacity),
        tags_(new Tag[capacity]),
        busy_(new std::atomic<bool>[vms]),
        vms_(vms) {
    for (size_t i = 0; i < vms; ++i) busy_[i] = false;
  }

  // A VM with no tag in flight, claimed, starting at a random one; -1 when
  // every VM is busy.
  int64_t ClaimVm(std::mt19937_64& random) {
    size_t start = random() % vms_;
    for (size_t i = 0; i < vms_; ++i) {
      size_t vm = (start + i) % vms_;
      bool expected = false;
      if (busy_[vm].compare_exchange_strong(expected, true)) {
        return static_cast<int64_t>(vm);
      }
    }
    return -1;
  }

  // Records a tag of a claimed VM as sent now; -1 when the ledger is full.
  int64_t Send(size_t vm) {
    if (sent_ >= capacity_) {
      busy_[vm] = false;
      return -1;
    }
    int64_t seq = static_cast<int64_t>(sent_.load());
    Tag& tag = tags_[seq];
    tag.vm = vm;
    tag.sent_ns = NowNs();
    ++sent_;  // publishes the tag to Arrived()
    return seq;
  }

  std::string ClassOf(int64_t seq) const { return absl::StrCat(class_prefix_, seq); }

  void Acknowledged(int64_t seq, bool ok) {
    Tag& tag = tags_[seq];
    if (!ok) {
      tag.failed = true;
      busy_[tag.vm] = false;
    }
    tag.acked_ns = NowNs();
  }

  // An agent received an assignment carrying `interference_class`.
  void Arrived(absl::string_view interference_class, int64_t now_ns) {
    int64_t seq = 0;
    if (!absl::ConsumePrefix(&interference_class, class_prefix_) ||
        !absl::SimpleAtoi(interference_class, &seq) || seq < 0 ||
        static_cast<size_t>(seq) >= sent_) {
      return;
    }
    Tag& tag = tags_[seq];
    int64_t none = 0;
    // The first arrival counts; a later message may repeat the assignment.
    if (tag.arrived_ns.compare_exchange_strong(none, now_ns)) {
      busy_[tag.vm] = false;
    }
  }

  struct Totals {
    size_t sent = 0;
    size_t acknowledged = 0;  // ok
    size_t failed = 0;        // TagVM returned an error
    size_t unanswered = 0;    // TagVM did not return
    size_t arrived = 0;       // acknowledged, and the delta arrived
    size_t lost = 0;          // acknowledged, and no delta arrived
    std::vector<int64_t> fanout_us;
    std::vector<int64_t> ack_us;
  };

  Totals Count() const {
    Totals t;
    t.sent = sent_;
    for (size_t i = 0; i < t.sent; ++i) {
      const Tag& tag = tags_[i];
      int64_t acked = tag.acked_ns, arrived = tag.arrived_ns;
      if (acked == 0) {
        ++t.unanswered;
        continue;
      }
      if (tag.failed) {
        ++t.failed;
        continue;
      }
      ++t.acknowledged;
      t.ack_us.push_back((acked - tag.sent_ns) / 1000);
      if (arrived == 0) {
        ++t.lost;
        continue;
      }
      ++t.arrived;
      t.fanout_us.push_back((arrived - tag.sent_ns) / 1000);
    }
    return t;
  }

  // True when every answered tag that succeeded has its delta.
  bool Settled() const {
    Totals t = Count();
    return t.unanswered == 0 && t.lost == 0;
  }

 private:
  struct Tag {
    size_t vm = 0;
    int64_t sent_ns = 0;
    std::atomic<int64_t> acked_ns{0};
    std::atomic<int64_t> arrived_ns{0};
    std::atomic<bool> failed{false};
  };

  const std::string class_prefix_;
  const size_t capacity_;
  std::unique_ptr<Tag[]> tags_;
  std::unique_ptr<std::atomic<bool>[]> busy_;
  const size_t vms_;
  std::atomic<size_t> sent_{0};
};

std::string HostId(const std::string& run, int host) {
  return absl::StrCat("load-", run, "-h", host);
}
std::string VmId(const std::string& run, size_t vm, int vms_per_host) {
  return absl::StrCat("load-", run, "-h", vm / vms_per_host, "-vm",
                      vm % vms_per_host);
}

class Fleet;

// One agent: Register, Report its VMs, then WatchAssignments until stopped.
// Its calls are callbacks: no thread of its own.
class SimulatedAgent
    : public grpc::ClientReadReactor<v1::WatchAssignmentsResponse> {
 public:
  SimulatedAgent(Fleet* fleet, int host, v1::AgentService::Stub* stub);
  void Start();
  void Stop() { watch_context_.TryCancel(); }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void Report();
  void Watch();

  Fleet* const fleet_;
  const int host_;
  v1::AgentService::Stub* const stub_;
  grpc::ClientContext register_context_, report_context_, watch_context_;
  v1::RegisterRequest register_request_;
  v1::RegisterResponse register_response_;
  v1::ReportRequest report_request_;
  v1::ReportResponse report_response_;
  v1::WatchAssignmentsRequest watch_request_;
  v1::WatchAssignmentsResponse message_;
  bool watching_ = false;
};

// The simulated agents. `connections` HTTP/2 connections carry them (agent
// i on connection i % connections); a real agent has one of its own. At
// most `concurrency` agents are between Start and their first watch
// message at a time, as when a fleet reconnects over a while.
class Fleet {
 public:
  struct Options {
    std::string server;
    std::string run;
    int agents = 0;
    int vms_per_host = 2;
    int connections = 0;
    int concurrency = 256;
  };

  Fleet(const Options& options, TagLedger* ledger)
      : options_(options), ledger_(ledger) {
    for (int i = 0; i < options.connections; ++i) {
      grpc::ChannelArguments args;
      // Each channel its own connection: no subchannel sharing.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      // As cs-agent's (agent/server_session.cc).
      args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
      args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
      args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
      stubs_.push_back(v1::AgentService::NewStub(grpc::CreateCustomChannel(
          options.server, grpc::InsecureChannelCredentials(), args)));
    }
    for (int i = 0; i < options.agents; ++i) {
      agents_.push_back(std::make_unique<SimulatedAgent>(
          this, i, stubs_[i % options.connections].get()));
    }
  }

  ~Fleet() { Stop(); }

  void Start() {
    for (int i = 0; i < options_.concurrency; ++i) StartNext();
  }

  // False when not every agent watches by `deadline`.
  bool WaitAllWatching(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline, [this] {
      return watching_ + setup_failures_ == options_.agents;
    }) && setup_failures_ == 0;
  }

  // Starts no more agents, cancels every watch and waits until gRPC is done
  // with every agent started.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    for (auto& agent : agents_) agent->Stop();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_ == started_; });
  }

  int watching() const {
    std::lock_guard<std::mutex> lock(mu_);
    return watching_;
  }
  int setup_failures() const {
    std::lock_guard<std::mutex> lock(mu_);
    return setup_failures_;
  }
  int broken_streams() const {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_streams_;
  }
  std::string first_error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }
  const Options& options() const { return options_; }
  TagLedger* ledger() const { return ledger_; }

  // From the agents. `finished`: the agent has no call left.
  void SetupDone(const grpc::Status& status, absl::string_view step,
                 bool finished) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (status.ok()) {
        ++watching_;
      } else {
        ++setup_failures_;
        NoteErrorLocked(status, step);
      }
      if (finished) ++done_;
    }
    cv_.notify_all();
    StartNext();
  }
  void WatchEnded(const grpc::Status& status, bool was_watching) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (was_watching && !stopping_) {
        ++broken_streams_;
        NoteErrorLocked(status, "WatchAssignments");
      }
      ++done_;
    }
    cv_.notify_all();
  }

 private:
  // Not under mu_: a callback may run inline and take it.
  void StartNext() {
    int i = next_.fetch_add(1);
    if (i >= options_.agents) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      ++started_;
    }
    agents_[i]->Start();
  }

  void NoteErrorLocked(const grpc::Status& status, absl::string_view step) {
    if (first_error_.empty()) {
      first_error_ = absl::StrCat(step, ": code ", status.error_code(), ": ",
                                  status.error_message());
    }
  }

  const Options options_;
  TagLedger* const ledger_;
  std::vector<std::unique_ptr<v1::AgentService::Stub>> stubs_;
  std::vector<std::unique_ptr<SimulatedAgent>> agents_;
  std::atomic<int> next_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int started_ = 0;
  int done_ = 0;
  int watching_ = 0;
  int setup_failures_ = 0;
  int broken_streams_ = 0;
  std::string first_error_;
};

SimulatedAgent::SimulatedAgent(Fleet* fleet, int host,
                               v1::AgentService::Stub* stub)
    : fleet_(fleet), host_(host), stub_(stub) {}

void SimulatedAgent::Start() {
  const Fleet::Options& options = fleet_->options();
  const std::string host_id = HostId(options.run, host_);
  register_request_.set_host_id(host_id);
  v1::Core* core = register_request_.mutable_topology()->add_cores();
  core->add_cpus(0);
  core->add_cpus(1);
  register_request_.set_agent_version("loadgen");
  report_request_.set_host_id(host_id);
  for (int j = 0; j < options.vms_per_host; ++j) {
    report_request_.add_vms()->set_vm_id(VmId(
        options.run, static_cast<size_t>(host_) * options.vms_per_host + j,
        options.vms_per_host));
  }
  register_context_.set_deadline(DeadlineIn(seconds(60)));
  stub_->async()->Register(&register_context_, &register_request_,
                           &register_response_, [this](grpc::Status status) {
                             if (!status.ok()) {
                               fleet_->SetupDone(status, "Register", true);
                             } else {
                               Report();
                             }
                           });
}

void SimulatedAgent::Report() {
  report_context_.set_deadline(DeadlineIn(seconds(60)));
  stub_->async()->Report(&report_context_, &report_request_, &report_response_,
                         [this](grpc::Status status) {
                           if (!status.ok()) {
                             fleet_->SetupDone(status, "Report", true);
                           } else {
                             Watch();
                           }
                         });
}

void SimulatedAgent::Watch() {
  watch_request_.set_host_id(register_request_.host_id());
  stub_->async()->WatchAssignments(&watch_context_, &watch_request_, this);
  StartRead(&message_);
  StartCall();
}

void SimulatedAgent::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows with the status
  int64_t now = NowNs();
  for (const v1::Assignment& a : message_.assignments()) {
    for (const std::string& c : a.interference_classes()) {
      fleet_->ledger()->Arrived(c, now);
    }
  }
  if (!watching_) {
    watching_ = true;
    fleet_->SetupDone(grpc::Status::OK, "WatchAssignments", false);
  }
  StartRead(&message_);
}

void SimulatedAgent::OnDone(const grpc::Status& status) {
  if (!watching_) {
    fleet_->SetupDone(
        status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL,
                                   "the stream ended before its first message")
                    : status,
        "WatchAssignments", false);
  }
  fleet_->WatchEnded(status, watching_);
}

struct TagCall {
  grpc::ClientContext context;
  v1::TagVMRequest request;
  v1::TagVMResponse response;
};

// Sends TagVM at `rate` per second for `duration`, open loop: on schedule
// whether or not earlier calls have returned. Returns the seconds it took.
double RunTagger(v1::ControlPlane::Stub* stub, TagLedger* ledger,
                 const std::string& run, int vms_per_host, double rate,
                 double duration, int64_t* no_vm_free) {
  std::mt19937_64 random(42);
  const auto begin = Clock::now();
  const int64_t total = static_cast<int64_t>(rate * duration);
  for (int64_t i = 0; i < total; ++i) {
    std::this_thread::sleep_until(
        begin + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(i / rate)));
    int64_t vm = ledger->ClaimVm(random);
    if (vm < 0) {
      ++*no_vm_free;
      continue;
    }
    auto* call = new TagCall();
    call->request.set_vm_id(VmId(run, vm, vms_per_host));
    call->context.set_deadline(DeadlineIn(seconds(30)));
    int64_t seq = ledger->Send(vm);
    if (seq < 0) {
      delete call;
      break;
    }
    call->request.add_interference_classes(ledger->ClassOf(seq));
    stub->async()->TagVM(&call->context, &call->request, &call->response,
                         [call, ledger, seq](grpc::Status status) {
                           ledger->Acknowledged(seq, status.ok());
                           delete call;
                         });
  }
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

void PrintLatency(const char* name, const LatencySummary& s) {
  std::printf("%-22s p50 %8.2f ms   p99 %8.2f ms   max %8.2f ms   (%zu)\n", name,
              s.p50_ms, s.p99_ms, s.max_ms, s.count);
}

// csd's usage, or nothing when its pid is unknown.
std::optional<ProcessUsage> Usage(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  auto usage = ReadProcessUsage(pid);
  if (!usage.ok()) {
    std::fprintf(stderr, "csd_fanout_loadgen: %s\n",
                 std::string(usage.status().message()).c_str());
    return std::nullopt;
  }
  return *usage;
}

// csd's CPU, in % of one core, over a span of `wall` seconds.
double CpuPercent(const std::optional<ProcessUsage>& before,
                  const std::optional<ProcessUsage>& after, double wall) {
  if (!before || !after || wall <= 0) return 0;
  return 100.0 * (after->cpu_seconds - before->cpu_seconds) / wall;
}

int Run(int argc, char** argv) {
  CLI::App app{"csd fan-out load generator"};
  Fleet::Options fleet_options;
  fleet_options.agents = 10000;
  std::string server, csd_binary = CSD_BINARY;
  int csd_pid = 0;
  double rate = 500, duration = 30, idle_seconds = 5, timeout = 10;
  app.add_option("--agents", fleet_options.agents, "simulated agents (hosts)")
      ->check(CLI::Range(1, 60000));
  app.add_option("--vms-per-host", fleet_options.vms_per_host, "VMs each agent reports")
      ->check(CLI::Range(1, 100));
  app.add_option("--connections", fleet_options.connections,
                 "HTTP/2 connections carrying the agents; 0: one per agent, as real agents")
      ->check(CLI::Range(0, 60000));
  app.add_option("--setup-concurrency", fleet_options.concurrency,
                 "agents connecting at a time")
      ->check(CLI::Range(1, 60000));
  app.add_option("--tag-rate", rate, "TagVM calls per second")->check(CLI::Range(0.1, 100000.0));
  app.add_option("--seconds", duration, "length of the tagging phase")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--idle-seconds", idle_seconds,
                 "CPU of csd with every agent connected and nothing tagged, measured over this")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--timeout", timeout, "after tagging, how long a delta may take before it counts as lost")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--server", server, "csd to load; default: run --csd on a temporary data dir");
  app.add_option("--csd-pid", csd_pid, "pid of the --server csd, to read its memory and CPU");
  app.add_option("--csd", csd_binary, "csd binary to run");
  CLI11_PARSE(app, argc, argv);
  if (fleet_options.connections == 0 ||
      fleet_options.connections > fleet_options.agents) {
    fleet_options.connections = fleet_options.agents;
  }
  // One socket per connection in each process (csd inherits the limit).
  absl::Status raised = RaiseOpenFileLimit(fleet_options.connections + 1024);
  if (!raised.ok()) {
    std::fprintf(stderr, "csd_fanout_loadgen: %s\n", std::string(raised.message()).c_str());
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<CsdProcess> csd;
  if (server.empty()) {
    auto started = CsdProcess::Start(csd_binary);
    if (!started.ok()) {
      std::fprintf(stderr, "csd_fanout_loadgen: %s\n",
                   std::string(started.status().message()).c_str());
      return 1;
    }
    csd = std::move(*started);
    server = csd->address();
    csd_pid = csd->pid();
  }
  // Fresh hosts and VMs per run, so runs against one --server do not mix.
  fleet_options.run = absl::StrCat(std::random_device()() % 1000000);
  fleet_options.server = server;
  std::printf(
      "csd at %s (%s, pid %d); %d agents over %d connections, %d VMs each; "
      "TagVM at %.0f/s for %.0f s\n",
      server.c_str(), csd ? "spawned, SQLite synchronous=FULL" : "external",
      csd_pid, fleet_options.agents, fleet_options.connections,
      fleet_options.vms_per_host, rate, duration);

  auto control = v1::ControlPlane::NewStub(
      grpc::CreateChannel(server, grpc::InsecureChannelCredentials()));
  const size_t vms =
      static_cast<size_t>(fleet_options.agents) * fleet_options.vms_per_host;
  TagLedger ledger(fleet_options.run,
                   static_cast<size_t>(rate * duration) + 1, vms);

  std::this_thread::sleep_for(seconds(1));
  auto before = Usage(csd_pid);
  auto self_before = Usage(getpid());
  Fleet fleet(fleet_options, &ledger);
  auto setup_begin = Clock::now();
  fleet.Start();
  bool all_watching = fleet.WaitAllWatching(
      setup_begin + seconds(60 + fleet_options.agents / 20));
  double setup_s = std::chrono::duration<double>(Clock::now() - setup_begin).count();
  std::printf("setup: %d of %d agents registered, reported and watching in %.1f s (%.0f/s)\n",
              fleet.watching(), fleet_options.agents, setup_s,
              fleet.watching() / setup_s);
  if (!all_watching) {
    std::printf("setup failed: %d agents failed, first error: %s\n",
                fleet.setup_failures(), fleet.first_error().c_str());
    return 1;
  }
  // Let setup's transient buffers go before measuring what agents hold.
  std::this_thread::sleep_for(seconds(2));
  auto after = Usage(csd_pid);
  auto self_after = Usage(getpid());
  if (before && after) {
    std::printf(
        "csd RSS: %lld KiB before agents, %lld KiB with %d watching: %.1f KiB "
        "per agent (peak %lld KiB, %d threads)\n",
        static_cast<long long>(before->rss_kib),
        static_cast<long long>(after->rss_kib), fleet_options.agents,
        static_cast<double>(after->rss_kib - before->rss_kib) / fleet_options.agents,
        static_cast<long long>(after->peak_rss_kib), after->threads);
  }
  if (self_before && self_after) {
    std::printf("load generator RSS: %.1f KiB per agent (the client side)\n",
                static_cast<double>(self_after->rss_kib - self_before->rss_kib) /
                    fleet_options.agents);
  }
  if (idle_seconds > 0) {
    auto idle_begin = Usage(csd_pid);
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
    auto idle_end = Usage(csd_pid);
    if (idle_begin && idle_end) {
      std::printf("csd CPU idle with %d agents: %.1f%% of one core over %.0f s\n",
                  fleet_options.agents, CpuPercent(idle_begin, idle_end, idle_seconds),
                  idle_seconds);
    }
  }

  auto tag_begin = Usage(csd_pid);
  int64_t no_vm_free = 0;
  double tag_s = RunTagger(control.get(), &ledger, fleet_options.run,
                           fleet_options.vms_per_host, rate, duration, &no_vm_free);
  auto tag_end = Usage(csd_pid);
  auto drain_deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeout));
  while (!ledger.Settled() && Clock::now() < drain_deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  TagLedger::Totals totals = ledger.Count();
  std::printf("tagging: %zu TagVM sent in %.1f s (%.1f/s), %zu acknowledged, "
              "%zu failed, %zu unanswered; %lld skipped (every VM had a tag in flight)\n",
              totals.sent, tag_s, totals.sent / tag_s, totals.acknowledged,
              totals.failed, totals.unanswered, static_cast<long long>(no_vm_free));
  if (tag_begin && tag_end) {
    std::printf("csd CPU while tagging: %.1f%% of one core (RSS %lld KiB, %d threads)\n",
                CpuPercent(tag_begin, tag_end, tag_s),
                static_cast<long long>(tag_end->rss_kib), tag_end->threads);
  }
  PrintLatency("TagVM acknowledged", Summarize(totals.ack_us));
  PrintLatency("fan-out (tag->delta)", Summarize(totals.fanout_us));
  std::printf("deltas lost (none within %.0f s of the end): %zu; watch streams broken: %d\n",
              timeout, totals.lost, fleet.broken_streams());
  if (fleet.broken_streams() > 0) {
    std::printf("first error: %s\n", fleet.first_error().c_str());
  }
  fleet.Stop();
  bool clean = totals.lost == 0 && totals.failed == 0 && totals.unanswered == 0 &&
               fleet.broken_streams() == 0;
  return clean ? 0 : 1;
}

}  // namespace
}  // namespace cosched::bench

int main(int argc, char** argv) { return cosched::bench::Run(argc, argv); }
