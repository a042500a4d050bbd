// What the daemons' reloads (SIGHUP) share: the start-up checks run again
// over a fresh copy of the main's state, and the one refusal for settings
// that take effect only at a restart.
#ifndef COSCHED_COMMON_CONFIG_RELOAD_H_
#define COSCHED_COMMON_CONFIG_RELOAD_H_

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace cosched {

// Runs `steps` (a main's load, flags and checks) over `run` in order: OK
// when each passed, else INVALID_ARGUMENT with the first failure's message
// (which names the file's line). A step's result has `code` (0: passed)
// and `message`.
template <typename Run, typename Failure>
absl::Status RunReloadChecks(Run& run,
                             std::initializer_list<std::function<Failure(Run&)>> steps) {
  for (const auto& step : steps) {
    Failure failed = step(run);
    if (failed.code != 0) return absl::InvalidArgumentError(failed.message);
  }
  return absl::OkStatus();
}

// FAILED_PRECONDITION naming `settings`, which `unit` takes only at a
// restart; OK when there are none.
inline absl::Status RestartOnly(const std::vector<std::string>& settings, absl::string_view unit) {
  if (settings.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the file changes ", absl::StrJoin(settings, ", "),
      ", which take effect only at a restart (systemctl restart ", unit,
      "): nothing was reloaded"));
}

}  // namespace cosched

#endif  // COSCHED_COMMON_CONFIG_RELOAD_H_
