#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/testing/state_fs_fake.h"

namespace cosched::host {

void FakeStateFs::SetFile(const std::string& path, absl::string_view content) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[path] = std::string(content);
}

std::map<std::string, std::string> FakeStateFs::files() const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_;
}

void FakeStateFs::FailReads(const std::string& prefix, absl::Status error) {
  std::lock_guard<std::mutex> lock(mu_);
  read_faults_[prefix] = std::move(error);
}

void FakeStateFs::FailWrites(const std::string& prefix, absl::Status error) {
  std::lock_guard<std::mutex> lock(mu_);
  write_faults_[prefix] = std::move(error);
}

void FakeStateFs::FailRenames(const std::string& prefix, absl::Status error) {
  std::lock_guard<std::mutex> lock(mu_);
  rename_faults_[prefix] = std::move(error);
}

void FakeStateFs::FailDirectories(absl::Status error) {
  std::lock_guard<std::mutex> lock(mu_);
  directory_fault_ = std::move(error);
}

absl::Status FakeStateFs::FaultLocked(const Faults& faults, const std::string& path) {
  for (const auto& [prefix, error] : faults) {
    if (!error.ok() && absl::StartsWith(path, prefix)) return error;
  }
  return absl::OkStatus();
}

absl::Status FakeStateFs::EnsureDirectory(const std::string&) {
  std::lock_guard<std::mutex> lock(mu_);
  return directory_fault_;
}

absl::StatusOr<std::string> FakeStateFs::ReadFile(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status fault = FaultLocked(read_faults_, path); !fault.ok()) return fault;
  auto it = files_.find(path);
  if (it == files_.end()) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": No such file or directory"));
  }
  return it->second;
}

absl::Status FakeStateFs::WriteFileAtomically(const std::string& path,
                                              absl::string_view content) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status fault = FaultLocked(write_faults_, path); !fault.ok()) return fault;
  files_[path] = std::string(content);
  return absl::OkStatus();
}

absl::Status FakeStateFs::Rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string* path : {&from, &to}) {
    if (absl::Status fault = FaultLocked(rename_faults_, *path); !fault.ok()) return fault;
  }
  auto it = files_.find(from);
  if (it == files_.end()) {
    return absl::NotFoundError(absl::StrCat("cannot rename ", from, " to ", to,
                                            ": No such file or directory"));
  }
  files_[to] = std::move(it->second);
  files_.erase(from);
  return absl::OkStatus();
}

}  // namespace cosched::host
