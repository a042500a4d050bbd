// The simulated fleet of csd_fanout_loadgen: agents that Register, Report
// and watch their host's assignments as cs-agent does, thousands in one
// process on callbacks and one timer thread, and the ledger of the tags the
// control plane sends and the deltas that bring them (see the load
// generator's header for how a run uses them).
#ifndef COSCHED_TESTS_BENCH_FANOUT_FLEET_H_
#define COSCHED_TESTS_BENCH_FANOUT_FLEET_H_

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

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/bench/loadgen_support.h"

namespace cosched::bench {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             Clock::now().time_since_epoch())
      .count();
}

inline std::chrono::system_clock::time_point DeadlineIn(seconds s) {
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

inline std::string HostId(const std::string& run, int host) {
  return absl::StrCat("load-", run, "-h", host);
}
inline std::string VmId(const std::string& run, size_t vm, int vms_per_host) {
  return absl::StrCat("load-", run, "-h", vm / vms_per_host, "-vm",
                      vm % vms_per_host);
}
// The VM created by churn number `sequence` in `slot` of `host`: its id ends
// in the slot, as VmId's, so the agent finds it in its assignments.
inline std::string ChurnVmId(const std::string& run, int host, int slot, int64_t sequence) {
  return absl::StrCat("load-", run, "-h", host, "-c", sequence, "-vm", slot);
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
  // Churn: the VM in `slot` is deleted and a new one created in its place
  // (a cloud reusing the capacity at once), and a Report is asked for, as
  // cs-agent reports a change of its VMs. Returns the deleted VM's id.
  std::string ReplaceVm(int slot, const std::string& vm_id, const std::string& uuid);

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
  // Churn number `sequence` on `agent`'s host: see SimulatedAgent::ReplaceVm.
  // Returns the ids of the VM deleted and of the one created.
  std::pair<std::string, std::string> ReplaceVm(int agent, int slot, int64_t sequence);
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

}  // namespace cosched::bench

#endif  // COSCHED_TESTS_BENCH_FANOUT_FLEET_H_
