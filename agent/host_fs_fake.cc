#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/host_fs.h"

namespace cosched::agent {

void FakeHostFs::SetFile(absl::string_view path, absl::string_view content) {
  files_[std::string(path)] = std::string(content);
}

void FakeHostFs::RemoveFile(absl::string_view path) {
  auto it = files_.find(path);
  if (it != files_.end()) files_.erase(it);
}

absl::StatusOr<std::string> FakeHostFs::ReadFile(absl::string_view path) const {
  auto it = files_.find(path);
  if (it == files_.end()) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path,
                                            ": No such file or directory"));
  }
  return it->second;
}

absl::StatusOr<std::vector<std::string>> FakeHostFs::ListDirectory(
    absl::string_view path) const {
  std::string prefix = absl::StrCat(path, absl::EndsWith(path, "/") ? "" : "/");
  std::set<std::string> names;
  for (auto it = files_.lower_bound(prefix);
       it != files_.end() && absl::StartsWith(it->first, prefix); ++it) {
    absl::string_view rest = absl::string_view(it->first).substr(prefix.size());
    names.emplace(rest.substr(0, rest.find('/')));
  }
  if (names.empty()) {
    return absl::NotFoundError(absl::StrCat("cannot open directory ", path,
                                            ": No such file or directory"));
  }
  return std::vector<std::string>(names.begin(), names.end());
}

}  // namespace cosched::agent
