// The settings of csd.yaml that the desired state reads on every call and a
// reload may change while calls read them.
#ifndef COSCHED_SERVER_STATE_STATE_SETTINGS_H_
#define COSCHED_SERVER_STATE_STATE_SETTINGS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/time/time.h"
#include "server/state/host_enablement.h"

namespace cosched::server {

// Thread-safe.
class StateSettings {
 public:
  // csd.yaml `enforce` (host_enablement.h): what Register and Report
  // answer each host, what Place takes a host that needs no cookies for,
  // and what GetHost shows. Default always.
  void set_enforce_policy(EnforcePolicy policy) {
    auto next = std::make_shared<const EnforcePolicy>(std::move(policy));
    std::lock_guard<std::mutex> lock(mu_);
    enforce_ = std::move(next);
  }
  EnforcePolicy enforce_policy() const {
    std::lock_guard<std::mutex> lock(mu_);
    return *enforce_;
  }

  // Place chooses only hosts that are connected or reported within this
  // long (default 60 s: six report intervals).
  void set_host_stale_after(absl::Duration d) {
    host_stale_after_ns_ = absl::ToInt64Nanoseconds(d);
  }
  absl::Duration host_stale_after() const {
    return absl::Nanoseconds(host_stale_after_ns_.load());
  }

  // csd.yaml enforcement_write_interval_s (Reports::ReportState): how long
  // a Report's change of enforcement alone is held in memory before the
  // host's next Report writes it. Zero writes every change; infinite:
  // only with a change of what the host runs. Default 60 s.
  void set_enforcement_write_interval(absl::Duration d) {
    enforcement_write_interval_ns_ = absl::ToInt64Nanoseconds(d);
  }
  absl::Duration enforcement_write_interval() const {
    return absl::Nanoseconds(enforcement_write_interval_ns_.load());
  }

  // csd.yaml tag_from_metadata (metadata_tag.h): Reports tag the VMs
  // nobody tagged from their domain metadata. Default off.
  void set_tag_from_metadata(bool on) { tag_from_metadata_ = on; }
  bool tag_from_metadata() const { return tag_from_metadata_.load(); }

 private:
  std::atomic<int64_t> host_stale_after_ns_{absl::ToInt64Nanoseconds(absl::Seconds(60))};
  std::atomic<int64_t> enforcement_write_interval_ns_{
      absl::ToInt64Nanoseconds(absl::Seconds(60))};
  std::atomic<bool> tag_from_metadata_{false};
  mutable std::mutex mu_;
  std::shared_ptr<const EnforcePolicy> enforce_ = std::make_shared<const EnforcePolicy>();
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_STATE_SETTINGS_H_
