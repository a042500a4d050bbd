// What csd remembers of each host's last committed Report, so that a Report
// that says what the last one said (times and stats aside) writes nothing.
#ifndef COSCHED_SERVER_STATE_REPORT_MEMORY_H_
#define COSCHED_SERVER_STATE_REPORT_MEMORY_H_

#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace cosched::server {

// Thread-safe.
class ReportMemory {
 public:
  struct Seen {
    std::string content;  // Reports::ReportContent
    int cores = 0;        // of the topology it was checked against
    // Reported vm_id -> the id it is tagged under, where they differ: where
    // an unchanged Report's stats windows go.
    absl::flat_hash_map<std::string, std::string> tagged_id;
  };

  // What is remembered of the host's last Report when `content` is what it
  // reported then (without the content: nobody needs a copy); nullopt
  // when something changed or nothing is remembered.
  std::optional<Seen> Unchanged(absl::string_view host_id, const std::string& content) const;
  void Remember(const std::string& host_id, Seen seen);
  // The host's next Report is written whole: its topology changed, it was
  // removed, or a VM it reports was tagged or untagged (whose id its stats
  // go under).
  void Forget(absl::string_view host_id);
  // Every host's next Report is written whole (another replica's changes
  // could not be followed one by one).
  void ForgetAll();

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, Seen> reports_;  // guarded by mu_
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_REPORT_MEMORY_H_
