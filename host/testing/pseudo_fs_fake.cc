#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/testing/pseudo_fs_fake.h"

namespace cosched::host {

void FakePseudoFs::SetFile(absl::string_view path, absl::string_view content) {
  files_[std::string(path)] = Entry{std::string(content), absl::OkStatus()};
}

void FakePseudoFs::SetReadError(absl::string_view path, absl::Status error) {
  files_[std::string(path)] = Entry{"", std::move(error)};
}

void FakePseudoFs::SetLink(absl::string_view path, absl::string_view target) {
  links_[std::string(path)] = std::string(target);
}

void FakePseudoFs::Remove(absl::string_view path) {
  const std::string dir_prefix = absl::StrCat(path, "/");
  for (auto it = links_.begin(); it != links_.end();) {
    if (it->first == path || absl::StartsWith(it->first, dir_prefix)) {
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = files_.begin(); it != files_.end();) {
    if (it->first == path || absl::StartsWith(it->first, dir_prefix)) {
      it = files_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<std::string> FakePseudoFs::ReadFile(absl::string_view path) const {
  auto it = files_.find(path);
  if (it == files_.end()) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": No such file or directory"));
  }
  if (!it->second.error.ok()) return it->second.error;
  return it->second.content;
}

absl::StatusOr<std::string> FakePseudoFs::ReadLink(absl::string_view path) const {
  auto it = links_.find(path);
  if (it == links_.end()) {
    return absl::NotFoundError(absl::StrCat("cannot read link ", path, ": No such file or directory"));
  }
  return it->second;
}

absl::StatusOr<std::vector<std::string>> FakePseudoFs::ListDirectory(
    absl::string_view path) const {
  const std::string prefix = absl::StrCat(path, absl::EndsWith(path, "/") ? "" : "/");
  std::set<std::string> names;
  for (auto it = files_.lower_bound(prefix);
       it != files_.end() && absl::StartsWith(it->first, prefix); ++it) {
    absl::string_view rest = absl::string_view(it->first).substr(prefix.size());
    names.emplace(rest.substr(0, rest.find('/')));
  }
  if (names.empty()) {
    return absl::NotFoundError(
        absl::StrCat("cannot open directory ", path, ": No such file or directory"));
  }
  return std::vector<std::string>(names.begin(), names.end());
}

}  // namespace cosched::host
