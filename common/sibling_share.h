// The figures of a v1::SiblingShare in one table, with the rule by which
// each adds up over VMs and windows. Validation, sums and copies walk the
// table instead of spelling the figures out, so a new figure is one line
// here.
#ifndef COSCHED_COMMON_SIBLING_SHARE_H_
#define COSCHED_COMMON_SIBLING_SHARE_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/types.pb.h"

namespace cosched {

// How a figure adds up: summed (saturating at INT64_MAX, never wrapping:
// sums run over a day of many VMs), or the largest one kept.
enum class ShareMerge { kSum, kMax };

struct SiblingShareField {
  absl::string_view name;
  int64_t (v1::SiblingShare::*get)() const;
  void (v1::SiblingShare::*set)(int64_t);
  ShareMerge merge;
};

// Every int64 figure of v1::SiblingShare. forced_idle_ns counts only with
// forced_idle_known, which AddSiblingShare handles.
inline constexpr std::array<SiblingShareField, 8> kSiblingShareFields = {{
    {"run_ns", &v1::SiblingShare::run_ns, &v1::SiblingShare::set_run_ns, ShareMerge::kSum},
    {"same_ns", &v1::SiblingShare::same_ns, &v1::SiblingShare::set_same_ns, ShareMerge::kSum},
    {"idle_ns", &v1::SiblingShare::idle_ns, &v1::SiblingShare::set_idle_ns, ShareMerge::kSum},
    {"foreign_ns", &v1::SiblingShare::foreign_ns, &v1::SiblingShare::set_foreign_ns,
     ShareMerge::kSum},
    {"unknown_ns", &v1::SiblingShare::unknown_ns, &v1::SiblingShare::set_unknown_ns,
     ShareMerge::kSum},
    {"foreign_intervals", &v1::SiblingShare::foreign_intervals,
     &v1::SiblingShare::set_foreign_intervals, ShareMerge::kSum},
    {"longest_foreign_ns", &v1::SiblingShare::longest_foreign_ns,
     &v1::SiblingShare::set_longest_foreign_ns, ShareMerge::kMax},
    {"forced_idle_ns", &v1::SiblingShare::forced_idle_ns,
     &v1::SiblingShare::set_forced_idle_ns, ShareMerge::kSum},
}};
inline constexpr size_t kForcedIdleField = 7;

// a + b, or INT64_MAX where that would overflow.
int64_t SaturatingAdd(int64_t a, int64_t b);

// a and b added up by `merge`.
int64_t MergeFigure(ShareMerge merge, int64_t a, int64_t b);

// Adds `part` into `sum` by each figure's rule. Forced idle adds only where
// it was measured (forced_idle_known), and the sum is known once any part is.
void AddSiblingShare(const v1::SiblingShare& part, v1::SiblingShare& sum);

// The rules of a reported share: no figure negative, and same + idle +
// foreign + unknown at most run. INVALID_ARGUMENT naming `field`.<figure>.
absl::Status ValidateSiblingShare(absl::string_view field, const v1::SiblingShare& share);

}  // namespace cosched

#endif  // COSCHED_COMMON_SIBLING_SHARE_H_
