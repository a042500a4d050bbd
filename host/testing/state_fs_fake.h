// The agent's state dir in memory, with faults, for tests.
#ifndef COSCHED_HOST_TESTING_STATE_FS_FAKE_H_
#define COSCHED_HOST_TESTING_STATE_FS_FAKE_H_

#include <map>
#include <mutex>
#include <string>

#include "host/state_fs.h"

namespace cosched::host {

// Files in memory, keyed by path; directories are implied. Faults are set
// per path prefix, so a prefix that is a directory fails everything in it.
class FakeStateFs : public StateFs {
 public:
  void SetFile(const std::string& path, absl::string_view content);
  // Every file, by path.
  std::map<std::string, std::string> files() const;

  // Reads, writes or renames of a path under `prefix` fail with `error`
  // (OK clears).
  void FailReads(const std::string& prefix, absl::Status error);
  void FailWrites(const std::string& prefix, absl::Status error);
  void FailRenames(const std::string& prefix, absl::Status error);
  // EnsureDirectory fails with `error` (OK clears).
  void FailDirectories(absl::Status error);

  absl::Status EnsureDirectory(const std::string& path) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) const override;
  absl::Status WriteFileAtomically(const std::string& path,
                                   absl::string_view content) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;

 private:
  using Faults = std::map<std::string, absl::Status>;
  static absl::Status FaultLocked(const Faults& faults, const std::string& path);

  mutable std::mutex mu_;
  std::map<std::string, std::string> files_;
  Faults read_faults_;
  Faults write_faults_;
  Faults rename_faults_;
  absl::Status directory_fault_;
};

}  // namespace cosched::host

#endif  // COSCHED_HOST_TESTING_STATE_FS_FAKE_H_
