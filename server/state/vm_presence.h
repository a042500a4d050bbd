// Where a VM is: every host that reports it (VM.presence), which of them
// owns it (VM.host_id), and whether their reports contradict each other
// (VM.conflict). Pure functions over the VM record, so the rule that decides
// a live migration is tested on its own (docs/mobility.md).
#ifndef COSCHED_SERVER_STATE_VM_PRESENCE_H_
#define COSCHED_SERVER_STATE_VM_PRESENCE_H_

#include <optional>
#include <set>
#include <string>

#include "absl/strings/string_view.h"
#include "cosched/v1/agent.pb.h"
#include "cosched/v1/types.pb.h"
#include "google/protobuf/timestamp.pb.h"

namespace cosched::server {

// Records what `host_id` reports of `vm` now: `seen` is its observation, or
// nullopt when the host no longer reports the VM. An entry's `since` changes
// only with its run state, so a host that keeps reporting the same thing
// leaves the record as it was.
void SetPresence(v1::VM& vm, absl::string_view host_id,
                 const std::optional<v1::VMObservation>& seen,
                 const google::protobuf::Timestamp& now);

// Sets vm.conflict and vm.host_id from vm.presence:
// - conflict: two hosts report the VM under different UUIDs. The owner
//   stays as it was, so nothing moves while the conflict lasts.
// - otherwise the owner stays while it reports the VM running, paused or
//   shut off; when it reports it migrating (in or out), a host that reports
//   it running takes over (the one that has done so longest, then by host
//   id), so a migration's source stays owner until the destination runs and
//   the source has stopped, and a host that claims a paused or stopped VM
//   never takes it; an owner that no longer reports it gives way to the
//   host that has reported it longest, and with none left the VM is on no
//   host.
void ResolveOwner(v1::VM& vm);

// Whether `host_id`'s agent is sent the VM's assignment: it owns or reports
// the VM, no conflict holds (then every copy stays fail-closed), and its
// copy has a UUID when another host reports the VM with one.
bool ReceivesAssignment(const v1::VM& vm, absl::string_view host_id);

// Every host that owns or reports the VM.
std::set<std::string> HostsOf(const v1::VM& vm);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_VM_PRESENCE_H_
