// Read-only access to the kernel's pseudo filesystems (sysfs, procfs), so
// that everything that parses them can be tested against literal text.
#ifndef COSCHED_AGENT_HOST_FS_H_
#define COSCHED_AGENT_HOST_FS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosched::agent {

// Implementations are thread-safe for concurrent reads.
class HostFs {
 public:
  virtual ~HostFs() = default;

  // The whole content of the file at absolute `path`. NOT_FOUND when it does
  // not exist, PERMISSION_DENIED when it may not be read, else the I/O error.
  virtual absl::StatusOr<std::string> ReadFile(absl::string_view path) const = 0;

  // The names in directory `path` (without "." and ".."), sorted. NOT_FOUND
  // when it does not exist.
  virtual absl::StatusOr<std::vector<std::string>> ListDirectory(
      absl::string_view path) const = 0;
};

// The machine's own filesystem.
class LocalHostFs : public HostFs {
 public:
  absl::StatusOr<std::string> ReadFile(absl::string_view path) const override;
  absl::StatusOr<std::vector<std::string>> ListDirectory(
      absl::string_view path) const override;
};

// Serves files from a map of absolute path to content; directories are
// implied by the paths. Not thread-safe while being filled.
class FakeHostFs : public HostFs {
 public:
  void SetFile(absl::string_view path, absl::string_view content);
  void RemoveFile(absl::string_view path);

  absl::StatusOr<std::string> ReadFile(absl::string_view path) const override;
  absl::StatusOr<std::vector<std::string>> ListDirectory(
      absl::string_view path) const override;

 private:
  std::map<std::string, std::string, std::less<>> files_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_HOST_FS_H_
