// Read-only access to the kernel's pseudo filesystems (procfs, sysfs,
// cgroupfs), so that everything that parses them (topology, discovery,
// forced idle) is tested against literal text and a fake process tree.
#ifndef COSCHED_HOST_PSEUDO_FS_H_
#define COSCHED_HOST_PSEUDO_FS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosched::host {

// Paths are absolute ("/proc/1234/task"). Processes and threads vanish at
// any time: NOT_FOUND is the normal answer for one that has gone (ENOENT
// and ESRCH both map to it). PERMISSION_DENIED when a path may not be
// read; INTERNAL for any other I/O error. Implementations are thread-safe
// for concurrent reads.
class PseudoFs {
 public:
  virtual ~PseudoFs() = default;

  // The whole content of the file at `path`.
  virtual absl::StatusOr<std::string> ReadFile(absl::string_view path) const = 0;

  // The names in directory `path`, without "." and "..", sorted.
  virtual absl::StatusOr<std::vector<std::string>> ListDirectory(
      absl::string_view path) const = 0;

  // The target of the symbolic link at `path` (/proc/<pid>/exe), as
  // readlink(2) gives it: a deleted file's name ends in " (deleted)".
  virtual absl::StatusOr<std::string> ReadLink(absl::string_view path) const = 0;
};

// The machine's own filesystem.
class LocalPseudoFs : public PseudoFs {
 public:
  absl::StatusOr<std::string> ReadFile(absl::string_view path) const override;
  absl::StatusOr<std::vector<std::string>> ListDirectory(
      absl::string_view path) const override;
  absl::StatusOr<std::string> ReadLink(absl::string_view path) const override;
};

}  // namespace cosched::host

#endif  // COSCHED_HOST_PSEUDO_FS_H_
