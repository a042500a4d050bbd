#include "policy/budget_watch.h"

#include "absl/strings/str_cat.h"

namespace cosched::policy {

absl::Status ValidateBudgetWatch(const BudgetWatchOptions& options, const std::string& prefix) {
  if (options.windows < 1 || options.windows > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, " must be between 1 and 100 (stats windows)"));
  }
  return absl::OkStatus();
}

void BudgetWatch::Observe(double measured_pct, std::optional<double> budget_pct) {
  // A window without a figure (NaN: forced idle not measured) neither
  // breaks nor extends a run.
  if (measured_pct != measured_pct) return;
  if (budget_pct.has_value() && measured_pct > *budget_pct) {
    ++over_;
  } else {
    over_ = 0;
  }
}

}  // namespace cosched::policy
