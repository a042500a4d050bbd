// How often a host may Report: csd bounds it itself rather than trusting the
// agent's own pacing (issue #32), so that a broken or hostile agent cannot
// make csd validate, write and sum Reports as fast as it can send them. An
// agent sends at most one Report a second (ServerSessionOptions::
// min_report_gap) and one every report_interval_s otherwise; csd allows
// twice that rate and a burst, and answers a Report beyond it with
// RESOURCE_EXHAUSTED, which the agent does not count as csd failing: its
// next Report, at its interval, carries the same stats windows.
#ifndef COSCHED_SERVER_STATE_REPORT_RATE_LIMIT_H_
#define COSCHED_SERVER_STATE_REPORT_RATE_LIMIT_H_

#include <functional>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cosched::server {

struct ReportRateOptions {
  // Reports a second a host may keep up; 0 or less: no limit.
  double per_second = 2;
  // Reports a host may send at once after a quiet spell.
  int burst = 10;
};

// Thread-safe: a token bucket per host.
class ReportRateLimit {
 public:
  using Options = ReportRateOptions;
  using Clock = std::function<absl::Time()>;

  // `now` defaults to absl::Now.
  explicit ReportRateLimit(Options options = {}, Clock now = nullptr);

  // OK and one Report taken from the host's bucket, or RESOURCE_EXHAUSTED
  // naming the host and the limit.
  absl::Status Admit(absl::string_view host_id);

  void set_options(Options options);
  // Buckets held: at most twice the hosts that reported since the last
  // sweep, or 1024 (a full bucket is the same as none and is swept).
  size_t size() const;

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time at;
  };
  // With mu_ held: the bucket's tokens at `now`.
  double Refilled(const Bucket& bucket, absl::Time now) const;
  // With mu_ held: drops the buckets full again (the same as none), once
  // the table has doubled since the last sweep.
  void MaybeSweep(absl::Time now);

  const Clock now_;
  mutable std::mutex mu_;
  Options options_;  // guarded by mu_
  absl::flat_hash_map<std::string, Bucket> buckets_;  // guarded by mu_
  size_t sweep_at_ = 1024;  // guarded by mu_
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_REPORT_RATE_LIMIT_H_
