// Read access to /proc, behind an interface so that discovery can be tested
// on a fake process tree.
#ifndef COSCHED_DISCOVERY_PROC_FS_H_
#define COSCHED_DISCOVERY_PROC_FS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosched::discovery {

// Paths are relative to the root of procfs: "" is the root, "1234/task" a
// thread list. Processes and threads vanish at any time: NOT_FOUND is the
// normal answer for one that has gone (ENOENT and ESRCH both map to it).
// Implementations are thread-safe for concurrent reads.
class ProcFs {
 public:
  virtual ~ProcFs() = default;

  // The names in directory `path`, without "." and "..", sorted.
  // NOT_FOUND when it does not exist, PERMISSION_DENIED when it may not be
  // read, INTERNAL for any other I/O error.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(absl::string_view path) const = 0;

  // The whole content of file `path`. Errors as for ListDir.
  virtual absl::StatusOr<std::string> ReadFile(absl::string_view path) const = 0;
};

// The kernel's procfs mounted at `root` (normally /proc).
class RealProcFs : public ProcFs {
 public:
  explicit RealProcFs(std::string root = "/proc");

  absl::StatusOr<std::vector<std::string>> ListDir(absl::string_view path) const override;
  absl::StatusOr<std::string> ReadFile(absl::string_view path) const override;

 private:
  std::string Full(absl::string_view path) const;

  std::string root_;
};

// A process tree in memory: files by relative path; directories are implied
// by the paths. Not thread-safe while being changed.
class FakeProcFs : public ProcFs {
 public:
  void SetFile(absl::string_view path, absl::string_view content);
  // The file is listed in its directory, but reading it fails with `error`:
  // a thread that exits between the listing and the read.
  void SetReadError(absl::string_view path, absl::Status error);
  // Removes `path` and everything below it.
  void Remove(absl::string_view path);

  absl::StatusOr<std::vector<std::string>> ListDir(absl::string_view path) const override;
  absl::StatusOr<std::string> ReadFile(absl::string_view path) const override;

 private:
  struct Entry {
    std::string content;
    absl::Status error;
  };
  std::map<std::string, Entry, std::less<>> files_;
};

}  // namespace cosched::discovery

#endif  // COSCHED_DISCOVERY_PROC_FS_H_
