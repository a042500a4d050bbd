// A SchedTrace for tests and benchmarks: pages and a clock they set.
#ifndef COSCHED_HOST_TESTING_SCHED_TRACE_FAKE_H_
#define COSCHED_HOST_TESTING_SCHED_TRACE_FAKE_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "host/sched_trace.h"

namespace cosched::host {

// Serves pages given by a test, per CPU, with a clock the test sets.
// Thread-safe (a test thread feeds it while a collector reads).
class FakeSchedTrace : public SchedTrace {
 public:
  explicit FakeSchedTrace(SchedTraceFormat format) : format_(std::move(format)) {}

  // Start fails with `status` while it is not OK.
  void SetStartError(absl::Status status);
  void SetSchedstatsError(absl::Status status);
  void AddPage(int cpu, std::vector<uint8_t> page);
  void SetNowNs(int64_t now_ns);
  void SetUnixOffsetNs(int64_t offset_ns);

  bool started() const;
  bool stopped() const;
  bool schedstats_enabled() const;
  SchedTraceOptions options() const;
  size_t unread_pages() const;

  absl::StatusOr<SchedTraceFormat> Start(const SchedTraceOptions& options) override;
  absl::StatusOr<size_t> ReadPage(int cpu, std::span<uint8_t> page) override;
  int64_t NowNs() const override;
  int64_t UnixOffsetNs() const override;
  void Stop() override;
  absl::Status EnableSchedstats() override;

 private:
  const SchedTraceFormat format_;
  mutable std::mutex mu_;
  absl::Status start_error_;
  absl::Status schedstats_error_;
  std::vector<std::deque<std::vector<uint8_t>>> pages_;
  int64_t now_ns_ = 0;
  int64_t unix_offset_ns_ = 0;
  bool started_ = false;
  bool stopped_ = false;
  bool schedstats_ = false;
  SchedTraceOptions options_;
};

}  // namespace cosched::host

#endif  // COSCHED_HOST_TESTING_SCHED_TRACE_FAKE_H_
