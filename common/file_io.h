// Whole-file reads (of sysfs, procfs, state and config files) and
// crash-safe whole-file writes, with errno turned into a status that names
// the file and the step.
#ifndef COSCHED_COMMON_FILE_IO_H_
#define COSCHED_COMMON_FILE_IO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosched {

// Replaces `path` with `content` so that after a crash the file holds either
// the old or the new content: writes `path`.tmp (mode 0600), fsyncs it,
// renames it over `path` and fsyncs the directory. Errors name the file and
// the failing step.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view content);

// The content of `path`, read to its end (sysfs and procfs report sizes of
// 0 or 4096). NOT_FOUND when it (or, for /proc, its task) does not exist,
// PERMISSION_DENIED, else UNAVAILABLE.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// The status for errno `err` of `step` ("cannot open") on `path`, mapped as
// above.
absl::Status ErrnoStatus(int err, absl::string_view step, absl::string_view path);

}  // namespace cosched

#endif  // COSCHED_COMMON_FILE_IO_H_
