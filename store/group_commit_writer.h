// The part of a Store that both backends share: writes queue up, one writer
// thread takes up to max_batch of them at a time and hands them to the
// backend to commit together (group commit), and a completion thread runs
// each batch's done callbacks and the commit observer in commit order while
// the writer commits the next batch. A backend supplies only how a batch is
// run, committed and numbered (CommitBatch).
#ifndef COSCHED_STORE_GROUP_COMMIT_WRITER_H_
#define COSCHED_STORE_GROUP_COMMIT_WRITER_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "store/store.h"

namespace cosched::store {

// A write function waiting for the writer, and how often it ran (EtcdStore
// runs a function again when another writer committed first).
struct PendingWrite {
  Store::TxnFn fn;
  Store::DoneFn done;
  int attempts = 0;
};

// What the backend made of one batch.
struct BatchOutcome {
  // What each write's done callback gets, in batch order.
  std::vector<absl::Status> results;
  // The hosts whose assignments changed in what was committed: the commit
  // observer is called when there are any.
  std::set<std::string> changed_hosts;
  // The revision the commit observer is given (the store's after the batch).
  int64_t revision = 0;
  // Run on the writer thread once the batch's completion is queued, before
  // the next batch (EtcdStore: its watch may then deliver what other
  // replicas committed after it, behind it).
  std::function<void()> queued;
};

// Thread-safe.
class GroupCommitWriter {
 public:
  // Runs and commits `batch`, on the writer thread.
  using CommitBatch = std::function<BatchOutcome(std::vector<PendingWrite>& batch)>;

  // `closing_error` is the message a write submitted while the writer stops
  // fails with (UNAVAILABLE). Starts both threads.
  GroupCommitWriter(int max_batch, std::string closing_error, CommitBatch commit);
  // Stop(), when not called before.
  ~GroupCommitWriter();

  // Commits every write already submitted and those their callbacks chain,
  // then stops both threads. Writes submitted meanwhile from other threads
  // fail with UNAVAILABLE. Idempotent.
  void Stop();

  // Store::Write.
  void Submit(Store::TxnFn fn, Store::DoneFn done);
  // Store::SetCommitObserver.
  void SetCommitObserver(Store::CommitObserver observer);
  // Runs `fn` on the completion thread after every completion queued so
  // far (EtcdStore: other replicas' changes, in revision order with this
  // store's own commits).
  void QueueCompletion(std::function<void()> fn);

 private:
  void WriterLoop();
  void CompletionLoop();

  const size_t max_batch_;
  const std::string closing_error_;
  const CommitBatch commit_;

  std::mutex mu_;
  std::condition_variable queue_cv_;
  std::deque<PendingWrite> queue_;  // guarded by mu_
  bool stopping_ = false;           // guarded by mu_
  Store::CommitObserver observer_;  // guarded by mu_
  // Batches' answers and observer calls, in commit order (guarded by mu_);
  // pending counts those queued or running, so that a stopping writer waits
  // for any write they chain.
  std::condition_variable completion_cv_;
  std::deque<std::function<void()>> completions_;
  int completions_pending_ = 0;
  bool completer_stopping_ = false;

  std::thread completer_;
  std::thread writer_;
};

}  // namespace cosched::store

#endif  // COSCHED_STORE_GROUP_COMMIT_WRITER_H_
