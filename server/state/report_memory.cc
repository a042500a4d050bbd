#include "server/state/report_memory.h"

#include <utility>

namespace cosched::server {

std::optional<ReportMemory::Seen> ReportMemory::Unchanged(absl::string_view host_id,
                                                         const std::string& content) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reports_.find(host_id);
  if (it == reports_.end() || it->second.content != content) return std::nullopt;
  Seen seen;
  seen.cores = it->second.cores;
  seen.tagged_id = it->second.tagged_id;
  return seen;
}

void ReportMemory::Remember(const std::string& host_id, Seen seen) {
  std::lock_guard<std::mutex> lock(mu_);
  reports_[host_id] = std::move(seen);
}

void ReportMemory::Forget(absl::string_view host_id) {
  std::lock_guard<std::mutex> lock(mu_);
  reports_.erase(host_id);
}

void ReportMemory::ForgetAll() {
  std::lock_guard<std::mutex> lock(mu_);
  reports_.clear();
}

}  // namespace cosched::server
