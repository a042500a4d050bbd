#include "agent/server_session.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/backoff.h"
#include "common/log_every.h"
#include "common/transport.h"
#include "glog/logging.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"

namespace cosched::agent {
namespace {

// csd rejects larger reports (agent.proto).
constexpr int kMaxReportedVms = 10000;

absl::Status Annotate(const absl::Status& status, absl::string_view what) {
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

// Whether csd itself refused the call (its authorization), not the network.
bool Refusal(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
         status.error_code() == grpc::StatusCode::UNAUTHENTICATED;
}

}  // namespace

class ServerSession::TrackedCall {
 public:
  explicit TrackedCall(ServerSession* session) : session_(session) {
    std::lock_guard<std::mutex> lock(session_->mu_);
    cancelled_ = session_->stopping_;
    if (!cancelled_) session_->active_calls_.insert(&context_);
  }
  ~TrackedCall() {
    std::lock_guard<std::mutex> lock(session_->mu_);
    session_->active_calls_.erase(&context_);
  }
  TrackedCall(const TrackedCall&) = delete;
  TrackedCall& operator=(const TrackedCall&) = delete;

  grpc::ClientContext* context() { return &context_; }
  // True when Stop came first: do not start the call.
  bool cancelled() const { return cancelled_; }

 private:
  ServerSession* const session_;
  grpc::ClientContext context_;
  bool cancelled_ = false;
};

v1::ReportRequest MakeReportRequest(
    absl::string_view host_id, int64_t applied_revision,
    std::vector<v1::VMObservation> observations) {
  v1::ReportRequest request;
  request.set_host_id(std::string(host_id));
  request.set_applied_revision(applied_revision);
  if (observations.size() > static_cast<size_t>(kMaxReportedVms)) {
    COSCHED_LOG_EVERY_T(WARNING, 300) << "host has " << observations.size()
                              << " VMs; reporting only the first "
                              << kMaxReportedVms;
    observations.resize(kMaxReportedVms);
  }
  for (auto& o : observations) *request.add_vms() = std::move(o);
  return request;
}

ServerSession::ServerSession(ServerSessionOptions options,
                             v1::RegisterRequest registration,
                             AssignmentCache* cache,
                             ObservationSource observations,
                             AssignmentsListener listener,
                             StatsWindowQueue* stats)
    : options_(std::move(options)),
      registration_(std::move(registration)),
      cache_(cache),
      observations_(std::move(observations)),
      listener_(std::move(listener)),
      stats_(stats) {}

ServerSession::~ServerSession() { Stop(); }

absl::Status ServerSession::Start() {
  absl::StatusOr<std::vector<std::string>> addresses =
      ParseServerList("server", options_.server_address);
  if (!addresses.ok()) return addresses.status();
  grpc::ChannelArguments args;
  // gRPC's own reconnect backoff (default up to 120 s) would otherwise make
  // calls fail fast long after csd is back.
  const int initial_ms = static_cast<int>(options_.backoff_initial.count());
  const int max_ms = static_cast<int>(options_.backoff_max.count());
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
  // The watch stream can be silent for days: pings find a csd that vanished
  // without closing the connection (csd permits pings every 10 s).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  std::vector<Endpoint> endpoints;
  for (const std::string& address : *addresses) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        MakeChannelCredentials(address, options_.tls, options_.insecure);
    if (!credentials.ok()) return credentials.status();
    std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors;
    if (options_.interceptors) interceptors = options_.interceptors();
    endpoints.push_back(Endpoint{
        address, v1::AgentService::NewStub(grpc::experimental::CreateCustomChannelWithInterceptors(
                     address, *credentials, args, std::move(interceptors)))});
  }
  endpoints_ = std::move(endpoints);
  watch_thread_ = std::thread([this] { WatchLoop(); });
  report_thread_ = std::thread([this] { ReportLoop(); });
  return absl::OkStatus();
}

const ServerSession::Endpoint& ServerSession::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return endpoints_[current_];
}

std::string ServerSession::current_address() const {
  std::lock_guard<std::mutex> lock(mu_);
  return endpoints_.empty() ? options_.server_address : endpoints_[current_].address;
}

int ServerSession::failovers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failovers_;
}

