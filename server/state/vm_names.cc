#include "server/state/vm_names.h"

#include <algorithm>

#include "common/status_macros.h"

namespace cosched::server {
namespace {

// Whether a host other than `host_id` reports `vm` under a UUID other than
// `uuid`.
bool AnotherHostHasAnotherUuid(const v1::VM& vm, const std::string& host_id,
                               const std::string& uuid) {
  for (const v1::VMPresence& p : vm.presence()) {
    if (p.host_id() != host_id && !p.uuid().empty() && p.uuid() != uuid) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::optional<v1::VM>> TaggedVmOf(store::Transaction& txn,
                                                 const std::string& host_id,
                                                 const v1::VMObservation& o) {
  ASSIGN_OR_RETURN(std::optional<v1::VM> by_name, txn.GetVm(o.vm_id()));
  if (by_name && by_name->metadata_host().empty()) return by_name;
  if (!o.uuid().empty() && o.uuid() != o.vm_id()) {
    ASSIGN_OR_RETURN(std::optional<v1::VM> by_uuid, txn.GetVm(o.uuid()));
    if (by_uuid) return by_uuid;
    if (by_name && AnotherHostHasAnotherUuid(*by_name, host_id, o.uuid())) {
      return std::optional<v1::VM>();
    }
  }
  return by_name;
}

const std::string& MetadataVmId(const v1::VMObservation& o) {
  return o.uuid().empty() ? o.vm_id() : o.uuid();
}

absl::StatusOr<std::vector<v1::VM>> VmsNamed(store::Transaction& txn, const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<store::Observation> seen, txn.ListObservations(name));
  std::vector<v1::VM> named;
  for (const store::Observation& o : seen) {
    const std::string& uuid = o.vm.uuid();
    if (o.vm.vm_id() != name || uuid.empty() || uuid == name) continue;
    bool listed = false;
    for (const v1::VM& vm : named) listed = listed || vm.vm_id() == uuid;
    if (listed) continue;
    ASSIGN_OR_RETURN(std::optional<v1::VM> vm, txn.GetVm(uuid));
    if (vm) named.push_back(*std::move(vm));
  }
  std::sort(named.begin(), named.end(),
            [](const v1::VM& a, const v1::VM& b) { return a.vm_id() < b.vm_id(); });
  return named;
}

void NoteDomainName(v1::VM& vm, const v1::VMObservation& owner_seen) {
  if (owner_seen.vm_id() == vm.vm_id()) {
    vm.clear_domain_name();
  } else {
    vm.set_domain_name(owner_seen.vm_id());
  }
}

}  // namespace cosched::server
