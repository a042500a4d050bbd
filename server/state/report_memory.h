// What csd remembers of each host's last written Report, so that a Report
// that says what the last one said (times and stats aside) writes nothing,
// and of what its later Reports said of enforcement alone, held in memory
// until it is written (Reports::ApplyReport).
#ifndef COSCHED_SERVER_STATE_REPORT_MEMORY_H_
#define COSCHED_SERVER_STATE_REPORT_MEMORY_H_

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cosched/v1/agent.pb.h"

namespace cosched::server {

// A SHA-256 of what a Report says (Reports::ReportContent, ReportState):
// 32 bytes a host instead of the few KiB the content of 50 VMs takes, and
// compared for equality only. A host's agent could make two of its own
// Reports collide only to keep csd from writing what it reports of itself,
// which it can do by not reporting it.
using ReportDigest = std::array<unsigned char, 32>;

// Thread-safe.
class ReportMemory {
 public:
  struct Seen {
    ReportDigest content;  // Reports::ReportContent
    ReportDigest state;    // Reports::ReportState
    int cores = 0;        // of the topology it was checked against
    // Reported vm_id -> the id it is tagged under, where they differ: where
    // an unchanged Report's stats windows go.
    absl::flat_hash_map<std::string, std::string> tagged_id;
    // Set by ReportMemory: changes with every change of this entry.
    uint64_t version = 0;
  };

  // What to do with a Report (Judge).
  enum class Verdict {
    kWrite,      // something written changed, or a held state is due
    kUnchanged,  // nothing new: only its time and stats windows
    kHold,       // only its state changed: held here (Held*), not written
  };
  struct Judged {
    Verdict verdict = Verdict::kWrite;
    // As remembered of the last written Report, when one is (any verdict):
    // its Seen's version (0: none is, and a write must look at every VM of
    // the host), cores and tagged ids.
    uint64_t version = 0;
    int cores = 0;
    absl::flat_hash_map<std::string, std::string> tagged_id;
  };

  // Judges `report` of the host, whose ReportContent is `content` and
  // ReportState `state`, at `now`: kWrite when the content is not the last
  // written one's (or nothing is remembered); kUnchanged when the state is
  // the one written or held; kHold when the state alone is new, which is
  // then held with the report's VMs (their report_time set to `now`). A
  // held state is due (kWrite) once `hold` has passed since the host's
  // first state that was not written; a `hold` of zero holds nothing.
  Judged Judge(const v1::ReportRequest& report, const ReportDigest& content,
               const ReportDigest& state, absl::Time now, absl::Duration hold);
  // A Report of the host was written: its content and state; what was held
  // is in it. `judged_version`, when not 0, is the Judged::version the
  // write started from (it looked only at the VMs whose observations
  // changed, and `seen.tagged_id` is that Seen's updated): when that entry
  // changed or went meanwhile (a tag, an untag, Forget), nothing is
  // remembered, so that the host's next Report is written whole.
  void Remember(const std::string& host_id, Seen seen, uint64_t judged_version = 0);
  // The host's next Report is written whole: its topology changed, or
  // another replica tagged or untagged a VM it reports. What is held
  // stays to be shown until then.
  void Forget(absl::string_view host_id);
  // VM `tagged_id`, which the host reports as `reported_id`, was tagged
  // anew: its stats go under `tagged_id` from the host's next Report on.
  void Tagged(absl::string_view host_id, const std::string& reported_id,
              const std::string& tagged_id);
  // VM `tagged_id` was untagged: the host's stats of it go under the id
  // it reports.
  void Untagged(absl::string_view host_id, const std::string& tagged_id);
  // The host was removed: nothing of it is kept.
  void Remove(absl::string_view host_id);
  // Every host's next Report is written whole (another replica's changes
  // could not be followed one by one).
  void ForgetAll();

  // The enforcement the host's agent reported for the VM reported under
  // `vm_id` or with that UUID, when it is held here (newer than what the
  // store has); nullopt otherwise.
  std::optional<v1::VMEnforcement> HeldEnforcement(absl::string_view host_id,
                                                   absl::string_view vm_id) const;
  // Hosts with a state held (cosched_csd_held_report_hosts).
  size_t HeldHosts() const;

 private:
  struct Held {
    ReportDigest state;
    absl::Time since;     // of the first state not written
    absl::Time reported;  // of the Report held: each held VM's report_time
    // What HeldEnforcement answers: for each VM of the Report its id,
    // UUID and serialized enforcement (without report_time), each
    // length-prefixed, one after another. One string a host: held copies
    // of every VM's VMEnforcement took about twice the memory.
    std::string vms;
  };

  mutable std::mutex mu_;
  uint64_t versions_ = 0;                            // guarded by mu_
  absl::flat_hash_map<std::string, Seen> reports_;  // guarded by mu_
  absl::flat_hash_map<std::string, Held> held_;     // guarded by mu_
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_REPORT_MEMORY_H_
