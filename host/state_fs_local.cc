#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "host/state_fs.h"
#include "common/file_io.h"

namespace cosched::host {

absl::Status LocalStateFs::EnsureDirectory(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::create_directories(path, error)) {
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::replace, error);
  }
  if (error) return ErrnoStatus(error.value(), "cannot create directory", path);
  if (!fs::is_directory(path, error)) {
    if (error) return ErrnoStatus(error.value(), "cannot stat", path);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a directory"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LocalStateFs::ReadFile(const std::string& path) const {
  return ReadFileToString(path);
}

absl::Status LocalStateFs::WriteFileAtomically(const std::string& path,
                                               absl::string_view content) {
  return cosched::WriteFileAtomically(path, content);
}

absl::Status LocalStateFs::Rename(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("cannot rename ", from, " to"), to);
  }
  return absl::OkStatus();
}

}  // namespace cosched::host
