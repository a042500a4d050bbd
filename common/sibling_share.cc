#include "common/sibling_share.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace cosched {

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}

int64_t MergeFigure(ShareMerge merge, int64_t a, int64_t b) {
  return merge == ShareMerge::kSum ? SaturatingAdd(a, b) : std::max(a, b);
}

void AddSiblingShare(const v1::SiblingShare& part, v1::SiblingShare& sum) {
  for (size_t i = 0; i < kSiblingShareFields.size(); ++i) {
    const SiblingShareField& f = kSiblingShareFields[i];
    if (i == kForcedIdleField && !part.forced_idle_known()) continue;
    (sum.*f.set)(MergeFigure(f.merge, (sum.*f.get)(), (part.*f.get)()));
  }
  if (part.forced_idle_known()) sum.set_forced_idle_known(true);
}

absl::Status ValidateSiblingShare(absl::string_view field, const v1::SiblingShare& share) {
  for (const SiblingShareField& f : kSiblingShareFields) {
    if ((share.*f.get)() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".", f.name, " must not be negative"));
    }
  }
  // Each part is at most INT64_MAX, so four of them cannot overflow 128 bits.
  const __int128 parts = static_cast<__int128>(share.same_ns()) + share.idle_ns() +
                         share.foreign_ns() + share.unknown_ns();
  if (parts > share.run_ns()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " same_ns + idle_ns + foreign_ns + unknown_ns must not exceed run_ns"));
  }
  return absl::OkStatus();
}

}  // namespace cosched
