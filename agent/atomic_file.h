// Whole-file reads and crash-safe whole-file writes for the agent's state.
#ifndef COSCHED_AGENT_ATOMIC_FILE_H_
#define COSCHED_AGENT_ATOMIC_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosched::agent {

// Replaces `path` with `content` so that after a crash the file holds either
// the old or the new content: writes `path`.tmp (mode 0600), fsyncs it,
// renames it over `path` and fsyncs the directory. Errors name the file and
// the failing step.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view content);

// The content of `path`; NOT_FOUND when it does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_ATOMIC_FILE_H_
