#include "discovery/discovery_factory.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "discovery/libvirt_discovery.h"
#include "host/pseudo_fs.h"
#include "discovery/procfs_discovery.h"
#include "glog/logging.h"

namespace cosched::discovery {

absl::StatusOr<std::shared_ptr<VmDiscovery>> MakeVmDiscovery(
    const DiscoverySetup& setup) {
  const std::string mode = setup.mode.empty() ? "auto" : setup.mode;
  if (mode != "auto" && mode != "libvirt" && mode != "procfs") {
    return absl::InvalidArgumentError(absl::StrCat(
        "discovery '", mode, "' must be one of auto, libvirt, procfs"));
  }
  auto fs = std::make_shared<host::LocalPseudoFs>();
  ProcfsDiscovery::Options procfs;
  procfs.procfs_root = setup.procfs_root;
  procfs.vmm = setup.vmm;
  std::error_code error;
  const bool libvirt_here = std::filesystem::exists(setup.libvirt_socket, error);
  if (mode == "procfs" || (mode == "auto" && !libvirt_here)) {
    LOG(INFO) << "finding VMs in " << setup.procfs_root
              << (mode == "auto" ? " (no libvirt socket at " + setup.libvirt_socket + ")"
                                 : "");
    return std::shared_ptr<VmDiscovery>(std::make_shared<ProcfsDiscovery>(fs, procfs));
  }
  LibvirtDiscovery::Options options;
  options.procfs = procfs;
  options.uri = setup.libvirt_uri;
  auto on_event = setup.on_domain_event;
  options.listener = [on_event](const DomainEvent& event) {
    VLOG(1) << "libvirt: domain " << event.name << " "
            << DomainEventKindName(event.kind);
    if (on_event) on_event();
  };
  LOG(INFO) << "finding VMs through libvirt at " << setup.libvirt_uri
            << " and QEMU processes it does not manage in " << setup.procfs_root;
  return std::shared_ptr<VmDiscovery>(std::make_shared<CombinedDiscovery>(
      std::make_unique<LibvirtDiscovery>(options, fs),
      std::make_unique<ProcfsDiscovery>(fs, procfs)));
}

}  // namespace cosched::discovery
