// Which tagged VM a host's report, or a name an operator types, means. A VM
// is tagged under its name or its UUID; libvirt domain names repeat across
// hosts (Nova names a domain instance-%08x of its cell's database id, so
// two cells run two instance-00000001), UUIDs do not. So tag_from_metadata
// tags under the UUID where the agent reports one, keeps the name as
// VM.domain_name, and a name still finds the VM while a host reports it
// (docs/integrations.md, "VM identity").
#ifndef COSCHED_SERVER_STATE_VM_NAMES_H_
#define COSCHED_SERVER_STATE_VM_NAMES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cosched/v1/agent.pb.h"
#include "cosched/v1/types.pb.h"
#include "store/store.h"

namespace cosched::server {

// The tagged VM that `host_id` reports as `o`, nullopt when none is:
// - an operator's tag (TagVM) under o's name wins, as it wins over metadata;
// - else the VM tagged under o's UUID;
// - else one tagged from metadata under o's name (before csd tagged by
//   UUID), unless another host reports that one under another UUID: then it
//   is another VM of the same name, and `o` is not it.
absl::StatusOr<std::optional<v1::VM>> TaggedVmOf(store::Transaction& txn,
                                                 const std::string& host_id,
                                                 const v1::VMObservation& o);

// The id a VM that `o`'s metadata tags is stored under: its UUID when the
// agent reports one, else its name.
const std::string& MetadataVmId(const v1::VMObservation& o);

// The tagged VMs that hosts report under the domain name `name` while
// their id is another (their UUID), each once, by id. Used only where no VM
// is tagged under `name` itself.
absl::StatusOr<std::vector<v1::VM>> VmsNamed(store::Transaction& txn, const std::string& name);

// Keeps vm.domain_name as the name `owner_seen` (the owner host's
// observation) reports the VM under, cleared when that is its id.
void NoteDomainName(v1::VM& vm, const v1::VMObservation& owner_seen);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_VM_NAMES_H_