void ServerSession::MoveToNextEndpoint(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (endpoints_.size() < 2) return;
  const std::string& from = endpoints_[current_].address;
  current_ = (current_ + 1) % endpoints_.size();
  ++failovers_;
  LOG(WARNING) << "moving from csd at " << from << " to csd at " << endpoints_[current_].address
               << " (replica " << current_ + 1 << " of " << endpoints_.size()
               << "): " << why;
}

void ServerSession::LeaveEndpoint(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (endpoints_.size() < 2) return;
  left_because_ = why;
  for (grpc::ClientContext* context : active_calls_) context->TryCancel();
}

void ServerSession::SetRegistration(const std::map<std::string, std::string>& labels,
                                    bool observe) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& now = registration_.labels();
  if (std::map<std::string, std::string>(now.begin(), now.end()) == labels &&
      registration_.observe() == observe) {
    return;
  }
  registration_.mutable_labels()->clear();
  registration_.mutable_labels()->insert(labels.begin(), labels.end());
  registration_.set_observe(observe);
  ++registration_changes_;
  if (watch_call_ != nullptr) {
    reregister_ = true;
    watch_call_->TryCancel();
  }
}

void ServerSession::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (grpc::ClientContext* context : active_calls_) context->TryCancel();
  }
  wake_.notify_all();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (report_thread_.joinable()) report_thread_.join();
}

bool ServerSession::registered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return registered_;
}

bool ServerSession::watching() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watching_;
}

std::string ServerSession::refusal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refusal_;
}

int ServerSession::register_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return register_count_;
}

int ServerSession::watch_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watch_count_;
}

int ServerSession::report_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return report_count_;
}

void ServerSession::RequestReport() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    report_requested_ = true;
  }
  wake_.notify_all();
}

bool ServerSession::SleepUntil(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait_until(lock, deadline, [this] { return stopping_; });
  return !stopping_;
}

std::string RefusalHint(const absl::Status& status, absl::string_view host_id) {
  if (absl::IsPermissionDenied(status)) {
    return absl::StrCat(
        "csd refuses this agent as host '", host_id,
        "': the host_id in cs-agent.yaml (or --host-id; default the hostname) must "
        "be the host of the agent's certificate, URI SAN "
        "spiffe://<csd trust_domain>/host/<host_id>. Fix the host_id or issue a "
        "certificate for it (a renewed certificate is picked up without a restart). "
        "Without a certificate an agent acts for a host only as root on csd's Unix "
        "socket (server: unix:/run/cosched/csd.sock) or when csd.yaml sets plaintext_agents");
  }
  if (absl::IsUnauthenticated(status)) {
    return "csd accepts no call from this agent without a certificate (its "
           "plaintext_role is none): give the agent tls.cert_file, tls.key_file "
           "and tls.ca_file in cs-agent.yaml, with a certificate from csd's CA";
  }
  return "";
}

void ServerSession::WatchLoop() {
  JitteredBackoff backoff(options_.backoff_initial, options_.backoff_max);
  bool was_watching = false;
  while (true) {
    bool progressed = false;
    ConnectFailure failure = ConnectFailure::kCsd;
    absl::Status status = ConnectOnce(&progressed, &failure);
    std::string hint = failure == ConnectFailure::kRefused && !progressed
                           ? RefusalHint(status, registration_.host_id())
                           : "";
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      refusal_ = hint;
    }
    if (progressed) backoff.Reset();
    const std::chrono::milliseconds delay = backoff.NextDelay();
    if (!hint.empty()) {
      // Until the configuration changes every attempt fails the same way:
      // say what to fix, not that csd is unreachable.
      COSCHED_LOG_EVERY_T(ERROR, 60) << hint << ". csd at " << current_address()
                             << " said: " << status << " (attempt " << backoff.failures()
                             << "; retrying at most " << options_.backoff_max.count()
                             << " ms apart)";
    } else if (failure == ConnectFailure::kReregister) {
      LOG(INFO) << status.message() << " with csd at " << current_address();
    } else if (failure == ConnectFailure::kLocal) {
      // Not csd's doing: the agent could not keep what csd sent (its state
      // dir is full or unwritable, or the message is one it refuses).
      COSCHED_LOG_EVERY_T(ERROR, 60) << "cannot apply csd's assignments: " << status
                             << "; reconnecting in " << delay.count() << " ms";
    } else if (was_watching || progressed) {
      LOG(WARNING) << "lost csd at " << current_address() << ": "
                   << status << "; reconnecting in " << delay.count() << " ms";
    } else {
      COSCHED_LOG_EVERY_T(WARNING, 60)
          << "cannot reach csd at " << current_address() << ": "
          << status << " (attempt " << backoff.failures()
          << "); retrying with backoff up to " << options_.backoff_max.count()
          << " ms";
    }
    was_watching = progressed;
    // Another replica serves the same state at the same revisions: after a
    // failure that is csd's or the network's, try it. A refusal is the
    // agent's configuration, the same on every replica.
    if (failure == ConnectFailure::kCsd) MoveToNextEndpoint(status);
    if (!SleepUntil(std::chrono::steady_clock::now() + delay)) return;
  }
}

