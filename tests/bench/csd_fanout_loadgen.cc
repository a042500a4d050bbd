// Fan-out load on csd (one, or several replicas on etcd: --replicas).
// Simulated agents, each its own host, Register,
// Report their VMs and watch their host's assignments; then a control-plane
// client tags VMs of random hosts at a steady open-loop rate. Prints csd's
// memory per connected agent and its CPU, and the fan-out latency: TagVM
// sent -> the agent of the VM's host has the delta.
//
// With --report-interval S the agents go on reporting as cs-agent does
// (agent/server_session.cc): every S seconds, after every watch message,
// never closer than --min-report-gap, each Report carrying every VM and the
// stats windows closed since the last accepted one. The phases after setup
// are then csd's steady state, and it also prints Reports/s and, from
// csd's /metrics, store writes/s and revisions/s.
//
//   csd_fanout_loadgen [--agents 10000] [--vms-per-host 2] [--tag-rate 500]
//                      [--seconds 30] [--report-interval 0] [--cores-per-host 1]
//                      [--connections 0] [--replicas 1]
//                      [--server HOST:PORT[,HOST:PORT...] [--csd-pid PID]
//                      [--metrics HOST:PORT]]
//
// Without --server it runs the csd binary as a separate process on a
// temporary data dir, so that /proc shows csd's own memory and CPU. With
// --replicas N (2 or more) it runs N csd processes on one etcd member
// (fsync on) instead: agents are spread over the replicas round-robin,
// TagVM goes to the first, so most deltas reach their agent through
// another replica's watch of etcd; memory and CPU are the replicas' sums.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/bench/loadgen_support.h"
#include "tests/testing/etcd_member.h"

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
    // The fan-out of the tags sent in each 10 s of the phase: whether slow
    // ones come in bursts.
    std::vector<std::vector<int64_t>> fanout_us_by_slice;
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
      const size_t slice =
          static_cast<size_t>((tag.sent_ns - tags_[0].sent_ns) / 10'000'000'000);
      if (t.fanout_us_by_slice.size() <= slice) t.fanout_us_by_slice.resize(slice + 1);
      t.fanout_us_by_slice[slice].push_back(t.fanout_us.back());
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

// When reporting is on (--report-interval > 0): as cs-agent's ServerSession
// and collector (agent/server_session.cc, agent/sibling_share_collector.cc).
struct ReportingOptions {
  Clock::duration interval{};  // zero: one Report at setup, nothing after
  Clock::duration min_gap = seconds(1);
  int64_t window_ns = 0;  // collector window; cs-agent's is the report interval
  bool stats = true;
  int cores = 1;
  bool on() const { return interval > Clock::duration::zero(); }
};

// One agent: Register, Report its VMs, then WatchAssignments until stopped.
// With reporting on it Reports as cs-agent does: every interval, after
// every watch message, one at a time and at least min_gap apart, each
// Report carrying every VM and the stats windows closed since the last
// accepted one. Its calls are callbacks and its timers are entries in the
// fleet's one timer thread: no thread of its own, so 10 000 fit in one
// process.
class SimulatedAgent
    : public grpc::ClientReadReactor<v1::WatchAssignmentsResponse> {
 public:
  SimulatedAgent(Fleet* fleet, int host, v1::AgentService::Stub* stub);
  void Start();
  void Stop() { watch_context_.TryCancel(); }
  // From the fleet's timer thread: sends a Report when one is due.
  void OnTimer();

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  struct ReportCall {
    grpc::ClientContext context;
    v1::ReportRequest request;
    v1::ReportResponse response;
    int windows = 0;
    bool after_watch = false;
    int64_t sent_ns = 0;
  };

  void SetupReport();
  void Watch();
  // What cs-agent does with a watch message, with its reconcile pass taken
  // as instant: the VMs' enforcement and the applied revision change, and
  // a Report is asked for.
  void ApplyMessageLocked(const v1::WatchAssignmentsResponse& message);
  // Closes the collector windows that ended by now.
  void CloseWindowsLocked(int64_t now_unix_ns);
  v1::StatsWindow MakeWindowLocked(int64_t start_unix_ns, int64_t end_unix_ns);
  void ReportDone(ReportCall* call, const grpc::Status& status);

  Fleet* const fleet_;
  const int host_;
  v1::AgentService::Stub* const stub_;
  grpc::ClientContext register_context_, report_context_, watch_context_;
  v1::RegisterRequest register_request_;
  v1::RegisterResponse register_response_;
  v1::ReportResponse report_response_;
  v1::WatchAssignmentsRequest watch_request_;
  v1::WatchAssignmentsResponse message_;
  bool watching_ = false;

  // Watch callbacks, Report callbacks and the timer thread meet here.
  std::mutex mu_;
  v1::ReportRequest report_;  // the VMs as enforced; no stats
  std::deque<v1::StatsWindow> windows_;  // closed, not yet accepted
  int64_t dropped_windows_ = 0;
  int64_t window_start_unix_ns_ = 0;
  int64_t window_end_unix_ns_ = 0;
  std::mt19937_64 random_;
  bool in_flight_ = false;
  bool requested_ = false;
  Clock::time_point next_periodic_ = Clock::time_point::max();
  Clock::time_point earliest_ = Clock::time_point::min();
};

// One thread that wakes agents at their times. Entries may be stale (an
// agent reported meanwhile): OnTimer checks again, so an entry is only ever
// a hint, and there is no cancelling.
class Timers {
 public:
  Timers() : thread_([this] { Loop(); }) {}
  ~Timers() { Stop(); }

  void At(Clock::time_point when, SimulatedAgent* agent) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      heap_.push({when, agent});
    }
    wake_.notify_one();
  }

  // Returns once no OnTimer runs and none will.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Entry {
    Clock::time_point when;
    SimulatedAgent* agent;
    bool operator>(const Entry& o) const { return when > o.when; }
  };

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      if (heap_.empty()) {
        wake_.wait(lock);
        continue;
      }
      Entry top = heap_.top();
      if (Clock::now() < top.when) {
        wake_.wait_until(lock, top.when);
        continue;
      }
      heap_.pop();
      // OnTimer takes the agent's lock, which is held while calling At.
      lock.unlock();
      top.agent->OnTimer();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  bool stopping_ = false;
  std::thread thread_;
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
    ReportingOptions reporting;
  };

  // What the agents did so far (after setup: setup's own calls are not in
  // these).
  struct Counters {
    int64_t reports_ok = 0;
    int64_t reports_failed = 0;
    int64_t reports_after_watch = 0;  // of reports_ok: asked for by a message
    int64_t windows = 0;              // in accepted Reports
    int64_t messages = 0;             // watch messages after the first
  };

  Fleet(const Options& options, TagLedger* ledger)
      : options_(options), ledger_(ledger) {
    // Several replicas: connection i goes to the (i mod n)th.
    const std::vector<std::string> servers = absl::StrSplit(options.server, ',');
    for (int i = 0; i < options.connections; ++i) {
      grpc::ChannelArguments args;
      // Each channel its own connection: no subchannel sharing.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      // As cs-agent's (agent/server_session.cc).
      args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
      args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
      args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
      stubs_.push_back(v1::AgentService::NewStub(grpc::CreateCustomChannel(
          servers[i % servers.size()], grpc::InsecureChannelCredentials(), args)));
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

  // Starts no more agents nor Reports, cancels every watch and waits until
  // gRPC is done with every agent started and every Report sent.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    timers_.Stop();
    for (auto& agent : agents_) agent->Stop();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_ == started_ && reports_in_flight_ == 0; });
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
  Counters counters() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counters_;
  }
  // Report latencies from now on, until TakeReportLatencies.
  void RecordReportLatencies() {
    std::lock_guard<std::mutex> lock(mu_);
    recording_ = true;
    report_us_.clear();
  }
  std::vector<int64_t> TakeReportLatencies() {
    std::lock_guard<std::mutex> lock(mu_);
    recording_ = false;
    return std::move(report_us_);
  }
  const Options& options() const { return options_; }
  TagLedger* ledger() const { return ledger_; }
  Timers& timers() { return timers_; }

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
  void MessageArrived() {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.messages;
  }
  // False when stopping: then the Report is not sent.
  bool ReportStarting() {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    ++reports_in_flight_;
    return true;
  }
  void ReportFinished(const grpc::Status& status, bool after_watch, int windows,
                      int64_t latency_us) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --reports_in_flight_;
      if (status.ok()) {
        ++counters_.reports_ok;
        if (after_watch) ++counters_.reports_after_watch;
        counters_.windows += windows;
        if (recording_) report_us_.push_back(latency_us);
      } else if (!stopping_) {
        ++counters_.reports_failed;
        NoteErrorLocked(status, "Report");
      }
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
  // Declared after agents_: destroyed (joined) before them.
  Timers timers_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int started_ = 0;
  int done_ = 0;
  int watching_ = 0;
  int setup_failures_ = 0;
  int broken_streams_ = 0;
  int reports_in_flight_ = 0;
  Counters counters_;
  bool recording_ = false;
  std::vector<int64_t> report_us_;
  std::string first_error_;
};

