// Watches the host's safety preflight while the agent runs: the whole
// preflight is read at start, and the sched_ext state (the hazard that can
// appear at any time: `scx_*` started by hand or by a package) every
// `poll`. sysfs attributes do not notify inotify, so polling is what works;
// at the default 250 ms a scheduler loaded later stops tagging well within
// a second. Thread-safe.
#ifndef COSCHED_AGENT_HAZARD_WATCH_H_
#define COSCHED_AGENT_HAZARD_WATCH_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cosched/v1/types.pb.h"
#include "host/preflight.h"
#include "host/pseudo_fs.h"

namespace cosched::agent {

struct HazardWatchOptions {
  host::PreflightPaths paths;
  host::HazardRules rules;
  std::chrono::milliseconds poll{250};
};

class HazardWatch {
 public:
  // `on_change` runs on the watch's thread whenever the hazards present
  // change (not for the first read).
  HazardWatch(std::shared_ptr<const host::PseudoFs> fs, HazardWatchOptions options,
              std::function<void()> on_change);
  ~HazardWatch();
  HazardWatch(const HazardWatch&) = delete;
  HazardWatch& operator=(const HazardWatch&) = delete;

  // Reads the whole preflight once; call before Start and before the first
  // reconcile pass, so that a host unsafe at start never gets a cookie.
  void ReadNow();
  void Start();
  void Stop();
  // New rules (a reload of cs-agent.yaml: allow_hazards, nested_is_hazard,
  // the known-bad list), judged at once against what was last read; calls
  // on_change when the hazards present change.
  void SetRules(host::HazardRules rules);

  v1::HostPreflight preflight() const;
  // The hazards that stop tagging now (allowed ones left out).
  std::vector<v1::Hazard> hazards() const;

 private:
  void Run();
  host::HazardRules rules() const;
  // Reads the sched_ext state again; true when the hazards changed.
  bool Refresh();

  const std::shared_ptr<const host::PseudoFs> fs_;
  const HazardWatchOptions options_;
  // options_.rules, as reloaded; under mu_.
  host::HazardRules rules_;
  const std::function<void()> on_change_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  v1::HostPreflight preflight_;
  std::thread thread_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_HAZARD_WATCH_H_
