#include "server/api/query_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"

namespace cosched::server {

QueryPool::QueryPool(QueryPoolOptions options) : options_(options) {
  const int threads = std::max(1, options_.threads);
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    threads_.push_back(NamedThread("cs-query", [this] { Work(); }));
  }
}

QueryPool::~QueryPool() { Stop(); }

void QueryPool::Stop() {
  std::deque<Waiting> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    left.swap(queue_);
  }
  wake_.notify_all();
  for (Waiting& w : left) w.query(absl::UnavailableError("csd is stopping"));
  for (std::thread& t : threads_) t.join();
}

absl::Status QueryPool::Submit(const std::string& name, Query query) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("csd is stopping");
    if (queue_.size() >= options_.max_waiting) {
      return absl::ResourceExhaustedError(absl::StrCat(
          name, " is refused: csd runs ", running_, " Plan or ExplainVM call(s) and ",
          queue_.size(), " wait (at most ", std::max(1, options_.threads), " at once and ",
          options_.max_waiting, " waiting); try again shortly"));
    }
    queue_.push_back(Waiting{name, std::move(query), absl::Now()});
  }
  wake_.notify_one();
  return absl::OkStatus();
}

void QueryPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Waiting next = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    const absl::Duration waited = absl::Now() - next.since;
    if (waited > options_.max_wait) {
      next.query(absl::ResourceExhaustedError(absl::StrCat(
          next.name, " waited ", absl::FormatDuration(waited), " for one of csd's ",
          std::max(1, options_.threads), " query thread(s), over the ",
          absl::FormatDuration(options_.max_wait), " it may: try again shortly")));
    } else {
      next.query(absl::OkStatus());
    }
    lock.lock();
    --running_;
  }
}

size_t QueryPool::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

size_t QueryPool::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace cosched::server
