#include "discovery/vm_discovery.h"

#include <utility>

#include "google/protobuf/util/message_differencer.h"

namespace cosched::discovery {

bool DiscoveredVm::operator==(const DiscoveredVm& other) const {
  if (metadata.has_value() != other.metadata.has_value()) return false;
  if (metadata.has_value() &&
      !google::protobuf::util::MessageDifferencer::Equals(*metadata, *other.metadata)) {
    return false;
  }
  return vm_id == other.vm_id && uuid == other.uuid && qemu_pid == other.qemu_pid &&
         threads == other.threads && cgroup == other.cgroup && run_state == other.run_state &&
         metadata_unknown == other.metadata_unknown && impostor == other.impostor;
}

void DiscoveredVm::MarkImpostor(std::string reason) {
  if (impostor) return;  // the first reason found stands
  impostor = Impostor{std::move(vm_id), std::move(uuid), std::move(reason)};
  vm_id.clear();
  uuid.clear();
  metadata.reset();
  metadata_unknown = false;
}

}  // namespace cosched::discovery
