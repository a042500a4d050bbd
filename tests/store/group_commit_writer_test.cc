// The group-commit writer both stores share, over a backend that records
// what it was given: batching, answer and observer order, draining on stop.
// The backends' own behaviour through it is store_contract_writer_test's.
#include "store/group_commit_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"

namespace cosched::store {
namespace {

using ::testing::ElementsAre;

// A backend whose batches commit; the n-th write (from 0) answers
// failures[n] when there is one, else OK and changes "host-<n>". It does
// not run the write functions: what they would do is not the writer's
// business. The first batch waits for `release`, so that writes queue up
// behind it.
class RecordingBackend {
 public:
  GroupCommitWriter::CommitBatch Commit() {
    return [this](std::vector<PendingWrite>& batch) {
      if (!first_done_) {
        first_done_ = true;
        entered.Notify();
        release.WaitForNotification();
      }
      BatchOutcome outcome;
      for (size_t i = 0; i < batch.size(); ++i) {
        auto failure = failures.find(written_);
        outcome.results.push_back(failure == failures.end() ? absl::OkStatus() : failure->second);
        if (outcome.results.back().ok()) {
          outcome.changed_hosts.insert("host-" + std::to_string(written_));
          ++committed_;
        }
        ++written_;
      }
      outcome.revision = committed_;
      {
        std::lock_guard<std::mutex> lock(mu);
        batch_sizes.push_back(batch.size());
      }
      outcome.queued = [this] {
        {
          std::lock_guard<std::mutex> lock(mu);
          events.push_back("queued " + std::to_string(committed_));
        }
        if (!queued_once.HasBeenNotified()) queued_once.Notify();
      };
      return outcome;
    };
  }
  void Note(std::string event) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(std::move(event));
  }

  std::map<int, absl::Status> failures;  // set before the first write
  absl::Notification entered;            // the first batch began
  absl::Notification release;            // the first batch may go on
  absl::Notification queued_once;        // a batch's completion was queued
  std::mutex mu;
  std::vector<size_t> batch_sizes;
  std::vector<std::string> events;

 private:
  bool first_done_ = false;
  int written_ = 0;
  int committed_ = 0;
};

// Never run by RecordingBackend.
Store::TxnFn AWrite() {
  return [](Transaction&) { return absl::InternalError("the backend ran a write function"); };
}

TEST(GroupCommitWriterTest, BatchesWhatQueuedUpToMaxBatchAndAnswersInOrder) {
  RecordingBackend backend;
  backend.failures[2] = absl::InvalidArgumentError("bad");
  GroupCommitWriter writer(/*max_batch=*/3, "closing", backend.Commit());
  writer.SetCommitObserver([&](const std::vector<std::string>& hosts, int64_t revision) {
    backend.Note("observed " + std::to_string(hosts.size()) + " at " + std::to_string(revision));
  });
  std::vector<std::promise<absl::Status>> answers(6);
  for (int i = 0; i < 6; ++i) {
    writer.Submit(AWrite(), [&, i](absl::Status status) {
      backend.Note("done " + std::to_string(i));
      answers[i].set_value(status);
    });
    // The rest queue up while the writer holds the first.
    if (i == 0) backend.entered.WaitForNotification();
  }
  backend.release.Notify();
  for (int i = 0; i < 6; ++i) {
    absl::Status status = answers[i].get_future().get();
    EXPECT_EQ(status.code(), i == 2 ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kOk)
        << i;
  }
  writer.Stop();
  // The first write alone, then the rest three at a time at most.
  EXPECT_THAT(backend.batch_sizes, ElementsAre(1, 3, 2));
  // Each batch's answers, then its observer; a batch's "queued" hook runs
  // once its completion is queued, which may be before or after it ran.
  std::vector<std::string> completions;
  for (const std::string& event : backend.events) {
    if (event.rfind("queued", 0) != 0) completions.push_back(event);
  }
  EXPECT_THAT(completions, ElementsAre("done 0", "observed 1 at 1", "done 1", "done 2", "done 3",
                                       "observed 2 at 3", "done 4", "done 5", "observed 2 at 5"));
}

TEST(GroupCommitWriterTest, StopCommitsWritesThatAnswersChain) {
  RecordingBackend backend;
  backend.release.Notify();
  GroupCommitWriter writer(/*max_batch=*/8, "closing", backend.Commit());
  std::vector<absl::Status> answers;
  writer.Submit(AWrite(), [&](absl::Status first) {
    answers.push_back(first);
    // Chained from a done callback while Stop drains: still committed.
    writer.Submit(AWrite(), [&](absl::Status second) { answers.push_back(second); });
  });
  writer.Stop();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_TRUE(answers[0].ok());
  EXPECT_TRUE(answers[1].ok());
}

TEST(GroupCommitWriterTest, WritesAfterStopFailUnavailableWithTheBackendsMessage) {
  RecordingBackend backend;
  backend.release.Notify();
  GroupCommitWriter writer(/*max_batch=*/8, "store at /x is closing", backend.Commit());
  writer.Stop();
  absl::Status answer;
  writer.Submit(AWrite(), [&](absl::Status status) { answer = status; });
  EXPECT_EQ(answer.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(answer.message(), "store at /x is closing");
  EXPECT_TRUE(backend.batch_sizes.empty());
}

TEST(GroupCommitWriterTest, QueuedCompletionsRunBehindEarlierBatchesAnswers) {
  RecordingBackend backend;
  GroupCommitWriter writer(/*max_batch=*/8, "closing", backend.Commit());
  absl::Notification answered;
  writer.Submit(AWrite(), [&](absl::Status) { backend.Note("done"); });
  backend.release.Notify();
  // The writer's "queued" hook runs once the batch's completion is queued:
  // what is queued from there on runs after its answers (EtcdStore's
  // external changes), whether or not they ran yet.
  backend.queued_once.WaitForNotification();
  writer.QueueCompletion([&] {
    backend.Note("external");
    answered.Notify();
  });
  answered.WaitForNotification();
  writer.Stop();
  std::vector<std::string> completions;
  for (const std::string& event : backend.events) {
    if (event.rfind("queued", 0) != 0) completions.push_back(event);
  }
  EXPECT_THAT(completions, ElementsAre("done", "external"));
}

}  // namespace
}  // namespace cosched::store
