#include "server/fanout/assignment_fanout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"
#include "common/transport.h"
#include "glog/logging.h"

namespace cosched::server {

class AssignmentFanout::Watcher
    : public grpc::ServerWriteReactor<v1::WatchAssignmentsResponse>,
      public std::enable_shared_from_this<Watcher> {
 public:
  Watcher(AssignmentFanout* fanout, std::string host_id, int64_t resume)
      : fanout_(fanout), host_id_(std::move(host_id)), last_sent_(resume) {}

  const std::string& host_id() const { return host_id_; }

  // Keeps the reactor alive until gRPC is done with it.
  void Adopt(std::shared_ptr<Watcher> self) { self_ = std::move(self); }

  void End(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(status);
  }

  // Something changed for the host: send it once no write is in flight.
  void MarkDirty() {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    dirty_ = true;
    ScheduleLocked();
  }

  // On the fan-out worker: reads what changed and starts writing it.
  void Pump() {
    bool first;
    int64_t since;
    {
      std::lock_guard<std::mutex> lock(mu_);
      scheduled_ = false;
      if (finished_ || write_in_flight_ || !dirty_) return;
      dirty_ = false;
      first = !sent_first_;
      since = last_sent_;
    }
    absl::StatusOr<std::optional<v1::WatchAssignmentsResponse>> next;
    if (first) {
      auto message = fanout_->reads_->FirstWatchMessage(host_id_, since);
      if (message.ok()) {
        next = std::optional<v1::WatchAssignmentsResponse>(std::move(*message));
      } else {
        next = message.status();
      }
    } else {
      next = fanout_->reads_->WatchUpdate(host_id_, since);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    if (!next.ok()) {
      LOG(WARNING) << "watch of host " << host_id_
                   << " ends: " << next.status();
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                std::string(next.status().message())));
      return;
    }
    if (!next->has_value()) return;
    message_ = std::move(**next);
    last_sent_ = std::max(last_sent_, message_.revision());
    sent_first_ = true;
    write_in_flight_ = true;
    StartWrite(&message_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    write_in_flight_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                "the stream broke while writing"));
      return;
    }
    if (finish_pending_) {
      Finish(pending_status_);
      return;
    }
    if (dirty_) ScheduleLocked();
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    fanout_->Remove(this);
    self_.reset();  // may delete this
  }

 private:
  void ScheduleLocked() {
    if (write_in_flight_ || scheduled_) return;
    scheduled_ = true;
    fanout_->Enqueue(shared_from_this());
  }

  // Finish may not overlap a write: defer it to OnWriteDone then.
  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    if (write_in_flight_) {
      finish_pending_ = true;
      pending_status_ = status;
    } else {
      Finish(status);
    }
  }

  AssignmentFanout* const fanout_;
  const std::string host_id_;
  std::shared_ptr<Watcher> self_;

  std::mutex mu_;
  bool dirty_ = true;  // the first message is owed
  bool scheduled_ = false;
  bool sent_first_ = false;
  bool write_in_flight_ = false;
  bool finished_ = false;
  bool finish_pending_ = false;
  grpc::Status pending_status_;
  int64_t last_sent_;
  v1::WatchAssignmentsResponse message_;  // lives until OnWriteDone
};

AssignmentFanout::AssignmentFanout(WatchReads* reads)
    : reads_(reads), worker_(NamedThread("cs-fanout", [this] { WorkerLoop(); })) {}

AssignmentFanout::~AssignmentFanout() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  worker_.join();
}

grpc::ServerWriteReactor<v1::WatchAssignmentsResponse>*
AssignmentFanout::StartWatch(const v1::WatchAssignmentsRequest& request) {
  auto watcher = std::make_shared<Watcher>(this, request.host_id(),
                                           request.resume_revision());
  watcher->Adopt(watcher);
  {
    std::lock_guard<std::mutex> lock(mu_);
    watchers_[request.host_id()].push_back(watcher);
  }
  LOG(INFO) << "agent of host " << request.host_id()
            << " watches from revision " << request.resume_revision();
  watcher->MarkDirty();
  return watcher.get();
}

