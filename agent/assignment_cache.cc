#include "agent/assignment_cache.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/log_every.h"
#include "common/validation.h"
#include "glog/logging.h"

namespace cosched::agent {
namespace {

constexpr absl::string_view kMagic = "cs-agent-assignments";
constexpr int kFormatVersion = 1;

// FNV-1a: catches bit rot and truncation, which protobuf parsing alone may
// not (many byte strings are valid protobuf).
uint64_t Checksum(absl::string_view data) {
  uint64_t hash = 14695981039346656037ULL;
  for (unsigned char c : data) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return hash;
}

absl::Status Corrupt(absl::string_view source, absl::string_view why) {
  return absl::DataLossError(absl::StrCat(
      "assignment state file ", source, " is corrupt (", why, ")"));
}

}  // namespace

AssignmentCache::AssignmentCache(std::string state_file,
                                 std::shared_ptr<host::StateFs> fs)
    : state_file_(std::move(state_file)),
      fs_(fs != nullptr ? std::move(fs) : std::make_shared<host::LocalStateFs>()) {}

std::string AssignmentCache::Encode(int64_t revision,
                                    const AssignmentMap& assignments) {
  v1::WatchAssignmentsResponse snapshot;
  snapshot.set_kind(v1::WatchAssignmentsResponse::KIND_SNAPSHOT);
  snapshot.set_revision(revision);
  for (const auto& [vm_id, assignment] : assignments) {
    *snapshot.add_assignments() = assignment;
  }
  std::string payload;
  snapshot.SerializeToString(&payload);
  return absl::StrCat(kMagic, " ", kFormatVersion, " ", payload.size(), " ",
                      absl::Hex(Checksum(payload)), "\n", payload);
}

absl::Status AssignmentCache::Decode(absl::string_view content,
                                     absl::string_view source,
                                     int64_t* revision,
                                     AssignmentMap* assignments) {
  size_t newline = content.find('\n');
  if (newline == absl::string_view::npos) return Corrupt(source, "no header");
  std::vector<absl::string_view> header =
      absl::StrSplit(content.substr(0, newline), ' ');
  absl::string_view payload = content.substr(newline + 1);
  int version;
  size_t length;
  uint64_t checksum;
  if (header.size() != 4 || header[0] != kMagic ||
      !absl::SimpleAtoi(header[1], &version) ||
      !absl::SimpleAtoi(header[2], &length) ||
      !absl::SimpleHexAtoi(header[3], &checksum)) {
    return Corrupt(source, "bad header");
  }
  if (version != kFormatVersion) {
    return Corrupt(source, absl::StrCat("unknown format version ", version));
  }
  if (payload.size() != length) {
    return Corrupt(source, absl::StrCat("payload is ", payload.size(),
                                        " bytes, header says ", length));
  }
  if (Checksum(payload) != checksum) return Corrupt(source, "checksum mismatch");
  v1::WatchAssignmentsResponse snapshot;
  if (!snapshot.ParseFromArray(payload.data(), static_cast<int>(payload.size())) ||
      snapshot.kind() != v1::WatchAssignmentsResponse::KIND_SNAPSHOT) {
    return Corrupt(source, "not a cosched.v1.WatchAssignmentsResponse snapshot");
  }
  AssignmentMap loaded;
  for (const v1::Assignment& assignment : snapshot.assignments()) {
    if (!loaded.emplace(assignment.vm_id(), assignment).second) {
      return Corrupt(source, absl::StrCat("VM ", assignment.vm_id(),
                                          " appears twice"));
    }
  }
  *revision = snapshot.revision();
  *assignments = std::move(loaded);
  return absl::OkStatus();
}

absl::Status AssignmentCache::Load() {
  if (state_file_.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> content = fs_->ReadFile(state_file_);
  if (absl::IsNotFound(content.status())) return absl::OkStatus();
  if (!content.ok()) return content.status();
  int64_t revision = 0;
  AssignmentMap assignments;
  absl::Status decoded =
      Decode(*content, state_file_, &revision, &assignments);
  if (!decoded.ok()) return decoded;
  std::lock_guard<std::mutex> lock(mu_);
  revision_ = revision;
  saved_revision_ = revision;
  assignments_ = std::move(assignments);
  return absl::OkStatus();
}

std::optional<AssignmentCache::SetAside> AssignmentCache::LoadOrSetAside(
    absl::Time now) {
  absl::Status loaded = Load();
  if (loaded.ok()) return std::nullopt;
  SetAside aside;
  aside.problem = loaded;
  aside.reason = absl::IsDataLoss(loaded) ? "corrupt" : "unreadable";
  // Microseconds, so that two restarts within a second keep both files.
  const std::string to = absl::StrCat(
      state_file_, ".", aside.reason, "-",
      absl::FormatTime("%Y%m%dT%H%M%E6SZ", now, absl::UTCTimeZone()));
  aside.move_error = fs_->Rename(state_file_, to);
  if (aside.move_error.ok()) aside.moved_to = to;
  return aside;
}

absl::Status AssignmentCache::Apply(const v1::WatchAssignmentsResponse& update) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool snapshot =
      update.kind() == v1::WatchAssignmentsResponse::KIND_SNAPSHOT;
  if (update.revision() < revision_) {
    if (!snapshot) {
      return absl::FailedPreconditionError(absl::StrCat(
          "assignment revision went back from ", revision_, " to ",
          update.revision(), "; ignoring the message"));
    }
    // csd is the source of truth: a snapshot from behind means its store
    // was restored or replaced. Follow it rather than enforce stale groups
    // forever, and say so loudly.
    LOG(WARNING) << "csd sent a snapshot at revision " << update.revision()
                 << ", behind this agent's " << revision_
                 << ": csd's store was restored or replaced; following it";
  }
  AssignmentMap next;
  switch (update.kind()) {
    case v1::WatchAssignmentsResponse::KIND_SNAPSHOT:
      break;
    case v1::WatchAssignmentsResponse::KIND_DELTA:
      next = assignments_;
      for (const std::string& vm_id : update.removed_vm_ids()) next.erase(vm_id);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "assignment message of unknown kind ", update.kind(), " at revision ",
          update.revision()));
  }
  for (const v1::Assignment& assignment : update.assignments()) {
    absl::Status valid = ValidateId("assignments.vm_id", assignment.vm_id());
    if (!valid.ok()) return valid;
    next[assignment.vm_id()] = assignment;
  }
  if (!state_file_.empty()) {
    absl::Status written =
        fs_->WriteFileAtomically(state_file_, Encode(update.revision(), next));
    if (written.ok()) {
      saved_revision_ = update.revision();
    } else {
      COSCHED_LOG_EVERY_T(ERROR, 60) << "cannot save assignments to " << state_file_ << ": "
                             << written << "; enforcing revision " << update.revision()
                             << " from memory (a restart before the next save resumes "
                             << "from revision " << saved_revision_
                             << " and csd sends the rest again)";
    }
    save_error_ = written;
  }
  revision_ = update.revision();
  assignments_ = std::move(next);
  ++(snapshot ? snapshots_applied_ : deltas_applied_);
  return absl::OkStatus();
}

absl::Status AssignmentCache::save_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return save_error_;
}

int64_t AssignmentCache::saved_revision() const {
  std::lock_guard<std::mutex> lock(mu_);
  return saved_revision_;
}

int AssignmentCache::snapshots_applied() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshots_applied_;
}

int AssignmentCache::deltas_applied() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deltas_applied_;
}

int64_t AssignmentCache::revision() const {
  std::lock_guard<std::mutex> lock(mu_);
  return revision_;
}

AssignmentMap AssignmentCache::assignments() const {
  std::lock_guard<std::mutex> lock(mu_);
  return assignments_;
}

std::optional<v1::Assignment> AssignmentCache::Find(
    absl::string_view vm_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = assignments_.find(std::string(vm_id));
  if (it == assignments_.end()) return std::nullopt;
  return it->second;
}

}  // namespace cosched::agent
