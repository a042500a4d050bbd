#include "server/engine/engine_options.h"

#include <sched.h>

#include <algorithm>
#include <utility>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace cosched::server {

int DefaultPlannerThreads() {
  // A csd confined to some CPUs (systemd's CPUAffinity=, a cpuset) plans
  // on those.
  cpu_set_t allowed;
  int cpus = sched_getaffinity(0, sizeof(allowed), &allowed) == 0
                 ? CPU_COUNT(&allowed)
                 : static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cpus, 1, 16);
}

EngineOptions EngineOptionsFromConfig(const v1::EngineConfig& config) {
  EngineOptions options;
  if (config.has_replan_interval_s()) {
    options.replan_interval = std::chrono::seconds(config.replan_interval_s());
  }
  if (config.has_min_gain()) options.hysteresis.min_gain = config.min_gain();
  if (config.has_min_dwell_s()) {
    options.hysteresis.min_dwell = std::chrono::seconds(config.min_dwell_s());
  }
  if (config.has_max_changes_per_hour()) {
    options.hysteresis.max_changes_per_hour = config.max_changes_per_hour();
  }
  if (config.has_budget_windows()) options.budget.windows = config.budget_windows();
  if (config.has_predict_s()) options.predict_s = config.predict_s();
  if (config.has_screen_s()) options.screen_s = config.screen_s();
  options.planner_threads =
      config.has_planner_threads() ? config.planner_threads() : DefaultPlannerThreads();
  return options;
}

absl::Status ValidateEngineOptions(const EngineOptions& options) {
  const int64_t interval = options.replan_interval.count();
  if (interval < 10 || interval > 86400) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine.replan_interval_s must be 10 to 86400 seconds (unset: 60), got ", interval));
  }
  // Checked here under its config name; ValidateHysteresis knows it as a
  // duration.
  const int64_t dwell = options.hysteresis.min_dwell.count();
  if (dwell < 0 || dwell > 86400) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine.min_dwell_s must be 0 to 86400 seconds (unset: 600), got ", dwell));
  }
  if (!(options.predict_s >= 0.25 && options.predict_s <= 10)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine.predict_s must be 0.25 to 10 simulated seconds (unset: 1), got ",
        options.predict_s));
  }
  if (!(options.screen_s == 0 || (options.screen_s >= 0.25 && options.screen_s <= 10))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine.screen_s must be 0 (off) or 0.25 to 10 simulated seconds (unset: 0.35), got ",
        options.screen_s));
  }
  if (options.planner_threads < 1 || options.planner_threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.planner_threads must be 1 to 64 (unset: the CPUs csd may run on, "
                     "at most 16), got ",
                     options.planner_threads));
  }
  for (const auto& [name, bound] : {std::pair{"reuse_vm_load_move", options.reuse_vm_load_move},
                                    std::pair{"reuse_host_load_share",
                                              options.reuse_host_load_share}}) {
    if (!(bound >= 0 && bound <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine.", name, " must be 0 to 1, got ", bound));
    }
  }
  RETURN_IF_ERROR(policy::ValidateHysteresis(options.hysteresis, "engine"));
  return policy::ValidateBudgetWatch(options.budget, "engine.budget_windows");
}

}  // namespace cosched::server
