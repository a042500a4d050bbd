#include "host/testing/sched_trace_fake.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cosched::host {

void FakeSchedTrace::SetStartError(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  start_error_ = std::move(status);
}

void FakeSchedTrace::SetSchedstatsError(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  schedstats_error_ = std::move(status);
}

void FakeSchedTrace::AddPage(int cpu, std::vector<uint8_t> page) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pages_.size() <= static_cast<size_t>(cpu)) pages_.resize(cpu + 1);
  pages_[cpu].push_back(std::move(page));
}

void FakeSchedTrace::SetNowNs(int64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ns_ = now_ns;
}

void FakeSchedTrace::SetUnixOffsetNs(int64_t offset_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  unix_offset_ns_ = offset_ns;
}

bool FakeSchedTrace::started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

bool FakeSchedTrace::stopped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_;
}

bool FakeSchedTrace::schedstats_enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return schedstats_;
}

SchedTraceOptions FakeSchedTrace::options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_;
}

size_t FakeSchedTrace::unread_pages() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& cpu : pages_) n += cpu.size();
  return n;
}

absl::StatusOr<SchedTraceFormat> FakeSchedTrace::Start(const SchedTraceOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!start_error_.ok()) return start_error_;
  if (started_) return absl::FailedPreconditionError("fake trace already started");
  started_ = true;
  options_ = options;
  return format_;
}

absl::StatusOr<size_t> FakeSchedTrace::ReadPage(int cpu, std::span<uint8_t> page) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_ || stopped_) return absl::FailedPreconditionError("fake trace not running");
  if (cpu < 0 || cpu >= format_.num_cpus)
    return absl::InvalidArgumentError(absl::StrCat("no cpu ", cpu));
  if (static_cast<size_t>(cpu) >= pages_.size() || pages_[cpu].empty()) return 0;
  std::vector<uint8_t> next = std::move(pages_[cpu].front());
  pages_[cpu].pop_front();
  const size_t n = std::min(next.size(), page.size());
  std::memcpy(page.data(), next.data(), n);
  return n;
}

int64_t FakeSchedTrace::NowNs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return now_ns_;
}

int64_t FakeSchedTrace::UnixOffsetNs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unix_offset_ns_;
}

void FakeSchedTrace::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = started_;
}

absl::Status FakeSchedTrace::EnableSchedstats() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!schedstats_error_.ok()) return schedstats_error_;
  schedstats_ = true;
  return absl::OkStatus();
}

}  // namespace cosched::host
