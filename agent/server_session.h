// The agent's connection to csd: registers the host, holds the
// WatchAssignments stream (feeding the AssignmentCache) and reports the VMs
// found on the host, reconnecting with jittered backoff whenever anything
// fails.
#ifndef COSCHED_AGENT_SERVER_SESSION_H_
#define COSCHED_AGENT_SERVER_SESSION_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "agent/assignment_cache.h"
#include "agent/stats_window_queue.h"
#include "absl/status/statusor.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/config.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_interceptor.h"

namespace cosched::agent {

struct ServerSessionOptions {
  // csd's host:port, or several replicas' comma-separated
  // (ParseServerList): the session holds one at a time and moves to the
  // next when a connection to it fails, resuming the stream by revision.
  std::string server_address;
  v1::TlsConfig tls;
  // Allow plaintext to a non-loopback address.
  bool insecure = false;
  // Time between reports (a report is also sent right after each Register
  // and after assignments change).
  std::chrono::milliseconds report_interval{std::chrono::seconds(10)};
  // Least time from the end of one Report to the start of the next. At most
  // one Report is in flight, and a burst of watch messages (a migration, a
  // tenant's re-plan) asks for many: they give one Report after the gap.
  std::chrono::milliseconds min_report_gap{std::chrono::seconds(1)};
  // Deadline of Register and Report.
  std::chrono::milliseconds rpc_timeout{std::chrono::seconds(10)};
  // Reconnect delays (see JitteredBackoff).
  std::chrono::milliseconds backoff_initial{200};
  std::chrono::milliseconds backoff_max{std::chrono::seconds(10)};
  // The assignment revision the agent has enforced, sent in each Report as
  // applied_revision (null: the cache's, whether enforced yet or not).
  std::function<int64_t()> applied_revision;
  // The host's preflight now, sent with Register (in the capabilities) and
  // each Report, so that csd hears of a hazard that appears later; null:
  // none sent beyond the registration's.
  std::function<v1::HostPreflight()> preflight;
  // The processes posing as VMs now, sent with each Report (the first 32,
  // and their count); null: none.
  std::function<std::vector<v1::ImpostorProcess>()> impostors;
  // Failed Reports in a row (csd or the network failing: UNAVAILABLE,
  // DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, ABORTED) after which the session
  // leaves its replica for the next one, as when its stream fails: a
  // replica that lost its store may keep the stream open. Only with
  // several addresses.
  int report_failures_before_moving = 3;
  // Runs with csd's HostEnablement after each Register and Report it
  // answered (on the session's thread, no lock held); null: ignored.
  std::function<void(const v1::HostEnablement&)> on_enablement;
  // Interceptors of the channel to csd (the agent's RPC metrics); null for
  // none.
  std::function<std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>()>
      interceptors;
};

// What the agent reports: one observation per VM found on the host. An
// error skips the report (reporting nothing would tell csd the VMs left).
using ObservationSource =
    std::function<absl::StatusOr<std::vector<v1::VMObservation>>()>;

// What an operator should check when csd refuses this agent's calls
// (PERMISSION_DENIED: its certificate names another host, or no host;
// UNAUTHENTICATED: no certificate csd trusts): the cause is configuration,
// and retrying alone will not fix it. Empty for any other error.
std::string RefusalHint(const absl::Status& status, absl::string_view host_id);

// The ReportRequest for `observations` at the cache's revision, cut to the
// most csd accepts.
v1::ReportRequest MakeReportRequest(
    absl::string_view host_id, int64_t applied_revision,
    std::vector<v1::VMObservation> observations);

// Runs two threads: one holds Register + WatchAssignments, one reports.
// Start and Stop are not thread-safe with each other; the accessors are.
class ServerSession {
 public:
  // Called on the session's thread after each applied stream message, with
  // the cache's new revision. It must not call Stop.
  using AssignmentsListener = std::function<void(int64_t revision)>;

  // `registration` is sent on every (re)connect. `cache` must outlive the
  // session. Each report carries the windows pending in `stats` (may be
  // null), which leave it once csd accepted the report.
  ServerSession(ServerSessionOptions options, v1::RegisterRequest registration,
                AssignmentCache* cache, ObservationSource observations,
                AssignmentsListener listener, StatsWindowQueue* stats = nullptr);
  ~ServerSession();

