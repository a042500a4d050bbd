// What an operator asks of a staged rollout (`csctl rollout start`): its
// stage percents and its soak, parsed and checked the same way by csctl,
// before it asks, and by csd, which is the authority (it adds its own
// shortest soak, csd.yaml rollout.min_soak_s).
#ifndef COSCHED_COMMON_ROLLOUT_SPEC_H_
#define COSCHED_COMMON_ROLLOUT_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosched {

inline constexpr int kMaxRolloutStages = 10;
// A week: a soak longer than that is a rollout nobody watches.
inline constexpr int64_t kMaxSoakSeconds = 7 * 24 * 3600;

// "1%,10%,50%,100%" -> {1, 10, 50, 100}. INVALID_ARGUMENT naming `field`
// for an empty list, an entry not of the form N% (N a whole number), or a
// list ValidateStagePercents refuses.
absl::StatusOr<std::vector<int>> ParseStagePercents(absl::string_view field,
                                                    absl::string_view text);
// 1 to kMaxRolloutStages stages, each 1 to 100, strictly increasing.
// INVALID_ARGUMENT naming `field` (and the entry) and the rule.
absl::Status ValidateStagePercents(absl::string_view field, const std::vector<int>& percents);

// "90s", "30m", "2h", "7d" (a whole number and one unit) -> seconds.
// INVALID_ARGUMENT naming `field` otherwise, or when out of range.
absl::StatusOr<int64_t> ParseSoak(absl::string_view field, absl::string_view text,
                                  int64_t min_seconds = 1);
// min_seconds to kMaxSoakSeconds; INVALID_ARGUMENT naming `field` and the
// range.
absl::Status ValidateSoak(absl::string_view field, int64_t seconds, int64_t min_seconds = 1);

// "90s", "30m", "2h30m", "7d": the shortest exact way to say `seconds`.
std::string SoakText(int64_t seconds);

}  // namespace cosched

#endif  // COSCHED_COMMON_ROLLOUT_SPEC_H_
