// QueryPool (issue #32 item 9): Plan and ExplainVM run on a bounded pool,
// never more at once than its threads, refused past its queue, and not run
// at all once they waited too long.
#include "server/api/query_pool.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;
using testing::Eventually;

// A gate the running queries wait at.
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return open_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(QueryPoolTest, RunsAtMostItsThreadsAtOnceAndRefusesPastItsQueue) {
  QueryPool pool({.threads = 1, .max_waiting = 2, .max_wait = absl::Seconds(60)});
  Gate gate;
  std::atomic<int> ran{0};
  std::atomic<int> at_once{0};
  std::atomic<int> most_at_once{0};
  auto query = [&](absl::Status expired) {
    EXPECT_OK(expired);
    const int now = ++at_once;
    int most = most_at_once.load();
    while (now > most && !most_at_once.compare_exchange_weak(most, now)) {
    }
    gate.Wait();
    --at_once;
    ++ran;
  };
  ASSERT_OK(pool.Submit("Plan", query));
  ASSERT_TRUE(Eventually([&] { return pool.running() == 1; }));
  ASSERT_OK(pool.Submit("Plan", query));
  ASSERT_OK(pool.Submit("ExplainVM", query));
  absl::Status refused = pool.Submit("Plan", query);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("Plan is refused"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("at most 1 at once and 2 waiting"));
  gate.Open();
  EXPECT_TRUE(Eventually([&] { return ran.load() == 3; }));
  EXPECT_EQ(most_at_once.load(), 1);
}

TEST(QueryPoolTest, AQueryThatWaitedTooLongIsAnsweredWithoutRunning) {
  QueryPool pool({.threads = 1, .max_waiting = 4, .max_wait = absl::Milliseconds(50)});
  Gate gate;
  ASSERT_OK(pool.Submit("Plan", [&](absl::Status) { gate.Wait(); }));
  ASSERT_TRUE(Eventually([&] { return pool.running() == 1; }));
  std::mutex mu;
  absl::Status answered = absl::UnknownError("not yet");
  ASSERT_OK(pool.Submit("ExplainVM", [&](absl::Status expired) {
    std::lock_guard<std::mutex> lock(mu);
    answered = expired;
  }));
  absl::SleepFor(absl::Milliseconds(200));
  gate.Open();
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return answered.code() != absl::StatusCode::kUnknown;
  }));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(answered.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(answered.message()), HasSubstr("ExplainVM waited"));
}

TEST(QueryPoolTest, StopAnswersTheWaitingAndRefusesLaterQueries) {
  QueryPool pool({.threads = 1, .max_waiting = 4, .max_wait = absl::Seconds(60)});
  Gate gate;
  ASSERT_OK(pool.Submit("Plan", [&](absl::Status) { gate.Wait(); }));
  ASSERT_TRUE(Eventually([&] { return pool.running() == 1; }));
  absl::Status waiting_answer;
  ASSERT_OK(pool.Submit("Plan", [&](absl::Status expired) { waiting_answer = expired; }));
  std::thread stopper([&] { pool.Stop(); });
  ASSERT_TRUE(Eventually([&] { return pool.waiting() == 0; }));
  gate.Open();
  stopper.join();
  EXPECT_EQ(waiting_answer.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(pool.Submit("Plan", [](absl::Status) {}).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace cosched::server