absl::Status ServerSession::ConnectOnce(bool* progressed, ConnectFailure* failure) {
  *failure = ConnectFailure::kCsd;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left_because_ = absl::OkStatus();
  }
  const Endpoint& csd = Current();
  int registered_changes = 0;
  {
    TrackedCall call(this);
    if (call.cancelled()) return absl::CancelledError("agent is stopping");
    call.context()->set_deadline(std::chrono::system_clock::now() +
                                 options_.rpc_timeout);
    v1::RegisterResponse response;
    v1::RegisterRequest registration;
    {
      std::lock_guard<std::mutex> lock(mu_);
      registration = registration_;
      registered_changes = registration_changes_;
    }
    if (options_.preflight) {
      *registration.mutable_capabilities()->mutable_preflight() = options_.preflight();
    }
    grpc::Status status = csd.stub->Register(call.context(), registration, &response);
    if (!status.ok()) {
      if (Refusal(status)) *failure = ConnectFailure::kRefused;
      return Annotate(FromGrpcStatus(status), "Register");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      refusal_.clear();
    }
    COSCHED_LOG_EVERY_T(INFO, 60) << "registered host " << registration_.host_id()
                          << " with csd at " << csd.address
                          << " (csd revision " << response.revision() << ")";
    if (options_.on_enablement) options_.on_enablement(response.enablement());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    registered_ = true;
    ++register_count_;
    report_requested_ = true;
  }
  wake_.notify_all();

  v1::WatchAssignmentsRequest request;
  request.set_host_id(registration_.host_id());
  request.set_resume_revision(cache_->revision());
  const auto opened = std::chrono::steady_clock::now();
  TrackedCall call(this);
  if (call.cancelled()) return absl::CancelledError("agent is stopping");
  {
    std::lock_guard<std::mutex> lock(mu_);
    watch_call_ = call.context();
    if (registration_changes_ != registered_changes) {
      reregister_ = true;
      watch_call_->TryCancel();
    }
  }
  std::unique_ptr<grpc::ClientReader<v1::WatchAssignmentsResponse>> reader =
      csd.stub->WatchAssignments(call.context(), request);
  v1::WatchAssignmentsResponse message;
  absl::Status apply_error;
  while (reader->Read(&message)) {
    apply_error = cache_->Apply(message);
    if (!apply_error.ok()) {
      call.context()->TryCancel();
      while (reader->Read(&message)) {
      }
      break;
    }
    if (!*progressed) {
      *progressed = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        watching_ = true;
        ++watch_count_;
      }
      LOG(INFO) << "watching assignments from csd at "
                << csd.address << " (resumed from revision "
                << request.resume_revision() << ", now at "
                << message.revision() << ")";
    }
    RequestReport();
    if (listener_) listener_(cache_->revision());
  }
  grpc::Status finished = reader->Finish();
  absl::Status left;
  bool reregister;
  {
    std::lock_guard<std::mutex> lock(mu_);
    watching_ = false;
    watch_call_ = nullptr;
    left = std::exchange(left_because_, absl::OkStatus());
    reregister = std::exchange(reregister_, false);
  }
  if (!left.ok()) return left;
  if (reregister) {
    *failure = ConnectFailure::kReregister;
    *progressed = true;
    return absl::AbortedError("the host's labels changed: registering again");
  }
  // A stream that stayed up a long while was a success even if quiet.
  if (std::chrono::steady_clock::now() - opened >= options_.backoff_max) {
    *progressed = true;
  }
  if (!apply_error.ok()) {
    *failure = ConnectFailure::kLocal;
    return Annotate(apply_error, "applying WatchAssignments message");
  }
  if (finished.ok()) {
    return absl::UnavailableError("csd ended the WatchAssignments stream");
  }
  if (Refusal(finished)) *failure = ConnectFailure::kRefused;
  return Annotate(FromGrpcStatus(finished), "WatchAssignments");
}

