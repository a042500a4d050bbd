// A pseudo filesystem in memory, for tests.
#ifndef COSCHED_HOST_TESTING_PSEUDO_FS_FAKE_H_
#define COSCHED_HOST_TESTING_PSEUDO_FS_FAKE_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "host/pseudo_fs.h"

namespace cosched::host {

// Files by absolute path; directories are implied by the paths. Not
// thread-safe while being changed.
class FakePseudoFs : public PseudoFs {
 public:
  void SetFile(absl::string_view path, absl::string_view content);
  // The file is listed in its directory, but reading it fails with `error`:
  // a thread that exits between the listing and the read.
  void SetReadError(absl::string_view path, absl::Status error);
  // A symbolic link at `path` to `target` (ReadLink; it is not listed).
  void SetLink(absl::string_view path, absl::string_view target);
  // Removes `path` and everything below it.
  void Remove(absl::string_view path);

  absl::StatusOr<std::string> ReadFile(absl::string_view path) const override;
  absl::StatusOr<std::vector<std::string>> ListDirectory(
      absl::string_view path) const override;
  absl::StatusOr<std::string> ReadLink(absl::string_view path) const override;

 private:
  struct Entry {
    std::string content;
    absl::Status error;
  };
  std::map<std::string, Entry, std::less<>> files_;
  std::map<std::string, std::string, std::less<>> links_;
};

}  // namespace cosched::host

#endif  // COSCHED_HOST_TESTING_PSEUDO_FS_FAKE_H_
