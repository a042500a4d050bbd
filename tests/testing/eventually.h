// Waiting for something that happens on another thread (an agent's pass, a
// stream message), without a fixed sleep that is too long or too short.
#ifndef COSCHED_TESTS_TESTING_EVENTUALLY_H_
#define COSCHED_TESTS_TESTING_EVENTUALLY_H_

#include <chrono>
#include <thread>

namespace cosched::testing {

// Polls `condition` every `poll` until it holds or `timeout` has passed;
// returns its last value.
template <typename Condition>
bool Eventually(Condition condition,
                std::chrono::milliseconds timeout = std::chrono::seconds(10),
                std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(poll);
  }
  return condition();
}

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_EVENTUALLY_H_