namespace {

// A Report failure that is the replica's or the network's.
bool CsdFailed(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

}  // namespace

void ServerSession::ReportLoop() {
  using Clock = std::chrono::steady_clock;
  auto next = Clock::now() + options_.report_interval;
  auto earliest = Clock::time_point::min();
  int failed_in_a_row = 0;
  std::string failed_at;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait_until(lock, next, [this] {
      return stopping_ || (report_requested_ && registered_);
    });
    if (stopping_) return;
    // Requests that arrive meanwhile are folded into this one Report.
    if (Clock::now() < earliest) {
      wake_.wait_until(lock, earliest, [this] { return stopping_; });
      if (stopping_) return;
    }
    next = Clock::now() + options_.report_interval;
    // Reports wait for the first Register: csd learns the host from it.
    if (!registered_) continue;
    report_requested_ = false;
    lock.unlock();
    const std::string address = current_address();
    bool called = false;
    absl::Status status = SendReport(&called);
    if (!status.ok()) {
      COSCHED_LOG_EVERY_T(WARNING, 60) << "report to csd at " << address << " failed: " << status;
    }
    // Failures of one replica in a row; a refusal or a Report skipped here
    // (no observations yet) says nothing about the replica.
    failed_in_a_row =
        called && CsdFailed(status) ? (address == failed_at ? failed_in_a_row + 1 : 1) : 0;
    failed_at = address;
    if (failed_in_a_row >= options_.report_failures_before_moving) {
      failed_in_a_row = 0;
      LeaveEndpoint(absl::UnavailableError(absl::StrCat(
          options_.report_failures_before_moving, " Reports in a row failed at csd at ", address,
          ", the last with: ", status.ToString())));
    }
    lock.lock();
    if (status.ok()) ++report_count_;
    earliest = Clock::now() + options_.min_report_gap;
  }
}

absl::Status ServerSession::SendReport(bool* called) {
  absl::StatusOr<std::vector<v1::VMObservation>> observations = observations_();
  // Reporting nothing would tell csd the VMs are gone: skip instead.
  if (!observations.ok()) return observations.status();
  const int64_t applied =
      options_.applied_revision ? options_.applied_revision() : cache_->revision();
  v1::ReportRequest request =
      MakeReportRequest(registration_.host_id(), applied, std::move(*observations));
  if (options_.preflight) *request.mutable_preflight() = options_.preflight();
  if (options_.impostors) {
    std::vector<v1::ImpostorProcess> impostors = options_.impostors();
    request.set_impostor_count(static_cast<int32_t>(impostors.size()));
    constexpr size_t kMaxListed = 32;  // csd's bound
    if (impostors.size() > kMaxListed) impostors.resize(kMaxListed);
    for (v1::ImpostorProcess& p : impostors) *request.add_impostors() = std::move(p);
  }
  StatsBatch batch;
  if (stats_ != nullptr) {
    batch = stats_->Peek();
    for (v1::StatsWindow& window : batch.windows) *request.add_stats() = std::move(window);
    request.set_dropped_windows(batch.dropped_windows);
  }
  TrackedCall call(this);
  if (call.cancelled()) return absl::CancelledError("agent is stopping");
  call.context()->set_deadline(std::chrono::system_clock::now() +
                               options_.rpc_timeout);
  v1::ReportResponse response;
  *called = true;
  grpc::Status status = Current().stub->Report(call.context(), request, &response);
  if (!status.ok()) return Annotate(FromGrpcStatus(status), "Report");
  if (stats_ != nullptr) stats_->Acknowledge(batch);
  if (options_.on_enablement) options_.on_enablement(response.enablement());
  return absl::OkStatus();
}

}  // namespace cosched::agent
