#include <dirent.h>

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

}  // namespace cosched::host
