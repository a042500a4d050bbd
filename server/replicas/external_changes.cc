// Serving beside other csd replicas (issue #16): what another replica
// committed reaches this csd's in-memory views as its own writes do. The
// writes update them in their done callbacks (server/state/commit_effects.h);
// another replica's writes come from the store's watch as an
// ExternalChange, which names what changed, and are read here.
#include "server/replicas/external_changes.h"

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/state/vm_presence.h"

namespace cosched::server {

void ExternalChanges::Reload(const store::ExternalChange& change) {
  // Every Report is written whole next time: a VM it names may have been
  // tagged or untagged.
  effects_.reports().ForgetAll();
  absl::Status loaded = effects_.placement().Load(store_);
  if (loaded.ok()) loaded = rollout_.Load(store_);
  reload_owed_ = !loaded.ok();
  LOG_IF(ERROR, !loaded.ok()) << "placement view: reading it again after other replicas' "
                              << "commits (to revision " << change.revision
                              << ") failed, tried again at the next: " << loaded;
  effects_.NotifyLayout("");
}

void ExternalChanges::Apply(const store::ExternalChange& change) {
  if (change.resync || reload_owed_) return Reload(change);

  // As the writes do: the memory of the Reports of each host that reports
  // a VM that was tagged or untagged learns under which id its stats go
  // (or, when that cannot be told from the VM record, writes the host's
  // next Report whole); every host the change touches is the policy
  // engine's to look at again.
  PlacementDelta delta;
  std::set<std::string> forget(change.hosts.begin(), change.hosts.end());
  std::vector<std::pair<std::string, std::string>> tagged, untagged;  // (host, vm)
  std::set<std::string> layout_hosts;
  // The store had the change before delivering it: no need to ask etcd.
  absl::Status read = store_.ReadRecent([&](store::Transaction& txn) -> absl::Status {
    for (const auto& [vm_id, before] : change.vms) {
      ASSIGN_OR_RETURN(std::optional<v1::VM> vm, txn.GetVm(vm_id));
      if (vm) {
        ASSIGN_OR_RETURN(PlacedVm placed, PlacedVmOf(txn, *vm));
        delta.vms.push_back(std::move(placed));
      } else {
        delta.removed_vms.push_back(vm_id);
      }
      const std::optional<v1::VM>& after = vm;
      for (const std::optional<v1::VM>* side : {&before, &after}) {
        if (!side->has_value()) continue;
        if (!(*side)->host_id().empty()) layout_hosts.insert((*side)->host_id());
      }
      if (!before && after) {
        for (const v1::VMPresence& p : after->presence()) {
          // Tagged by the UUID a host reports beside a name: the name is
          // in the host's observation, not here.
          if (p.uuid() == vm_id) {
            forget.insert(p.host_id());
          } else {
            tagged.emplace_back(p.host_id(), vm_id);
          }
        }
      } else if (before && !after) {
        for (const std::string& host : HostsOf(*before)) untagged.emplace_back(host, vm_id);
      }
    }
    // Place reads tenant policies from the view.
    if (change.policies) RETURN_IF_ERROR(effects_.placement().LoadPolicies(txn));
    // The leader moved the rollout on: which hosts are enabled changed.
    if (change.rollout) {
      ASSIGN_OR_RETURN(std::optional<v1::Rollout> rollout, txn.GetRollout());
      rollout_.Set(std::move(rollout));
    }
    for (const std::string& host_id : change.hosts) {
      ASSIGN_OR_RETURN(std::optional<v1::Host> host, txn.GetHost(host_id));
      if (host) {
        delta.hosts.push_back(*std::move(host));
      } else {
        delta.removed_hosts.push_back(host_id);
      }
    }
    return absl::OkStatus();
  });
  if (!read.ok()) {
    LOG(ERROR) << "placement view: other replicas' commits up to revision " << change.revision
               << " could not be read (the view is read again at the next change): " << read;
    reload_owed_ = true;
  } else {
    effects_.placement().Apply(delta);
  }
  for (const auto& [host_id, reported] : change.reports) {
    effects_.placement().ApplyReportedVcpus(host_id, reported);
    layout_hosts.insert(host_id);
  }
  for (const auto& [host_id, vm_id] : tagged) effects_.reports().Tagged(host_id, vm_id, vm_id);
  for (const auto& [host_id, vm_id] : untagged) effects_.reports().Untagged(host_id, vm_id);
  for (const std::string& host_id : forget) effects_.reports().Forget(host_id);
  if (change.policies) return effects_.NotifyLayout("");
  for (const std::string& host_id : layout_hosts) effects_.NotifyLayout(host_id);
}

}  // namespace cosched::server
