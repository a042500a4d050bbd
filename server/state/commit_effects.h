// What follows a committed write of the desired state, on the store's
// completion thread in commit order: the placement view takes the change,
// the memory of the Reports of hosts that report a VM that was tagged or
// untagged learns under which id their stats go, and the policy engine
// hears which host to look at again. Each write chains the steps it needs onto its answer.
#ifndef COSCHED_SERVER_STATE_COMMIT_EFFECTS_H_
#define COSCHED_SERVER_STATE_COMMIT_EFFECTS_H_

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "server/state/placement_view.h"
#include "server/state/report_memory.h"
#include "server/state/write_support.h"

namespace cosched::server {

// Thread-safe as the view and memory it holds.
class CommitEffects {
 public:
  CommitEffects(PlacementView& placement, ReportMemory& reports)
      : placement_(placement), reports_(reports) {}

  // Called once a committed write may change what the policy engine would
  // decide for a host: a VM tagged, retagged or untagged there, a Report
  // that changed what the host runs (host_id), or a tenant policy changed
  // (an empty host_id: every host). On the store's completion thread: it
  // must only take note. Set before serving.
  void set_layout_observer(std::function<void(const std::string& host_id)> observer) {
    layout_observer_ = std::move(observer);
  }
  void NotifyLayout(const std::string& host_id) const {
    if (layout_observer_) layout_observer_(host_id);
  }

  PlacementView& placement() const { return placement_; }
  ReportMemory& reports() const { return reports_; }

  // `done`, after applying what a committed write changed to the view.
  template <typename T>
  Done<T> ApplyingPlacement(std::shared_ptr<PlacementDelta> delta, Done<T> done) const {
    return [this, delta, done = std::move(done)](absl::StatusOr<T> result) {
      if (result.ok()) placement_.Apply(*delta);
      done(std::move(result));
    };
  }
  // `done`, after telling the memory of the last Report of each host in
  // `reported` (host, the id it reports the VM under) once the write
  // committed that it reports VM `vm_id`, which was tagged anew: its
  // stats go under that id now. The Report itself needs no write: the tag
  // wrote the VM's presence from it.
  template <typename T>
  Done<T> NotingTagged(std::shared_ptr<const std::string> vm_id,
                       std::shared_ptr<std::vector<std::pair<std::string, std::string>>> reported,
                       Done<T> done) const {
    return [this, vm_id, reported, done = std::move(done)](absl::StatusOr<T> result) {
      if (result.ok()) {
        for (const auto& [host, reported_id] : *reported) {
          reports_.Tagged(host, reported_id, *vm_id);
        }
      }
      done(std::move(result));
    };
  }
  // The same once VM `vm_id` was untagged on `hosts`.
  template <typename T>
  Done<T> NotingUntagged(std::shared_ptr<const std::string> vm_id,
                         std::shared_ptr<std::set<std::string>> hosts, Done<T> done) const {
    return [this, vm_id, hosts, done = std::move(done)](absl::StatusOr<T> result) {
      if (result.ok()) {
        for (const std::string& host : *hosts) reports_.Untagged(host, *vm_id);
      }
      done(std::move(result));
    };
  }
  // `done`, after telling the layout observer of `host_id` once the write
  // committed; nothing when it stays unset (no change, a VM on no host).
  template <typename T>
  Done<T> NotifyingLayout(std::shared_ptr<std::optional<std::string>> host_id,
                          Done<T> done) const {
    return [this, host_id, done = std::move(done)](absl::StatusOr<T> result) {
      if (result.ok() && host_id->has_value()) NotifyLayout(**host_id);
      done(std::move(result));
    };
  }

 private:
  PlacementView& placement_;
  ReportMemory& reports_;
  std::function<void(const std::string&)> layout_observer_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_COMMIT_EFFECTS_H_
