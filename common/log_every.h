// COSCHED_LOG_EVERY_T(severity, seconds): a glog line at most once per
// `seconds` from this call site, the first one at once. glog 0.6's
// LOG_EVERY_T counts from steady_clock's zero, which is the machine's boot:
// on a host up for less than the period it logs nothing at all, and that
// is when cs-agent starts and reports a hazard holding its tagging.
#ifndef COSCHED_COMMON_LOG_EVERY_H_
#define COSCHED_COMMON_LOG_EVERY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>

#include "glog/logging.h"

namespace cosched {

// One call site's last line. Thread-safe: of callers at the same moment,
// one logs.
class LogThrottle {
 public:
  // Whether a line may be logged now (and, if so, records it).
  bool Allow(std::chrono::steady_clock::duration period) {
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    int64_t last = last_.load(std::memory_order_relaxed);
    if (last != kNever && now - last < period.count()) return false;
    return last_.compare_exchange_strong(last, now, std::memory_order_relaxed);
  }

 private:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::min();
  std::atomic<int64_t> last_{kNever};
};

}  // namespace cosched

// A statement, like LOG(): `COSCHED_LOG_EVERY_T(WARNING, 60) << "...";`.
#define COSCHED_LOG_EVERY_T(severity, seconds)                                          \
  if (static ::cosched::LogThrottle cosched_log_throttle;                               \
      !cosched_log_throttle.Allow(std::chrono::duration_cast<                           \
                                  std::chrono::steady_clock::duration>(                 \
          std::chrono::duration<double>(seconds))))                                     \
    {}                                                                                  \
  else                                                                                  \
    LOG(severity)

#endif  // COSCHED_COMMON_LOG_EVERY_H_