void AssignmentFanout::OnCommit(const std::vector<std::string>& hosts) {
  std::vector<std::shared_ptr<Watcher>> touched;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& host : hosts) {
      auto it = watchers_.find(host);
      if (it == watchers_.end()) continue;
      for (auto& weak : it->second) {
        if (auto w = weak.lock()) touched.push_back(std::move(w));
      }
    }
  }
  for (auto& w : touched) w->MarkDirty();
}

void AssignmentFanout::SetStoreReachable(bool reachable, absl::Duration end_after,
                                         const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reachable || end_after <= absl::ZeroDuration()) {
      end_streams_at_ = absl::InfiniteFuture();
    } else if (end_streams_at_ == absl::InfiniteFuture()) {
      end_streams_at_ = absl::Now() + end_after;
      lost_why_ = absl::StrCat("this csd replica cannot reach its store for over ",
                               absl::FormatDuration(end_after), " (", why,
                               "): move to another replica");
    }
  }
  wake_.notify_one();
}

void AssignmentFanout::EndAll(const std::string& message) {
  std::vector<std::shared_ptr<Watcher>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [host, list] : watchers_) {
      for (auto& weak : list) {
        if (auto w = weak.lock()) all.push_back(std::move(w));
      }
    }
  }
  if (!all.empty()) {
    LOG(WARNING) << "ending " << all.size() << " assignment stream(s): " << message;
  }
  for (auto& w : all) w->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, message));
}

void AssignmentFanout::OnResync() {
  std::vector<std::shared_ptr<Watcher>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [host, list] : watchers_) {
      for (auto& weak : list) {
        if (auto w = weak.lock()) all.push_back(std::move(w));
      }
    }
  }
  for (auto& w : all) w->MarkDirty();
}

bool AssignmentFanout::IsConnected(absl::string_view host_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = watchers_.find(std::string(host_id));
  return it != watchers_.end() && !it->second.empty();
}

std::vector<std::string> AssignmentFanout::ConnectedHosts() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> hosts;
  hosts.reserve(watchers_.size());
  for (const auto& [host, list] : watchers_) {
    if (!list.empty()) hosts.push_back(host);
  }
  return hosts;
}

size_t AssignmentFanout::WatcherCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [host, list] : watchers_) n += list.size();
  return n;
}

void AssignmentFanout::Enqueue(std::shared_ptr<Watcher> watcher) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    queue_.push_back(std::move(watcher));
  }
  wake_.notify_one();
}

void AssignmentFanout::Remove(const Watcher* watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = watchers_.find(watcher->host_id());
  if (it == watchers_.end()) return;
  auto& list = it->second;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [watcher](const std::weak_ptr<Watcher>& w) {
                              auto p = w.lock();
                              return !p || p.get() == watcher;
                            }),
             list.end());
  if (list.empty()) watchers_.erase(it);
}

void AssignmentFanout::WorkerLoop() {
  while (true) {
    std::shared_ptr<Watcher> next;
    std::string end_all;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A message to pump, a stop, or the time the streams end; the time
      // may move while waiting (the store comes back, or is lost).
      while (!stopping_ && queue_.empty() && absl::Now() < end_streams_at_) {
        if (end_streams_at_ == absl::InfiniteFuture()) {
          wake_.wait(lock);
        } else {
          wake_.wait_until(lock, absl::ToChronoTime(end_streams_at_));
        }
      }
      if (stopping_) return;
      if (absl::Now() >= end_streams_at_) {
        end_all = lost_why_;
        // While the store stays lost, streams that start meanwhile end
        // within a second.
        end_streams_at_ = absl::Now() + absl::Seconds(1);
      } else {
        next = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (next != nullptr) {
      next->Pump();
    } else {
      EndAll(end_all);
    }
  }
}

}  // namespace cosched::server