int64_t UnixNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A VM's UUID, fixed by run, host and index (the form libvirt shows).
std::string VmUuid(const std::string& run, int host, int vm) {
  uint64_t run_number = 0;
  (void)absl::SimpleAtoi(run, &run_number);
  char uuid[40];
  std::snprintf(uuid, sizeof(uuid), "%08x-%04x-4%03x-8%03x-%012llx",
                static_cast<unsigned>(run_number), static_cast<unsigned>(vm & 0xffff),
                static_cast<unsigned>((host >> 12) & 0xfff),
                static_cast<unsigned>(host & 0xfff),
                static_cast<unsigned long long>(host) * 1000 + vm);
  return uuid;
}

// The index of a VM of this run's naming within its host; -1 when not one.
int VmIndexOf(absl::string_view vm_id) {
  size_t at = vm_id.rfind("-vm");
  int index = -1;
  if (at == absl::string_view::npos || !absl::SimpleAtoi(vm_id.substr(at + 3), &index)) {
    return -1;
  }
  return index;
}

SimulatedAgent::SimulatedAgent(Fleet* fleet, int host,
                               v1::AgentService::Stub* stub)
    : fleet_(fleet), host_(host), stub_(stub), random_(static_cast<uint64_t>(host) + 1) {}

void SimulatedAgent::Start() {
  const Fleet::Options& options = fleet_->options();
  const std::string host_id = HostId(options.run, host_);
  register_request_.set_host_id(host_id);
  // Cores numbered by their lowest CPU, siblings n and n + cores, as Linux
  // numbers a two-thread-per-core x86 host.
  for (int c = 0; c < options.reporting.cores; ++c) {
    v1::Core* core = register_request_.mutable_topology()->add_cores();
    core->set_core_id(c);
    core->add_cpus(c);
    core->add_cpus(c + options.reporting.cores);
  }
  register_request_.mutable_capabilities()->set_smt_active(true);
  register_request_.mutable_capabilities()->set_core_sched(
      v1::CORE_SCHED_SUPPORT_SUPPORTED);
  register_request_.set_agent_version("loadgen");
  report_.set_host_id(host_id);
  for (int j = 0; j < options.vms_per_host; ++j) {
    v1::VMObservation* o = report_.add_vms();
    o->set_vm_id(VmId(options.run,
                      static_cast<size_t>(host_) * options.vms_per_host + j,
                      options.vms_per_host));
    o->set_uuid(VmUuid(options.run, host_, j));
    o->set_run_state(v1::VM_RUN_STATE_RUNNING);
    // Untagged: cs-agent keeps it on a cookie of its own (fail closed).
    v1::VMEnforcement* e = o->mutable_enforcement();
    const int vcpus = 2 << (j % 3);  // 2, 4, 8
    e->set_vcpus(vcpus);
    // vCPUs plus QEMU's main, I/O and worker threads.
    e->set_threads_found(vcpus + 6);
    e->set_threads_tagged(vcpus + 6);
    e->set_state(v1::ENFORCEMENT_STATE_FAIL_CLOSED);
  }
  // The collector starts with the agent; its first window is cut short so
  // that hosts' windows end at different times, as agents start at
  // different times.
  window_start_unix_ns_ = UnixNowNs();
  if (options.reporting.window_ns > 0) {
    window_end_unix_ns_ = window_start_unix_ns_ + 1 +
                          static_cast<int64_t>(random_() % options.reporting.window_ns);
  }
  register_context_.set_deadline(DeadlineIn(seconds(60)));
  stub_->async()->Register(&register_context_, &register_request_,
                           &register_response_, [this](grpc::Status status) {
                             if (!status.ok()) {
                               fleet_->SetupDone(status, "Register", true);
                             } else {
                               SetupReport();
                             }
                           });
}

