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
#include "common/file_io.h"

namespace cosched::discovery {

RealProcFs::RealProcFs(std::string root) : root_(std::move(root)) {}

std::string RealProcFs::Full(absl::string_view path) const {
  if (path.empty()) return root_;
  return absl::StrCat(root_, "/", path);
}

absl::StatusOr<std::vector<std::string>> RealProcFs::ListDir(absl::string_view path) const {
  std::string full = Full(path);
  DIR* dir = opendir(full.c_str());
  if (dir == nullptr) return ErrnoStatus(errno, "cannot list", full);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* entry = readdir(dir)) {
    if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
    names.emplace_back(entry->d_name);
  }
  int err = errno;
  closedir(dir);
  if (err != 0) return ErrnoStatus(err, "cannot list", full);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> RealProcFs::ReadFile(absl::string_view path) const {
  return ReadFileToString(Full(path));
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
