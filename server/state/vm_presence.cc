#include "server/state/vm_presence.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"

namespace cosched::server {
namespace {

bool Running(const v1::VMPresence& p) {
  return p.run_state() == v1::VM_RUN_STATE_RUNNING;
}

// The entry that has held its state longest, then the lowest host id: a
// deterministic choice, so every csd (and every replay) picks the same.
const v1::VMPresence* Longest(const std::vector<const v1::VMPresence*>& among) {
  const v1::VMPresence* best = nullptr;
  for (const v1::VMPresence* p : among) {
    if (best == nullptr || p->since() < best->since() ||
        (p->since() == best->since() && p->host_id() < best->host_id())) {
      best = p;
    }
  }
  return best;
}

}  // namespace

void SetPresence(v1::VM& vm, absl::string_view host_id,
                 const std::optional<v1::VMObservation>& seen,
                 const google::protobuf::Timestamp& now) {
  auto* entries = vm.mutable_presence();
  auto it = std::find_if(entries->begin(), entries->end(),
                         [&](const v1::VMPresence& p) { return p.host_id() == host_id; });
  if (!seen) {
    if (it != entries->end()) entries->erase(it);
    return;
  }
  // Agents that do not say (procfs discovery, older agents) see it running.
  const v1::VMRunState state = seen->run_state() == v1::VM_RUN_STATE_UNSPECIFIED
                                   ? v1::VM_RUN_STATE_RUNNING
                                   : seen->run_state();
  v1::VMPresence* entry;
  if (it == entries->end()) {
    entry = vm.add_presence();
    entry->set_host_id(std::string(host_id));
  } else {
    entry = &*it;
    if (entry->run_state() == state && entry->uuid() == seen->uuid()) return;
  }
  if (entry->run_state() != state || !entry->has_since()) *entry->mutable_since() = now;
  entry->set_run_state(state);
  entry->set_uuid(seen->uuid());
  // Sorted by host, so that the record depends on what is reported and not
  // on the order the hosts reported it in.
  std::sort(entries->begin(), entries->end(),
            [](const v1::VMPresence& a, const v1::VMPresence& b) {
              return a.host_id() < b.host_id();
            });
}

void ResolveOwner(v1::VM& vm) {
  const v1::VMPresence* first_uuid = nullptr;
  vm.clear_conflict();
  for (const v1::VMPresence& p : vm.presence()) {
    if (p.uuid().empty()) continue;
    if (first_uuid == nullptr) {
      first_uuid = &p;
    } else if (p.uuid() != first_uuid->uuid()) {
      vm.set_conflict(absl::StrCat(
          "host '", first_uuid->host_id(), "' reports '", vm.vm_id(), "' as UUID ",
          first_uuid->uuid(), " and host '", p.host_id(), "' as UUID ", p.uuid(),
          ": two VMs under one name (tag each by its UUID); every copy stays on a cookie of its own"));
      return;
    }
  }
  const v1::VMPresence* owner = nullptr;
  std::vector<const v1::VMPresence*> running, all;
  for (const v1::VMPresence& p : vm.presence()) {
    if (p.host_id() == vm.host_id()) owner = &p;
    if (Running(p)) running.push_back(&p);
    all.push_back(&p);
  }
  // Only a migration's states hand a VM to another host (the owner
  // migrating out, which libvirt also says of a domain shut off because it
  // migrated, or migrating in while the other runs it, or gone): never a
  // host that reports it running while its owner has it paused or shut off
  // (issue #32).
  if (owner != nullptr && owner->run_state() != v1::VM_RUN_STATE_MIGRATING_OUT &&
      owner->run_state() != v1::VM_RUN_STATE_MIGRATING_IN) {
    return;
  }
  if (!running.empty()) {
    vm.set_host_id(Longest(running)->host_id());
  } else if (owner == nullptr) {
    vm.set_host_id(all.empty() ? "" : Longest(all)->host_id());
  }
}

bool ReceivesAssignment(const v1::VM& vm, absl::string_view host_id) {
  if (host_id.empty() || !vm.conflict().empty()) return false;
  const v1::VMPresence* own = nullptr;
  bool another_has_uuid = false;
  for (const v1::VMPresence& p : vm.presence()) {
    if (p.host_id() == host_id) {
      own = &p;
    } else if (!p.uuid().empty()) {
      another_has_uuid = true;
    }
  }
  // A copy without a UUID where another host reports the VM with one may
  // be a process posing as it (libvirt's VMs always have a UUID): it gets
  // nothing, and fails closed on a cookie of its own.
  if (own != nullptr && own->uuid().empty() && another_has_uuid) return false;
  return own != nullptr || vm.host_id() == host_id;
}

std::set<std::string> HostsOf(const v1::VM& vm) {
  std::set<std::string> hosts;
  if (!vm.host_id().empty()) hosts.insert(vm.host_id());
  for (const v1::VMPresence& p : vm.presence()) hosts.insert(p.host_id());
  return hosts;
}

}  // namespace cosched::server
