// An in-process stand-in for csd's AgentService: records what the agent
// sends and streams the assignment messages a test pushes.
#ifndef COSCHED_TESTS_AGENT_FAKE_CSD_H_
#define COSCHED_TESTS_AGENT_FAKE_CSD_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace cosched::agent::testing {

class FakeAgentService final : public v1::AgentService::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    registers_.push_back(*request);
    response->set_revision(revision_);
    *response->mutable_enablement() = enablement_;
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status WatchAssignments(
      grpc::ServerContext* context, const v1::WatchAssignmentsRequest* request,
      grpc::ServerWriter<v1::WatchAssignmentsResponse>* writer) override {
    std::unique_lock<std::mutex> lock(mu_);
    watches_.push_back(*request);
    const int generation = drop_generation_;
    ++open_streams_;
    cv_.notify_all();
    grpc::Status result;
    while (true) {
      if (context->IsCancelled()) {
        result = grpc::Status::CANCELLED;
        break;
      }
      if (drop_generation_ != generation) {
        result = grpc::Status(grpc::StatusCode::UNAVAILABLE, "dropped by test");
        break;
      }
      if (!outbox_.empty()) {
        v1::WatchAssignmentsResponse message = outbox_.front();
        outbox_.pop_front();
        lock.unlock();
        bool written = writer->Write(message);
        lock.lock();
        if (!written) {
          result = grpc::Status::CANCELLED;
          break;
        }
        continue;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(10));
    }
    --open_streams_;
    cv_.notify_all();
    return result;
  }

  grpc::Status Report(grpc::ServerContext*, const v1::ReportRequest* request,
                      v1::ReportResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    reports_.push_back(*request);
    response->set_revision(revision_);
    *response->mutable_enablement() = enablement_;
    cv_.notify_all();
    return report_status_;
  }

  // What Register and Report say of cookies on the host from now on.
  void SetEnablement(v1::HostEnablement enablement) {
    std::lock_guard<std::mutex> lock(mu_);
    enablement_ = std::move(enablement);
  }

  // What Report answers from now on (the request is recorded either way).
  void SetReportStatus(grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    report_status_ = std::move(status);
  }

  // Queues a message for the (next) stream.
  void Push(v1::WatchAssignmentsResponse message) {
    std::lock_guard<std::mutex> lock(mu_);
    revision_ = std::max(revision_, message.revision());
    outbox_.push_back(std::move(message));
    cv_.notify_all();
  }

  // Ends every open stream with UNAVAILABLE.
  void DropStreams() {
    std::lock_guard<std::mutex> lock(mu_);
    ++drop_generation_;
    cv_.notify_all();
  }

  // Waits until `done()` holds (called under the lock); false on timeout.
  bool WaitFor(const std::function<bool()>& done,
               std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, done);
  }

  // Accessors: call under WaitFor, or through the copies below.
  std::vector<v1::RegisterRequest> registers() {
    std::lock_guard<std::mutex> lock(mu_);
    return registers_;
  }
  std::vector<v1::WatchAssignmentsRequest> watches() {
    std::lock_guard<std::mutex> lock(mu_);
    return watches_;
  }
  std::vector<v1::ReportRequest> reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_;
  }

  // Unlocked views for WaitFor predicates.
  const std::vector<v1::RegisterRequest>& registers_locked() const {
    return registers_;
  }
  const std::vector<v1::WatchAssignmentsRequest>& watches_locked() const {
    return watches_;
  }
  const std::vector<v1::ReportRequest>& reports_locked() const {
    return reports_;
  }
  int open_streams_locked() const { return open_streams_; }
  bool outbox_empty_locked() const { return outbox_.empty(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t revision_ = 0;
  grpc::Status report_status_ = grpc::Status::OK;
  int drop_generation_ = 0;
  int open_streams_ = 0;
  std::deque<v1::WatchAssignmentsResponse> outbox_;
  v1::HostEnablement enablement_;
  std::vector<v1::RegisterRequest> registers_;
  std::vector<v1::WatchAssignmentsRequest> watches_;
  std::vector<v1::ReportRequest> reports_;
};

// A gRPC server with FakeAgentService on 127.0.0.1 (port 0: an ephemeral
// one).
class FakeCsd {
 public:
  explicit FakeCsd(int port = 0) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                             grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~FakeCsd() { Shutdown(); }

  void Shutdown() {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(100));
      server_->Wait();
      server_.reset();
    }
  }

  bool ok() const { return server_ != nullptr && port_ > 0; }
  int port() const { return port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  FakeAgentService& service() { return service_; }

 private:
  FakeAgentService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

inline v1::Assignment MakeAssignment(const std::string& vm_id,
                                     const std::string& group,
                                     int64_t revision) {
  v1::Assignment assignment;
  assignment.set_vm_id(vm_id);
  assignment.set_tenant_id("default");
  assignment.set_isolation(v1::ISOLATION_LEVEL_VM);
  assignment.set_trust_group(group);
  assignment.set_thread_scope(v1::THREAD_SCOPE_EMULATOR);
  assignment.set_revision(revision);
  return assignment;
}

inline v1::WatchAssignmentsResponse MakeSnapshot(
    int64_t revision, const std::vector<v1::Assignment>& assignments) {
  v1::WatchAssignmentsResponse message;
  message.set_kind(v1::WatchAssignmentsResponse::KIND_SNAPSHOT);
  message.set_revision(revision);
  for (const auto& a : assignments) *message.add_assignments() = a;
  return message;
}

inline v1::WatchAssignmentsResponse MakeDelta(
    int64_t revision, const std::vector<v1::Assignment>& upserts,
    const std::vector<std::string>& removed) {
  v1::WatchAssignmentsResponse message;
  message.set_kind(v1::WatchAssignmentsResponse::KIND_DELTA);
  message.set_revision(revision);
  for (const auto& a : upserts) *message.add_assignments() = a;
  for (const auto& id : removed) message.add_removed_vm_ids(id);
  return message;
}

}  // namespace cosched::agent::testing

#endif  // COSCHED_TESTS_AGENT_FAKE_CSD_H_
