// Whether a host's measured forced idle has been over its budget long
// enough for the engine to act: the budget holds on measurements, not only
// on predictions. One window over budget is noise (a burst, a VM booting);
// `windows` consecutive ones are a layout that does not fit its load.
// Thread-compatible.
#ifndef COSCHED_POLICY_BUDGET_WATCH_H_
#define COSCHED_POLICY_BUDGET_WATCH_H_

#include <optional>
#include <string>

#include "absl/status/status.h"

namespace cosched::policy {

struct BudgetWatchOptions {
  // Consecutive stats windows over budget before the host is in breach.
  int windows = 3;
  bool operator==(const BudgetWatchOptions&) const = default;
};

// INVALID_ARGUMENT naming `prefix`.windows: 1 to 100.
absl::Status ValidateBudgetWatch(const BudgetWatchOptions& options,
                                 const std::string& prefix = "engine.budget_windows");

class BudgetWatch {
 public:
  explicit BudgetWatch(BudgetWatchOptions options) : options_(options) {}

  // One stats window of the host: its measured forced idle in percent of
  // the host's CPU time, against the least budget of the tenants on it
  // (none: no tenant has one, and nothing is ever in breach).
  void Observe(double measured_pct, std::optional<double> budget_pct);
  // The engine chose a layout to restore the budget: its effect is judged
  // on windows from now on.
  void Reset() { over_ = 0; }
  // New options (a reload of csd.yaml): the windows counted so far stay,
  // judged against the new count.
  void SetOptions(BudgetWatchOptions options) { options_ = options; }

  bool breached() const { return over_ >= options_.windows; }
  int consecutive_over() const { return over_; }

 private:
  BudgetWatchOptions options_;
  int over_ = 0;
};

}  // namespace cosched::policy

#endif  // COSCHED_POLICY_BUDGET_WATCH_H_
