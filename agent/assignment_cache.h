// The assignments csd streamed to this host, kept across agent restarts so
// that the agent enforces the last known state while csd is away and
// resumes the stream where it left off.
#ifndef COSCHED_AGENT_ASSIGNMENT_CACHE_H_
#define COSCHED_AGENT_ASSIGNMENT_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "host/state_fs.h"
#include "cosched/v1/agent.pb.h"
#include "cosched/v1/types.pb.h"

namespace cosched::agent {

// VM id -> its assignment.
using AssignmentMap = std::map<std::string, v1::Assignment>;

// Thread-safe. Every accepted change is written to the state file before
// readers see it; when that write fails (a full or unwritable state dir)
// the change is enforced from memory all the same, and saved with the next
// message that can be: refusing csd's changes would leave a VM csd moved to
// a tighter group in its old one, and a restart from the older file only
// makes csd send the rest again.
class AssignmentCache {
 public:
  // The state file's name inside the agent's state dir.
  static constexpr char kStateFileName[] = "assignments.pb";

  // `state_file`: where the assignments are kept; empty keeps them in
  // memory only. `fs` (null: LocalStateFs) is where it is read and written.
  explicit AssignmentCache(std::string state_file,
                           std::shared_ptr<host::StateFs> fs = nullptr);

  // Reads the state file, replacing what the cache holds. OK (and empty)
  // when the file does not exist; DATA_LOSS naming the file when it is
  // corrupt; the I/O error otherwise.
  absl::Status Load();

  // What LoadOrSetAside did with a state file it could not use.
  struct SetAside {
    // Why it was not used: DATA_LOSS (corrupt) or the read error.
    absl::Status problem;
    // Where the file is now; empty when it could not be moved, and then
    // move_error says why.
    std::string moved_to;
    absl::Status move_error;
    // "corrupt" or "unreadable".
    std::string reason;
  };
  // As Load(), but a state file that is corrupt or cannot be read is moved
  // aside to `<state file>.<reason>-<UTC time of now>` (kept for a person to
  // inspect) and the cache stays empty. An agent that exits instead loops
  // under Restart=always, and every VM started meanwhile runs untagged; an
  // empty cache keeps every VM on a fail-closed cookie of its own until csd
  // resends its state, since revision 0 asks csd for a full snapshot.
  // nullopt when the file was loaded or does not exist.
  std::optional<SetAside> LoadOrSetAside(absl::Time now);

  // Applies one message of the WatchAssignments stream: a SNAPSHOT replaces
  // everything, a DELTA upserts and removes. INVALID_ARGUMENT for a message
  // of unknown kind or with an invalid VM id; FAILED_PRECONDITION for a
  // delta older than the cache (a snapshot from behind is followed: csd's
  // store was restored). On error nothing changes. A state file that cannot
  // be written is not an error here: see save_error().
  absl::Status Apply(const v1::WatchAssignmentsResponse& update);

  // Why the last write of the state file failed; OK once one succeeded
  // (or with no state file). The file then holds saved_revision().
  absl::Status save_error() const;
  int64_t saved_revision() const;

  // The revision of the last applied message; 0 before any.
  int64_t revision() const;
  // Messages applied since construction, by kind.
  int snapshots_applied() const;
  int deltas_applied() const;
  AssignmentMap assignments() const;
  std::optional<v1::Assignment> Find(absl::string_view vm_id) const;

  // Serialization of the state file (exposed for tests): a header line with
  // a format version, the payload's length and checksum, then a
  // WatchAssignmentsResponse of kind SNAPSHOT.
  static std::string Encode(int64_t revision, const AssignmentMap& assignments);
  // DATA_LOSS naming `source` when `content` is not a valid state file.
  static absl::Status Decode(absl::string_view content, absl::string_view source,
                             int64_t* revision, AssignmentMap* assignments);

 private:
  const std::string state_file_;
  const std::shared_ptr<host::StateFs> fs_;
  mutable std::mutex mu_;
  int64_t revision_ = 0;
  int64_t saved_revision_ = 0;
  absl::Status save_error_;
  int snapshots_applied_ = 0;
  int deltas_applied_ = 0;
  AssignmentMap assignments_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_ASSIGNMENT_CACHE_H_