// The first Report, as before the watch: no windows closed yet. Nothing
// else touches report_ until the watch starts.
void SimulatedAgent::SetupReport() {
  report_context_.set_deadline(DeadlineIn(seconds(60)));
  stub_->async()->Report(
      &report_context_, &report_, &report_response_, [this](grpc::Status status) {
        if (!status.ok()) {
          fleet_->SetupDone(status, "Report", true);
          return;
        }
        const ReportingOptions& reporting = fleet_->options().reporting;
        if (reporting.on()) {
          std::lock_guard<std::mutex> lock(mu_);
          auto now = Clock::now();
          earliest_ = now + reporting.min_gap;
          // Spread over the interval: agents that all connected within a
          // few seconds must not all report in the same second.
          next_periodic_ = now + std::chrono::duration_cast<Clock::duration>(
                                     reporting.interval *
                                     (static_cast<double>(random_() % 1000000) / 1e6));
          fleet_->timers().At(next_periodic_, this);
        }
        Watch();
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
  if (fleet_->options().reporting.on()) {
    std::lock_guard<std::mutex> lock(mu_);
    ApplyMessageLocked(message_);
  }
  if (!watching_) {
    watching_ = true;
    fleet_->SetupDone(grpc::Status::OK, "WatchAssignments", false);
  } else {
    fleet_->MessageArrived();
  }
  StartRead(&message_);
}

void SimulatedAgent::ApplyMessageLocked(const v1::WatchAssignmentsResponse& message) {
  auto enforce = [this](int index, const std::string& trust_group) {
    if (index < 0 || index >= report_.vms_size()) return;
    v1::VMEnforcement* e = report_.mutable_vms(index)->mutable_enforcement();
    e->set_applied_trust_group(trust_group);
    e->set_state(trust_group.empty() ? v1::ENFORCEMENT_STATE_FAIL_CLOSED
                                     : v1::ENFORCEMENT_STATE_ENFORCED);
  };
  if (message.kind() == v1::WatchAssignmentsResponse::KIND_SNAPSHOT) {
    for (int i = 0; i < report_.vms_size(); ++i) enforce(i, "");
  }
  for (const v1::Assignment& a : message.assignments()) {
    enforce(VmIndexOf(a.vm_id()), a.trust_group());
  }
  for (const std::string& vm_id : message.removed_vm_ids()) enforce(VmIndexOf(vm_id), "");
  report_.set_applied_revision(message.revision());
  requested_ = true;
  if (!in_flight_) fleet_->timers().At(std::max(Clock::now(), earliest_), this);
}

void SimulatedAgent::CloseWindowsLocked(int64_t now_unix_ns) {
  const ReportingOptions& reporting = fleet_->options().reporting;
  if (!reporting.stats || reporting.window_ns <= 0) return;
  while (window_end_unix_ns_ <= now_unix_ns) {
    windows_.push_back(MakeWindowLocked(window_start_unix_ns_, window_end_unix_ns_));
    window_start_unix_ns_ = window_end_unix_ns_;
    window_end_unix_ns_ += reporting.window_ns;
  }
  // As cs-agent's queue: at most 120, the oldest dropped and counted.
  while (windows_.size() > 120) {
    windows_.pop_front();
    ++dropped_windows_;
  }
}

// Figures of a busy, well isolated host: VMs run 10-60% of their vCPUs,
// siblings mostly idle or the same group, foreign sharing only in switch
// windows of microseconds, forced idle about 1% of run time; cores' four
// states sum to the window.
v1::StatsWindow SimulatedAgent::MakeWindowLocked(int64_t start_unix_ns,
                                                 int64_t end_unix_ns) {
  const double span = static_cast<double>(end_unix_ns - start_unix_ns);
  auto uniform = [this] { return static_cast<double>(random_() % 1000000) / 1e6; };
  v1::StatsWindow w;
  w.set_start_unix_ns(start_unix_ns);
  w.set_end_unix_ns(end_unix_ns);
  for (const v1::VMObservation& o : report_.vms()) {
    v1::VMStats* v = w.add_vms();
    v->set_vm_id(o.vm_id());
    v1::SiblingShare* s = v->mutable_share();
    const double run = span * o.enforcement().vcpus() * (0.1 + 0.5 * uniform());
    const auto same = static_cast<int64_t>(run * 0.1 * uniform());
    const auto foreign = static_cast<int64_t>(run * 0.0002 * uniform());
    const auto unknown = static_cast<int64_t>(run * 0.0001 * uniform());
    s->set_run_ns(static_cast<int64_t>(run));
    s->set_same_ns(same);
    s->set_foreign_ns(foreign);
    s->set_unknown_ns(unknown);
    s->set_idle_ns(static_cast<int64_t>(run) - same - foreign - unknown);
    s->set_foreign_intervals(1 + static_cast<int64_t>(random_() % 500));
    s->set_longest_foreign_ns(2000 + static_cast<int64_t>(random_() % 40000));
    s->set_forced_idle_known(true);
    s->set_forced_idle_ns(static_cast<int64_t>(run * 0.02 * uniform()));
  }
  const int cores = register_request_.topology().cores_size();
  for (int c = 0; c < cores; ++c) {
    v1::CoreShare* share = w.add_cores();
    share->set_core(c);
    const auto both_busy = static_cast<int64_t>(span * 0.4 * uniform());
    const auto one_idle = static_cast<int64_t>(span * 0.4 * uniform());
    const auto unknown = static_cast<int64_t>(span * 0.001 * uniform());
    share->set_both_busy_ns(both_busy);
    share->set_one_idle_ns(one_idle);
    share->set_unknown_ns(unknown);
    share->set_both_idle_ns(static_cast<int64_t>(span) - both_busy - one_idle - unknown);
  }
  // About 2000 switches a second per CPU.
  w.set_events(static_cast<int64_t>(span / 1e9 * 2 * cores * 2000));
  return w;
}

void SimulatedAgent::OnTimer() {
  const ReportingOptions& reporting = fleet_->options().reporting;
  auto* call = new ReportCall();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Clock::now();
    const bool due = now >= next_periodic_ || (requested_ && now >= earliest_);
    if (in_flight_ || !due) {
      delete call;
      return;
    }
    // Never closer than min_gap, periodic or not.
    if (now < earliest_) {
      fleet_->timers().At(earliest_, this);
      delete call;
      return;
    }
    if (!fleet_->ReportStarting()) {
      delete call;
      return;
    }
    // As ServerSession::ReportLoop: requests that came meanwhile fold into
    // this Report, and the interval starts again from it.
    call->after_watch = requested_ && now < next_periodic_;
    requested_ = false;
    next_periodic_ = now + reporting.interval;
    in_flight_ = true;
    CloseWindowsLocked(UnixNowNs());
    call->request = report_;
    for (const v1::StatsWindow& w : windows_) *call->request.add_stats() = w;
    call->request.set_dropped_windows(dropped_windows_);
    call->windows = static_cast<int>(windows_.size());
  }
  call->context.set_deadline(DeadlineIn(seconds(30)));
  call->sent_ns = NowNs();
  stub_->async()->Report(&call->context, &call->request, &call->response,
                         [this, call](grpc::Status status) { ReportDone(call, status); });
}

void SimulatedAgent::ReportDone(ReportCall* call, const grpc::Status& status) {
  const int64_t latency_us = (NowNs() - call->sent_ns) / 1000;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = false;
    earliest_ = Clock::now() + fleet_->options().reporting.min_gap;
    // Accepted windows leave the queue; refused ones go again next time,
    // as cs-agent's StatsWindowQueue.
    if (status.ok()) {
      windows_.erase(windows_.begin(),
                     windows_.begin() + std::min<size_t>(call->windows, windows_.size()));
      dropped_windows_ = 0;
    }
    fleet_->timers().At(next_periodic_, this);
    if (requested_) fleet_->timers().At(earliest_, this);
  }
  fleet_->ReportFinished(status, call->after_watch, call->windows, latency_us);
  delete call;
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

// The replicas' sum.
std::optional<ProcessUsage> Usage(const std::vector<pid_t>& pids) {
  std::optional<ProcessUsage> sum;
  for (pid_t pid : pids) {
    std::optional<ProcessUsage> one = Usage(pid);
    if (!one) return std::nullopt;
    if (!sum) sum = ProcessUsage();
    sum->rss_kib += one->rss_kib;
    sum->peak_rss_kib += one->peak_rss_kib;
    sum->threads += one->threads;
    sum->cpu_seconds += one->cpu_seconds;
  }
  return sum;
}

// csd's CPU, in % of one core, over a span of `wall` seconds.
double CpuPercent(const std::optional<ProcessUsage>& before,
                  const std::optional<ProcessUsage>& after, double wall) {
  if (!before || !after || wall <= 0) return 0;
  return 100.0 * (after->cpu_seconds - before->cpu_seconds) / wall;
}

// What a phase is measured between: csd's and the load generator's usage,
// what the agents did, and csd's store counters from its /metrics.
struct Mark {
  Clock::time_point at;
  std::optional<ProcessUsage> csd, self;
  Fleet::Counters agents;
  std::optional<double> writes, revision, write_seconds;
  // csd's CPU seconds by thread name (cosched_csd_thread_cpu_seconds_total),
  // summed over the replicas.
  std::map<std::string, double> thread_cpu;
};

// Several replicas: writes summed, the revision (etcd's, shared) the
// highest any of them has.
Mark TakeMark(const std::vector<pid_t>& csd_pids, const Fleet& fleet,
              const std::vector<std::string>& metrics) {
  Mark mark;
  for (const std::string& address : metrics) {
    auto text = HttpGet(address, "/metrics");
    if (!text.ok()) {
      std::fprintf(stderr, "csd_fanout_loadgen: %s\n",
                   std::string(text.status().message()).c_str());
      mark.writes.reset();
      break;
    }
    mark.writes = mark.writes.value_or(0) + SumOfMetric(*text, "cosched_store_writes_total");
    mark.revision =
        std::max(mark.revision.value_or(0), SumOfMetric(*text, "cosched_store_revision"));
    mark.write_seconds = mark.write_seconds.value_or(0) +
                         SumOfMetric(*text, "cosched_store_write_duration_seconds_sum");
    for (const auto& [thread, seconds] :
         MetricByLabel(*text, "cosched_csd_thread_cpu_seconds_total", "thread")) {
      mark.thread_cpu[thread] += seconds;
    }
  }
  // Read after the scrape: a phase then holds exactly one scrape's cost to
  // csd (its ending mark's), a few ms in a phase of tens of seconds.
  mark.at = Clock::now();
  mark.csd = Usage(csd_pids);
  mark.self = Usage(getpid());
  mark.agents = fleet.counters();
  return mark;
}

// csd's CPU by thread over a phase, most first, in % of one core: where it
// goes (docs/benchmarks.md names the threads). Threads under 0.1% are left
// out.
void PrintThreadCpu(const Mark& a, const Mark& b, double s) {
  std::vector<std::pair<double, std::string>> shares;
  for (const auto& [thread, seconds] : b.thread_cpu) {
    auto before = a.thread_cpu.find(thread);
    const double used = seconds - (before == a.thread_cpu.end() ? 0 : before->second);
    if (100 * used / s >= 0.1) shares.emplace_back(100 * used / s, thread);
  }
  if (shares.empty()) return;
  std::sort(shares.rbegin(), shares.rend());
  std::string line;
  for (const auto& [percent, thread] : shares) {
    char figure[32];
    std::snprintf(figure, sizeof(figure), "%.1f", percent);
    absl::StrAppend(&line, line.empty() ? "" : ", ", thread, " ", figure);
  }
  std::printf("  csd CPU by thread, %% of one core: %s\n", line.c_str());
}

// One line per figure of the phase between two marks.
void PrintPhase(const char* name, const Mark& a, const Mark& b) {
  const double s = std::chrono::duration<double>(b.at - a.at).count();
  if (s <= 0) return;
  auto rate = [s](double before, double after) { return (after - before) / s; };
  std::printf("%s, %.1f s:\n", name, s);
  if (a.csd && b.csd) {
    std::printf("  csd CPU %.1f%% of one core (load generator %.1f%%)\n",
                CpuPercent(a.csd, b.csd, s), CpuPercent(a.self, b.self, s));
  }
  PrintThreadCpu(a, b, s);
  std::printf(
      "  Reports accepted %.1f/s (%.1f/s after a watch message), failed %lld; "
      "stats windows %.1f/s; watch messages %.1f/s\n",
      rate(a.agents.reports_ok, b.agents.reports_ok),
      rate(a.agents.reports_after_watch, b.agents.reports_after_watch),
      static_cast<long long>(b.agents.reports_failed - a.agents.reports_failed),
      rate(a.agents.windows, b.agents.windows), rate(a.agents.messages, b.agents.messages));
  if (a.writes && b.writes && a.revision && b.revision) {
    const double writes = *b.writes - *a.writes;
    std::printf(
        "  store writes %.2f/s (mean %.1f ms from submission to durable), revisions "
        "%.2f/s (revision %.0f -> %.0f)\n",
        rate(*a.writes, *b.writes),
        writes > 0 ? 1000 * (*b.write_seconds - *a.write_seconds) / writes : 0.0,
        rate(*a.revision, *b.revision), *a.revision, *b.revision);
  }
}

// The csd processes the load runs against when no --server is given: one
// on SQLite, or `replicas` (2 or more) on one etcd member of their own.
struct LocalCsds {
  // etcd first: the replicas stop before it does.
  std::unique_ptr<cosched::testing::EtcdMember> etcd;
  std::vector<std::unique_ptr<CsdProcess>> csds;
  std::string servers;  // their addresses, comma-separated
  std::vector<pid_t> pids;
  std::vector<std::string> metrics;  // their /metrics addresses
  std::string store = "SQLite synchronous=FULL";
};

absl::StatusOr<LocalCsds> StartLocalCsds(const std::string& binary, int replicas,
                                         int enforcement_write_interval_s) {
  LocalCsds local;
  // csd's own default when unset (-1).
  std::string extra_config =
      enforcement_write_interval_s < 0
          ? ""
          : absl::StrCat("enforcement_write_interval_s: ", enforcement_write_interval_s, "\n");
  if (replicas > 1) {
    cosched::testing::EtcdMemberOptions etcd_options;
    etcd_options.fsync = true;
    // A host's first Report writes each VM's id and UUID keys.
    etcd_options.max_txn_ops = 10000;
    local.etcd = std::make_unique<cosched::testing::EtcdMember>(etcd_options);
    if (absl::Status started = local.etcd->Start(); !started.ok()) {
      return absl::Status(started.code(), absl::StrCat("etcd: ", started.message()));
    }
    absl::StrAppend(&extra_config, "store:\n  etcd:\n    endpoints: [\"", local.etcd->endpoint(),
                                "\"]\n    prefix: /cosched-load\n    max_txn_ops: 10000\n");
    local.store = absl::StrCat(replicas, " replicas on one etcd member (fsync on)");
  }
  std::vector<std::string> addresses;
  for (int i = 0; i < replicas; ++i) {
    // With its /metrics on: the store's writes and revision are read there.
    // On etcd each needs a name of its own (their default, the host
    // name, is one for all on one machine).
    const std::string config =
        replicas > 1 ? absl::StrCat(extra_config, "    replica_name: csd-", i, "\n") : extra_config;
    absl::StatusOr<std::unique_ptr<CsdProcess>> started =
        CsdProcess::Start(binary, /*serve_metrics=*/true, config);
    if (!started.ok()) return started.status();
    addresses.push_back((*started)->address());
    local.pids.push_back((*started)->pid());
    local.metrics.push_back((*started)->metrics_address());
    local.csds.push_back(std::move(*started));
  }
  local.servers = absl::StrJoin(addresses, ",");
  return local;
}

int Run(int argc, char** argv) {
  CLI::App app{"csd fan-out load generator"};
  Fleet::Options fleet_options;
  fleet_options.agents = 10000;
  std::string server, metrics_address, csd_binary = CSD_BINARY;
  int csd_pid = 0;
  int replica_count = 1;
  double rate = 500, duration = 30, idle_seconds = 5, timeout = 10;
  double report_interval = 0, min_report_gap = 1, window_seconds = 0, warmup_seconds = -1;
  bool no_stats = false;
  app.add_option("--agents", fleet_options.agents, "simulated agents (hosts)")
      ->check(CLI::Range(1, 60000));
  app.add_option("--vms-per-host", fleet_options.vms_per_host, "VMs each agent reports")
      ->check(CLI::Range(1, 100));
  app.add_option("--cores-per-host", fleet_options.reporting.cores,
                 "cores (of two CPUs) each agent registers, and reports shares of")
      ->check(CLI::Range(1, 1024));
  app.add_option("--report-interval", report_interval,
                 "seconds between an agent's Reports, as cs-agent's report_interval; "
                 "agents also Report after every watch message. 0: one Report at setup only")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--min-report-gap", min_report_gap,
                 "least seconds between two Reports of an agent (cs-agent's min_report_gap)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--window-seconds", window_seconds,
                 "stats window length; 0: the report interval, as cs-agent")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_flag("--no-stats", no_stats, "Reports carry no stats windows");
  app.add_option("--warmup-seconds", warmup_seconds,
                 "after setup, before measuring, with reporting on; default: one "
                 "interval and 3 s, so that every agent reports on its own schedule")
      ->check(CLI::Range(-1.0, 3600.0));
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
  app.add_option("--replicas", replica_count,
                 "csd replicas to run on one etcd member, the agents spread over them")
      ->check(CLI::Range(1, 5));
  app.add_option("--metrics", metrics_address,
                 "HOST:PORT of the --server csd's /metrics, for its store writes and revision");
  app.add_option("--csd", csd_binary, "csd binary to run");
  int enforcement_write_interval_s = -1;
  app.add_option("--enforcement-write-interval-s", enforcement_write_interval_s,
                 "csd.yaml enforcement_write_interval_s of the csd run (default: csd's); 0 "
                 "writes every Report that changes enforcement")
      ->check(CLI::Range(0, 3600));
  CLI11_PARSE(app, argc, argv);
  // Runs take minutes: show each phase as it ends, also into a file.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (fleet_options.connections == 0 ||
      fleet_options.connections > fleet_options.agents) {
    fleet_options.connections = fleet_options.agents;
  }
  ReportingOptions& reporting = fleet_options.reporting;
  reporting.interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(report_interval));
  reporting.min_gap = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(min_report_gap));
  reporting.window_ns = static_cast<int64_t>(
      (window_seconds > 0 ? window_seconds : report_interval) * 1e9);
  reporting.stats = !no_stats && reporting.on();
  if (warmup_seconds < 0) warmup_seconds = reporting.on() ? report_interval + 3 : 0;
  // One socket per connection in each process (csd inherits the limit).
  absl::Status raised = RaiseOpenFileLimit(fleet_options.connections + 1024);
  if (!raised.ok()) {
    std::fprintf(stderr, "csd_fanout_loadgen: %s\n", std::string(raised.message()).c_str());
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);

  LocalCsds local;
  if (server.empty()) {
    absl::StatusOr<LocalCsds> started = StartLocalCsds(csd_binary, replica_count,
                                                           enforcement_write_interval_s);
    if (!started.ok()) {
      std::fprintf(stderr, "csd_fanout_loadgen: %s\n", started.status().ToString().c_str());
      return 1;
    }
    local = std::move(*started);
    server = local.servers;
    csd_pid = local.pids[0];
  } else {
    local.store = "external";
    if (csd_pid > 0) local.pids.push_back(csd_pid);
    if (!metrics_address.empty()) local.metrics.push_back(metrics_address);
  }
  const std::vector<pid_t>& csd_pids = local.pids;
  const std::vector<std::string>& metrics = local.metrics;
  const std::string& store = local.store;
  // Fresh hosts and VMs per run, so runs against one --server do not mix.
  fleet_options.run = absl::StrCat(std::random_device()() % 1000000);
  fleet_options.server = server;
  std::printf(
      "csd at %s (%s, pid %d); %d agents over %d connections, %d VMs and %d "
      "cores each; TagVM at %.0f/s for %.0f s\n",
      server.c_str(), store.c_str(), csd_pid, fleet_options.agents, fleet_options.connections,
      fleet_options.vms_per_host, reporting.cores, rate, duration);
  if (reporting.on()) {
    std::printf(
        "agents Report every %.1f s, after every watch message, at least %.1f s "
        "apart; %s\n",
        report_interval, min_report_gap,
        reporting.stats
            ? absl::StrCat("a stats window of every VM and core each ",
                           reporting.window_ns / 1e9, " s")
                  .c_str()
            : "no stats windows");
  } else {
    std::printf("agents Report once, at setup\n");
  }

  auto control = v1::ControlPlane::NewStub(grpc::CreateChannel(
      std::string(server.substr(0, server.find(','))), grpc::InsecureChannelCredentials()));
  const size_t vms =
      static_cast<size_t>(fleet_options.agents) * fleet_options.vms_per_host;
  TagLedger ledger(fleet_options.run,
                   static_cast<size_t>(rate * duration) + 1, vms);

  std::this_thread::sleep_for(seconds(1));
  auto before = Usage(csd_pids);
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
  auto after = Usage(csd_pids);
  auto self_after = Usage(getpid());
  auto per_agent = [&](int64_t kib) {
    return static_cast<double>(kib - before->rss_kib) / fleet_options.agents;
  };
  if (before && after) {
    std::printf(
        "csd RSS: %lld KiB before agents, %lld KiB with %d watching: %.1f KiB "
        "per agent (peak %lld KiB, %d threads)\n",
        static_cast<long long>(before->rss_kib),
        static_cast<long long>(after->rss_kib), fleet_options.agents,
        per_agent(after->rss_kib), static_cast<long long>(after->peak_rss_kib),
        after->threads);
  }
  if (self_before && self_after) {
    std::printf("load generator RSS: %.1f KiB per agent (the client side)\n",
                static_cast<double>(self_after->rss_kib - self_before->rss_kib) /
                    fleet_options.agents);
  }
  if (warmup_seconds > 0) {
    std::printf("warm-up: %.0f s\n", warmup_seconds);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(warmup_seconds));
  }
  if (idle_seconds > 0) {
    Mark idle_begin = TakeMark(csd_pids, fleet, metrics);
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
    Mark idle_end = TakeMark(csd_pids, fleet, metrics);
    PrintPhase(reporting.on() ? "steady state, agents reporting, nothing tagged"
                              : "idle, every agent watching, nothing tagged",
               idle_begin, idle_end);
  }

  fleet.RecordReportLatencies();
  Mark tag_begin = TakeMark(csd_pids, fleet, metrics);
  int64_t no_vm_free = 0;
  double tag_s = RunTagger(control.get(), &ledger, fleet_options.run,
                           fleet_options.vms_per_host, rate, duration, &no_vm_free);
  Mark tag_end = TakeMark(csd_pids, fleet, metrics);
  std::vector<int64_t> report_us = fleet.TakeReportLatencies();
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
  PrintPhase(reporting.on() ? "steady state, agents reporting, tagging"
                            : "tagging, every agent watching",
             tag_begin, tag_end);
  if (tag_end.csd) {
    std::printf("  csd RSS %lld KiB: %.1f KiB per agent over csd before agents (%d threads)\n",
                static_cast<long long>(tag_end.csd->rss_kib),
                before ? per_agent(tag_end.csd->rss_kib) : 0.0, tag_end.csd->threads);
  }
  PrintLatency("TagVM acknowledged", Summarize(totals.ack_us));
  PrintLatency("fan-out (tag->delta)", Summarize(totals.fanout_us));
  std::printf("fan-out p99 / max by 10 s of tagging, ms:");
  for (const auto& slice : totals.fanout_us_by_slice) {
    LatencySummary s = Summarize(slice);
    std::printf(" %.0f/%.0f", s.p99_ms, s.max_ms);
  }
  std::printf("\n");
  if (reporting.on()) PrintLatency("Report answered", Summarize(std::move(report_us)));
  std::printf("deltas lost (none within %.0f s of the end): %zu; watch streams broken: %d\n",
              timeout, totals.lost, fleet.broken_streams());
  const int64_t reports_failed = fleet.counters().reports_failed;
  if (fleet.broken_streams() > 0 || reports_failed > 0) {
    std::printf("Reports failed: %lld; first error: %s\n",
                static_cast<long long>(reports_failed), fleet.first_error().c_str());
  }
  fleet.Stop();
  // TagVM calls still in flight (a csd that fell behind) complete into the
  // ledger: wait for them (their deadline is 30 s) before it goes.
  const auto calls_deadline = Clock::now() + seconds(35);
  while (ledger.Count().unanswered > 0 && Clock::now() < calls_deadline) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  bool clean = totals.lost == 0 && totals.failed == 0 && totals.unanswered == 0 &&
               fleet.broken_streams() == 0 && reports_failed == 0;
  return clean ? 0 : 1;
}

}  // namespace
}  // namespace cosched::bench

int main(int argc, char** argv) { return cosched::bench::Run(argc, argv); }