  ServerSession(const ServerSession&) = delete;
  ServerSession& operator=(const ServerSession&) = delete;

  // Builds a channel per address and starts the threads; the connection is
  // made in the background. INVALID_ARGUMENT for a bad address list;
  // FAILED_PRECONDITION when plaintext is not allowed to an address, or TLS
  // files cannot be read.
  absl::Status Start();

  // Cancels every call in flight, wakes the threads and joins them. Prompt:
  // it does not wait for a backoff or a report interval. Idempotent.
  void Stop();

  // True once a Register call succeeded (since Start).
  bool registered() const;
  // True while a WatchAssignments stream is open and has delivered its
  // first message.
  bool watching() const;
  // RefusalHint of the last connection attempt while csd refuses this
  // agent (a configuration error); empty otherwise.
  std::string refusal() const;
  // Since Start: Register calls that succeeded, WatchAssignments streams
  // that delivered a first message, Report calls that csd acknowledged.
  int register_count() const;
  int watch_count() const;
  int report_count() const;
  // The csd address the session uses now (the first of the list until a
  // connection fails), and how many times it moved to another one.
  std::string current_address() const;
  int failovers() const;

  // Asks for a report as soon as possible.
  void RequestReport();

  // The host's labels and whether the agent observes, anew (a reload of
  // cs-agent.yaml): csd takes both at Register, so an open stream is ended
  // and the agent registers again at once, on the same replica, resuming
  // by revision. Nothing happens when they are the same.
  void SetRegistration(const std::map<std::string, std::string>& labels, bool observe);

 private:
  // A call's ClientContext, cancellable by Stop while the call runs.
  class TrackedCall;

  // What ended a connection: csd or the network, csd refusing this agent
  // (RefusalHint), or the agent failing to apply a message itself.
  enum class ConnectFailure { kCsd, kRefused, kLocal, kReregister };

  void WatchLoop();
  // One connection: Register, then the stream until it fails. Sets
  // `progressed` when the stream delivered at least one message, and
  // `failure` to what ended it.
  absl::Status ConnectOnce(bool* progressed, ConnectFailure* failure);
  void ReportLoop();
  // Sets `called` once the Report RPC is made (not when there was nothing
  // to report).
  absl::Status SendReport(bool* called);
  // One csd replica.
  struct Endpoint {
    std::string address;
    std::unique_ptr<v1::AgentService::Stub> stub;
  };
  // The endpoint in use; its stub outlives every call (endpoints_ is fixed
  // after Start).
  const Endpoint& Current() const;
  // After a failed connection, the next endpoint of the list (if several).
  void MoveToNextEndpoint(const absl::Status& why);
  // Ends the connection to the endpoint in use (its stream and calls) for
  // `why`, so that the watch loop moves to the next; only with several.
  void LeaveEndpoint(const absl::Status& why);
  // Waits until `deadline` or Stop; returns false on Stop.
  bool SleepUntil(std::chrono::steady_clock::time_point deadline);

  const ServerSessionOptions options_;
  // Its labels and observe change under mu_ (SetRegistration); the rest
  // is fixed.
  v1::RegisterRequest registration_;
  AssignmentCache* const cache_;
  const ObservationSource observations_;
  const AssignmentsListener listener_;
  StatsWindowQueue* const stats_;
  std::vector<Endpoint> endpoints_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool registered_ = false;
  bool watching_ = false;
  std::string refusal_;
  bool report_requested_ = false;
  int register_count_ = 0;
  int watch_count_ = 0;
  int report_count_ = 0;
  size_t current_ = 0;
  int failovers_ = 0;
  // Set by LeaveEndpoint: why the connection in progress was ended.
  absl::Status left_because_;
  std::set<grpc::ClientContext*> active_calls_;
  // The open WatchAssignments call, and whether SetRegistration ended it.
  grpc::ClientContext* watch_call_ = nullptr;
  bool reregister_ = false;
  // Counts SetRegistration's changes: a change between a Register and its stream
  // ends that stream too.
  int registration_changes_ = 0;
  std::thread watch_thread_;
  std::thread report_thread_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_SERVER_SESSION_H_
