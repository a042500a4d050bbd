#include "store/group_commit_writer.h"

#include <algorithm>
#include <utility>

#include "common/thread_name.h"

namespace cosched::store {

GroupCommitWriter::GroupCommitWriter(int max_batch, std::string closing_error,
                                     CommitBatch commit)
    : max_batch_(static_cast<size_t>(std::max(1, max_batch))),
      closing_error_(std::move(closing_error)),
      commit_(std::move(commit)) {
  completer_ = NamedThread("cs-store-done", [this] { CompletionLoop(); });
  writer_ = NamedThread("cs-store-write", [this] { WriterLoop(); });
}

GroupCommitWriter::~GroupCommitWriter() { Stop(); }

void GroupCommitWriter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  // The writer stops once the queue is empty and no completion is left that
  // could chain another write; then the completion thread has nothing left.
  if (writer_.joinable()) writer_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    completer_stopping_ = true;
  }
  completion_cv_.notify_all();
  if (completer_.joinable()) completer_.join();
}

void GroupCommitWriter::Submit(Store::TxnFn fn, Store::DoneFn done) {
  bool accepted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Done callbacks may chain writes while Stop drains the queue.
    const std::thread::id self = std::this_thread::get_id();
    if (!stopping_ || self == writer_.get_id() || self == completer_.get_id()) {
      queue_.push_back(PendingWrite{std::move(fn), std::move(done)});
      accepted = true;
    }
  }
  if (accepted) {
    queue_cv_.notify_one();
  } else if (done) {
    done(absl::UnavailableError(closing_error_));
  }
}

void GroupCommitWriter::SetCommitObserver(Store::CommitObserver observer) {
  std::lock_guard<std::mutex> lock(mu_);
  observer_ = std::move(observer);
}

void GroupCommitWriter::QueueCompletion(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    completions_.push_back(std::move(fn));
    ++completions_pending_;
  }
  completion_cv_.notify_one();
}

void GroupCommitWriter::WriterLoop() {
  while (true) {
    std::vector<PendingWrite> batch;
    Store::CommitObserver observer;
    {
      std::unique_lock<std::mutex> lock(mu_);
      queue_cv_.wait(lock, [this] {
        return !queue_.empty() || (stopping_ && completions_pending_ == 0);
      });
      if (queue_.empty()) return;
      const size_t n = std::min(queue_.size(), max_batch_);
      batch.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      observer = observer_;
    }
    BatchOutcome outcome = commit_(batch);
    // The batch's answers and its commit observer run on the completion
    // thread, in commit order, while this thread goes on with the next
    // batch: answering (building responses, gRPC sending them) took about
    // a sixth of the writer's time.
    const bool observed = observer && !outcome.changed_hosts.empty();
    QueueCompletion(
        [batch = std::move(batch), results = std::move(outcome.results),
         hosts = std::vector<std::string>(outcome.changed_hosts.begin(),
                                          outcome.changed_hosts.end()),
         observer = observed ? std::move(observer) : nullptr,
         revision = outcome.revision]() mutable {
          for (size_t i = 0; i < batch.size(); ++i) {
            if (batch[i].done) batch[i].done(std::move(results[i]));
          }
          if (observer) observer(hosts, revision);
        });
    if (outcome.queued) outcome.queued();
  }
}

void GroupCommitWriter::CompletionLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    completion_cv_.wait(lock, [this] { return completer_stopping_ || !completions_.empty(); });
    if (completions_.empty()) return;
    std::function<void()> completion = std::move(completions_.front());
    completions_.pop_front();
    lock.unlock();
    completion();
    completion = nullptr;  // the batch's functions go before the writer may stop
    lock.lock();
    if (--completions_pending_ == 0) queue_cv_.notify_all();  // a stopping writer waits for it
  }
}

}  // namespace cosched::store
