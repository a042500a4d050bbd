#include "discovery/proc_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cosched::discovery {

absl::Status ErrnoToStatus(int err, absl::string_view what, absl::string_view path) {
  std::string message = absl::StrCat(what, " ", path, ": ", strerror(err));
  switch (err) {
    case ENOENT:
    case ESRCH:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

RealProcFs::RealProcFs(std::string root) : root_(std::move(root)) {}

std::string RealProcFs::Full(absl::string_view path) const {
  if (path.empty()) return root_;
  return absl::StrCat(root_, "/", path);
}

absl::StatusOr<std::vector<std::string>> RealProcFs::ListDir(absl::string_view path) const {
  std::string full = Full(path);
  DIR* dir = opendir(full.c_str());
  if (dir == nullptr) return ErrnoToStatus(errno, "cannot list", full);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* entry = readdir(dir)) {
    if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
    names.emplace_back(entry->d_name);
  }
  int err = errno;
  closedir(dir);
  if (err != 0) return ErrnoToStatus(err, "cannot list", full);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> RealProcFs::ReadFile(absl::string_view path) const {
  std::string full = Full(path);
  int fd = open(full.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "cannot open", full);
  // procfs files report size 0: read until end of file.
  std::string content;
  char buffer[4096];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      return ErrnoToStatus(err, "cannot read", full);
    }
    if (n == 0) break;
    content.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return content;
}

void FakeProcFs::SetFile(absl::string_view path, absl::string_view content) {
  files_[std::string(path)] = Entry{std::string(content), absl::OkStatus()};
}

void FakeProcFs::SetReadError(absl::string_view path, absl::Status error) {
  files_[std::string(path)] = Entry{"", std::move(error)};
}

void FakeProcFs::Remove(absl::string_view path) {
  std::string dir_prefix = absl::StrCat(path, "/");
  for (auto it = files_.begin(); it != files_.end();) {
    if (it->first == path || absl::StartsWith(it->first, dir_prefix)) {
      it = files_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<std::vector<std::string>> FakeProcFs::ListDir(absl::string_view path) const {
  std::string prefix = path.empty() ? "" : absl::StrCat(path, "/");
  std::set<std::string> names;
  for (auto it = files_.lower_bound(prefix);
       it != files_.end() && absl::StartsWith(it->first, prefix); ++it) {
    absl::string_view rest = absl::string_view(it->first).substr(prefix.size());
    names.insert(std::string(rest.substr(0, rest.find('/'))));
  }
  if (names.empty()) return absl::NotFoundError(absl::StrCat("no directory ", path));
  return std::vector<std::string>(names.begin(), names.end());
}

absl::StatusOr<std::string> FakeProcFs::ReadFile(absl::string_view path) const {
  auto it = files_.find(path);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file ", path));
  if (!it->second.error.ok()) return it->second.error;
  return it->second.content;
}

}  // namespace cosched::discovery
