#include <dirent.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/status/status.h"
#include "common/file_io.h"
#include "host/pseudo_fs.h"

namespace cosched::host {

absl::StatusOr<std::string> LocalPseudoFs::ReadFile(absl::string_view path) const {
  return ReadFileToString(std::string(path));
}

absl::StatusOr<std::vector<std::string>> LocalPseudoFs::ListDirectory(
    absl::string_view path) const {
  std::string p(path);
  DIR* dir = opendir(p.c_str());
  if (dir == nullptr) return ErrnoStatus(errno, "cannot open directory", path);
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* entry = readdir(dir)) {
    absl::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  int err = errno;
  closedir(dir);
  if (err != 0) return ErrnoStatus(err, "cannot list directory", path);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> LocalPseudoFs::ReadLink(absl::string_view path) const {
  std::string p(path);
  char target[PATH_MAX];
  const ssize_t n = readlink(p.c_str(), target, sizeof(target));
  if (n < 0) return ErrnoStatus(errno, "cannot read link", path);
  // A target of PATH_MAX bytes may have been cut short.
  if (static_cast<size_t>(n) == sizeof(target)) {
    return ErrnoStatus(ENAMETOOLONG, "cannot read link", path);
  }
  return std::string(target, static_cast<size_t>(n));
}

}  // namespace cosched::host
