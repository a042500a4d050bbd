#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "agent/host_fs.h"

namespace cosched::agent {
namespace {

absl::Status ErrnoStatus(int err, absl::string_view what,
                         absl::string_view path) {
  std::string message = absl::StrCat(what, " ", path, ": ", strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace

absl::StatusOr<std::string> LocalHostFs::ReadFile(absl::string_view path) const {
  std::string p(path);
  int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  // sysfs and procfs files report a size of 4096 or 0: read until EOF.
  std::string content;
  char buf[4096];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      return ErrnoStatus(err, "cannot read", path);
    }
    if (n == 0) break;
    content.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return content;
}

absl::StatusOr<std::vector<std::string>> LocalHostFs::ListDirectory(
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

}  // namespace cosched::agent
