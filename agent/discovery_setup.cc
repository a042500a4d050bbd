#include "agent/discovery_setup.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "discovery/libvirt_discovery.h"
#include "discovery/procfs_discovery.h"
#include "glog/logging.h"

namespace cosched::agent {

absl::StatusOr<std::shared_ptr<VmDiscovery>> MakeVmDiscovery(
    const DiscoverySetup& setup) {
  const std::string mode = setup.mode.empty() ? "auto" : setup.mode;
  if (mode != "auto" && mode != "libvirt" && mode != "procfs") {
    return absl::InvalidArgumentError(absl::StrCat(
        "discovery '", mode, "' must be one of auto, libvirt, procfs"));
  }
  auto proc_fs = std::make_shared<discovery::RealProcFs>(setup.procfs_root);
  struct stat st;
  const bool libvirt_here = stat(setup.libvirt_socket.c_str(), &st) == 0;
  if (mode == "procfs" || (mode == "auto" && !libvirt_here)) {
    LOG(INFO) << "finding VMs in " << setup.procfs_root
              << (mode == "auto" ? " (no libvirt socket at " + setup.libvirt_socket + ")"
                                 : "");
    return std::shared_ptr<VmDiscovery>(
        std::make_shared<discovery::ProcfsDiscovery>(proc_fs));
  }
  discovery::LibvirtDiscovery::Options options;
  options.uri = setup.libvirt_uri;
  auto on_event = setup.on_domain_event;
  options.listener = [on_event](const discovery::DomainEvent& event) {
    VLOG(1) << "libvirt: domain " << event.name << " "
            << discovery::DomainEventKindName(event.kind);
    if (on_event) on_event();
  };
  LOG(INFO) << "finding VMs through libvirt at " << setup.libvirt_uri
            << " and QEMU processes it does not manage in " << setup.procfs_root;
  return std::shared_ptr<VmDiscovery>(std::make_shared<discovery::CombinedDiscovery>(
      std::make_unique<discovery::LibvirtDiscovery>(options, proc_fs),
      std::make_unique<discovery::ProcfsDiscovery>(proc_fs)));
}

}  // namespace cosched::agent
