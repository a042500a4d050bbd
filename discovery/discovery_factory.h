// Chooses where cs-agent finds VMs, from its config: libvirt (with QEMU
// processes libvirt does not manage found in procfs), or procfs alone.
#ifndef COSCHED_DISCOVERY_DISCOVERY_FACTORY_H_
#define COSCHED_DISCOVERY_DISCOVERY_FACTORY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "discovery/vm_discovery.h"
#include "discovery/vmm_identity.h"

namespace cosched::discovery {

struct DiscoverySetup {
  // "auto" (or empty): libvirt when its socket exists, else procfs.
  std::string mode = "auto";
  std::string libvirt_uri = "qemu:///system";
  std::string libvirt_socket = "/run/libvirt/libvirt-sock";
  std::string procfs_root = "/proc";
  // Which processes may be VMs.
  VmmRule vmm;
  // Called on libvirt lifecycle events (a domain started, stopped, ...).
  std::function<void()> on_domain_event;
};

// INVALID_ARGUMENT naming `discovery` for an unknown mode.
absl::StatusOr<std::shared_ptr<VmDiscovery>> MakeVmDiscovery(
    const DiscoverySetup& setup);

}  // namespace cosched::discovery

#endif  // COSCHED_DISCOVERY_DISCOVERY_FACTORY_H_
