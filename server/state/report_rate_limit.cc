#include "server/state/report_rate_limit.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cosched::server {

ReportRateLimit::ReportRateLimit(Options options, Clock now)
    : now_(now ? std::move(now) : [] { return absl::Now(); }), options_(options) {}

void ReportRateLimit::set_options(Options options) {
  std::lock_guard<std::mutex> lock(mu_);
  options_ = options;
}

double ReportRateLimit::Refilled(const Bucket& bucket, absl::Time now) const {
  const double elapsed = absl::ToDoubleSeconds(std::max(absl::ZeroDuration(), now - bucket.at));
  return std::min<double>(options_.burst, bucket.tokens + elapsed * options_.per_second);
}

absl::Status ReportRateLimit::Admit(absl::string_view host_id) {
  const absl::Time now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.per_second <= 0) return absl::OkStatus();
  MaybeSweep(now);
  auto [it, inserted] = buckets_.try_emplace(host_id, Bucket{static_cast<double>(options_.burst), now});
  Bucket& bucket = it->second;
  bucket.tokens = Refilled(bucket, now);
  bucket.at = now;
  if (bucket.tokens >= 1) {
    bucket.tokens -= 1;
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "host '", host_id, "' reports faster than csd allows (", options_.per_second,
      " Reports a second, bursts of ", options_.burst,
      "): this Report is refused and changes nothing; its stats windows go with the next"));
}

void ReportRateLimit::MaybeSweep(absl::Time now) {
  if (buckets_.size() < sweep_at_) return;
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    auto here = it++;
    if (Refilled(here->second, now) >= options_.burst) buckets_.erase(here);
  }
  sweep_at_ = std::max<size_t>(1024, 2 * buckets_.size());
}

size_t ReportRateLimit::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buckets_.size();
}

}  // namespace cosched::server
