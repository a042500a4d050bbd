// Finds QEMU VMs and every thread that belongs to them by scanning /proc.
#ifndef COSCHED_DISCOVERY_PROCFS_DISCOVERY_H_
#define COSCHED_DISCOVERY_PROCFS_DISCOVERY_H_

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "discovery/vm_discovery.h"
#include "discovery/vmm_identity.h"
#include "cosched/v1/types.pb.h"
#include "host/pseudo_fs.h"

namespace cosched::discovery {

// A VM is a process whose argv[0] runs qemu-system-* or qemu-kvm and that
// runs an allowed VMM binary as an allowed user (`vmm`, vmm_identity.h);
// one that looks like QEMU but fails that is an impostor: found with its
// threads (they get a fail-closed cookie of their own) but not as the VM it
// names. Its threads are:
//  - every thread of the QEMU process, classified by name (vCPU, iothread,
//    in-group vhost worker, emulator);
//  - vhost workers outside QEMU's thread group: any task named
//    "vhost-<qemu pid>" (kernel threads before Linux 6.4), with their own pid;
//  - with `include_helpers`, every thread of its helper processes, as
//    kHelper: QEMU's child processes, and processes placed in the VM's own
//    cgroup (one below a `vm_cgroup_parents` entry, see VmCgroup).
// Tasks that exit during a scan are skipped. Threads are sorted by
// (pid, tid), VMs by QEMU pid. Thread-safe when the PseudoFs is.
class ProcfsDiscovery : public VmDiscovery {
 public:
  struct Options {
    bool include_helpers = true;
    std::vector<std::string> vm_cgroup_parents = {"/machine.slice", "/machine"};
    // Where the procfs to scan is mounted.
    std::string procfs_root = "/proc";
    VmmRule vmm;
  };

  explicit ProcfsDiscovery(std::shared_ptr<const host::PseudoFs> fs);
  ProcfsDiscovery(std::shared_ptr<const host::PseudoFs> fs, Options options);

  // Errors: the status of listing the procfs root when that fails (the scan
  // as a whole is impossible). Never fails for one process or thread.
  absl::StatusOr<std::vector<DiscoveredVm>> Discover() override;

  // As Discover(), and also takes `known_qemu_pids` for QEMU processes even
  // when their command line does not look like QEMU's (e.g. a wrapper
  // binary configured as libvirt's emulator), without the `vmm` check:
  // libvirt said they are its domains'. A known pid that does not exist is
  // left out.
  absl::StatusOr<std::vector<DiscoveredVm>> Discover(std::span<const int> known_qemu_pids);

 private:
  std::shared_ptr<const host::PseudoFs> fs_;
  Options options_;
};

// Whether process `pid` runs QEMU by the rule above (its argv[0]), from
// its command line alone: one read, cheap enough for every exec on a host.
// NOT_FOUND when it has gone; the PseudoFs's error when it cannot be read.
absl::StatusOr<bool> RunsQemu(const host::PseudoFs& fs, absl::string_view procfs_root, int pid);

// The threads of `vm` that carry its cookie at `scope`: vCPUs only for
// THREAD_SCOPE_VCPUS; all but helpers for EMULATOR (and UNSPECIFIED, its
// default); all for FULL.
std::vector<DiscoveredThread> ThreadsInScope(const DiscoveredVm& vm,
                                                    v1::ThreadScope scope);

// "vcpu", "emulator", "iothread", "vhost", "helper": for logs and reports.
const char* ThreadKindName(DiscoveredThread::Kind kind);

}  // namespace cosched::discovery

#endif  // COSCHED_DISCOVERY_PROCFS_DISCOVERY_H_
