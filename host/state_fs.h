// The file operations of the agent's own state dir (/var/lib/cs-agent),
// behind an interface so that what the agent does when the dir or its
// state file is unusable (corrupt, unreadable, cannot be moved aside) is
// tested without a broken disk, and as root, whom permission bits do not
// stop.
#ifndef COSCHED_HOST_STATE_FS_H_
#define COSCHED_HOST_STATE_FS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosched::host {

// Implementations are thread-safe.
class StateFs {
 public:
  virtual ~StateFs() = default;

  // Creates directory `path` (mode 0700, with its parents) when missing.
  // FAILED_PRECONDITION when it exists and is not a directory, else the
  // error naming the path.
  virtual absl::Status EnsureDirectory(const std::string& path) = 0;
  // The whole file. NOT_FOUND when it (or a directory on its path) does not
  // exist, PERMISSION_DENIED when it may not be read, else UNAVAILABLE.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) const = 0;
  // Replaces `path` so that after a crash it holds the old or the new
  // content (common/file_io.h).
  virtual absl::Status WriteFileAtomically(const std::string& path,
                                           absl::string_view content) = 0;
  // rename(2): `to` is replaced if it exists. Errors name both paths.
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
};

// The machine's own filesystem.
class LocalStateFs : public StateFs {
 public:
  absl::Status EnsureDirectory(const std::string& path) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) const override;
  absl::Status WriteFileAtomically(const std::string& path,
                                   absl::string_view content) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
};

}  // namespace cosched::host

#endif  // COSCHED_HOST_STATE_FS_H_
