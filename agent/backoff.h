// Reconnect delays: exponential growth with full jitter, so that many agents
// cut off at once do not come back in lockstep.
#ifndef COSCHED_AGENT_BACKOFF_H_
#define COSCHED_AGENT_BACKOFF_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

namespace cosched::agent {

// Not thread-safe.
class JitteredBackoff {
 public:
  JitteredBackoff(std::chrono::milliseconds initial, std::chrono::milliseconds max,
                  uint64_t seed = std::random_device{}())
      : initial_(std::max<std::chrono::milliseconds::rep>(initial.count(), 1)),
        max_(std::max(max.count(), initial_)),
        rng_(seed) {}

  // A delay drawn uniformly from [0, min(max, initial * 2^failures)];
  // each call counts one more failure.
  std::chrono::milliseconds NextDelay() {
    int64_t ceiling = max_;
    if (failures_ < 40) ceiling = std::min<int64_t>(max_, initial_ << failures_);
    ++failures_;
    std::uniform_int_distribution<int64_t> pick(0, ceiling);
    return std::chrono::milliseconds(pick(rng_));
  }

  // After a success, the next failure starts again from `initial`.
  void Reset() { failures_ = 0; }
  int failures() const { return failures_; }

 private:
  const int64_t initial_;
  const int64_t max_;
  int failures_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_BACKOFF_H_
