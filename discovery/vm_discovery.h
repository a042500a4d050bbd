// What runs on the host: the VMs and every thread that belongs to them.
// Discovery from libvirt and from procfs implements this interface.
#ifndef COSCHED_DISCOVERY_VM_DISCOVERY_H_
#define COSCHED_DISCOVERY_VM_DISCOVERY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cosched/v1/types.pb.h"

namespace cosched::discovery {

// One thread that belongs to a VM.
struct DiscoveredThread {
  enum class Kind {
    kVcpu,         // "CPU <n>/KVM" or "CPU <n>/TCG"
    kEmulator,     // any other thread of the QEMU process
    kIothread,     // "IO <iothread id>"
    kVhostWorker,  // "vhost-<qemu pid>", inside or outside QEMU's group
    kHelper,       // a thread of a helper process (virtiofsd, ...)
  };

  int tid = 0;
  // The thread group (process) the thread is in: the QEMU pid for QEMU's
  // own threads; something else for old-style vhost kernel threads and
  // helpers.
  int pid = 0;
  std::string name;
  Kind kind = Kind::kEmulator;

  bool operator==(const DiscoveredThread&) const = default;
};

// A process that claims to be a VM the agent cannot trust it to be
// (discovery/vmm_identity.h): what it claimed, and why it is not believed.
struct Impostor {
  std::string claimed_vm_id;
  std::string claimed_uuid;
  std::string reason;

  bool operator==(const Impostor&) const = default;
};

// One VM on the host.
struct DiscoveredVm {
  // The name it runs under (libvirt domain name, QEMU -name guest=...).
  std::string vm_id;
  // Empty when unknown.
  std::string uuid;
  int qemu_pid = 0;
  std::vector<DiscoveredThread> threads;
  // The VM's own cgroup, as /proc/<pid>/cgroup names it (the v2 path, e.g.
  // "/machine.slice/machine-qemu\x2d1\x2dvm\x2da.scope"); empty when QEMU runs
  // in a cgroup shared with other processes. Forced idle is read from it.
  std::string cgroup;
  // What the hypervisor says of it, reported to csd (VMObservation): a QEMU
  // process found through /proc runs; libvirt's domains say more
  // (discovery/libvirt_discovery.h, LibvirtRunState).
  v1::VMRunState run_state = v1::VM_RUN_STATE_RUNNING;
  // What its libvirt domain's <metadata> says of its tenancy
  // (discovery/domain_metadata_xml.h); nullopt when it says nothing or the
  // VM is not libvirt's.
  std::optional<v1::DomainMetadata> metadata;
  // Its tenancy could not be read now (libvirt away, so the VM was found
  // in /proc; or libvirt could not give its XML): `metadata` is nullopt
  // and says nothing either way (VMObservation.metadata_unknown).
  bool metadata_unknown = false;
  // Set for an impostor: vm_id and uuid are then empty, so that it gets a
  // fail-closed cookie of its own (by pid) and is never reported as the VM.
  std::optional<Impostor> impostor;

  // Marks this VM an impostor for `reason`, keeping what it claimed.
  void MarkImpostor(std::string reason);

  // Field by field; the metadata as protobuf's MessageDifferencer compares.
  bool operator==(const DiscoveredVm& other) const;
};

// Implementations are thread-safe.
class VmDiscovery {
 public:
  virtual ~VmDiscovery() = default;

  // Every VM running on the host now, with its threads. An error means the
  // source could not be read at all (callers must not take it as "no VMs").
  virtual absl::StatusOr<std::vector<DiscoveredVm>> Discover() = 0;
};

}  // namespace cosched::discovery

#endif  // COSCHED_DISCOVERY_VM_DISCOVERY_H_
