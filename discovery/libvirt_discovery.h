// Discovery of libvirt's QEMU domains, with lifecycle events.
#ifndef COSCHED_DISCOVERY_LIBVIRT_DISCOVERY_H_
#define COSCHED_DISCOVERY_LIBVIRT_DISCOVERY_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "discovery/vm_discovery.h"
#include "cosched/v1/types.pb.h"
#include "discovery/procfs_discovery.h"

namespace cosched::discovery {

// A domain lifecycle event (libvirt's VIR_DOMAIN_EVENT_*).
struct DomainEvent {
  enum class Kind {
    kDefined,
    kUndefined,
    kStarted,
    kSuspended,
    kResumed,
    kStopped,
    kShutdown,
    kPmSuspended,
    kCrashed,
    kOther,
    // Not a domain's: the connection to libvirtd was re-opened (it
    // restarted). Events in between were lost; rescan everything.
    kReconnected,
    // The domain's <metadata> changed (VIR_DOMAIN_EVENT_ID_METADATA_CHANGE;
    // detail: its VIR_DOMAIN_METADATA_* type).
    kMetadataChanged,
  };
  // Empty for kReconnected.
  std::string name;
  std::string uuid;
  Kind kind = Kind::kOther;
  // libvirt's detail code (VIR_DOMAIN_EVENT_STARTED_BOOTED, ...).
  int detail = 0;
};

// "defined", "started", "stopped", ...
const char* DomainEventKindName(DomainEvent::Kind kind);

// The run state csd is told for a libvirt domain, from virDomainGetState's
// `state` and `reason` (VIR_DOMAIN_* values), the async job of its status
// XML (LibvirtDomainStatus::async_job, "" when none or unknown) and whether
// this agent has seen the domain running since it became active here.
//
// PAUSED for MIGRATION is both ends of a migration: a destination starts
// the incoming domain paused with that reason, and a source pauses with it
// at the end of pre-copy (or for an offline migration). The async job tells
// them apart ("migration in" / "migration out"). Without it (status XML
// unreadable, or between libvirt's jobs), a domain seen running here is the
// source, one never seen running the destination: an incoming domain never
// runs on its destination before the migration ends. PAUSED for POSTCOPY is
// the source (the destination runs, RUNNING with reason POSTCOPY), and
// SHUTOFF for MIGRATED a source whose domain has left. BLOCKED and SHUTDOWN
// (still shutting down) run; PMSUSPENDED and other pauses are PAUSED;
// CRASHED and other SHUTOFF are SHUT_OFF; NOSTATE is UNSPECIFIED.
v1::VMRunState LibvirtRunState(int state, int reason, absl::string_view async_job,
                               bool seen_running);

// Called on libvirt's event thread; must return quickly (e.g. wake the
// reconciler) and must not destroy the LibvirtDiscovery.
using DomainEventListener = std::function<void(const DomainEvent&)>;

// The active domains of a libvirt QEMU driver. Name and UUID come from the
// libvirt API, and so does the tenancy in each domain's <metadata>
// (domain_metadata_xml.h; read again after metadata-change, define and
// start events when a listener is set, else on every Discover()); the QEMU pid and the vCPU thread ids from libvirt's status
// XML (<status_dir>/<name>.xml, readable by root only); when that cannot be
// read, the domain is matched to a QEMU process by its -uuid, then its
// -name. All other threads (iothreads, emulator threads, vhost workers,
// helpers) come from the procfs scan, as for ProcfsDiscovery.
//
// The connection is read-only. When libvirtd goes away (restart), the
// connection is re-opened by the next Discover() and, when a listener is
// set, within `reconnect_interval_ms` by the event thread, and the event
// subscription renewed. A missing libvirtd is not an error at construction.
// libvirt's own error printing to stderr is turned off; errors are
// logged with glog and returned as statuses.
// Thread-safe.
class LibvirtDiscovery : public VmDiscovery {
 public:
  struct Options {
    std::string uri = "qemu:///system";
    std::string status_dir = "/run/libvirt/qemu";
    // Optional; enables the event thread.
    DomainEventListener listener;
    int reconnect_interval_ms = 1000;
    ProcfsDiscovery::Options procfs;
  };

  // `fs` is where QEMU's threads are read (LocalPseudoFs normally), at
  // `options.procfs.procfs_root`.
  LibvirtDiscovery(Options options, std::shared_ptr<const host::PseudoFs> fs);
  ~LibvirtDiscovery() override;
  LibvirtDiscovery(const LibvirtDiscovery&) = delete;
  LibvirtDiscovery& operator=(const LibvirtDiscovery&) = delete;

  // The libvirt-managed VMs: vm_id is the domain name, uuid libvirt's.
  // Errors: UNAVAILABLE when libvirtd cannot be reached (with libvirt's
  // message), the procfs scan's error when /proc cannot be read.
  absl::StatusOr<std::vector<DiscoveredVm>> Discover() override;

  // As Discover(), plus, from the same procfs scan, the QEMU processes that
  // libvirt does not manage (after libvirt's domains, by QEMU pid), each an
  // impostor: where libvirt runs, a VM is a process libvirt runs for it.
  absl::StatusOr<std::vector<DiscoveredVm>> DiscoverWithUnmanaged();

  // True while the connection to libvirtd is open.
  bool connected() const;

 private:
  struct State;
  absl::StatusOr<std::vector<DiscoveredVm>> Discover(bool include_unmanaged);

  std::shared_ptr<State> state_;
  ProcfsDiscovery procfs_;
  std::shared_ptr<const host::PseudoFs> fs_;
};

// While libvirtd is away: marks as impostors the VMs of `vms` that
// `libvirt_vms` (QEMU pid -> domain name, as libvirt last said) does not
// name as they claim.
void MarkVmsLibvirtDidNotName(std::vector<DiscoveredVm>& vms,
                              const std::map<int, std::string>& libvirt_vms);

// libvirt's domains, and the QEMU processes it does not manage (as
// impostors), in one scan; when libvirtd cannot be reached, the QEMU
// processes of procfs (their -name is the domain name for libvirt's), so
// that an agent keeps protecting its VMs while libvirtd restarts. Once
// libvirt has been reached, only the processes it last said run a domain
// are that domain then; any other is an impostor. Thread-safe.
class CombinedDiscovery : public VmDiscovery {
 public:
  CombinedDiscovery(std::unique_ptr<LibvirtDiscovery> libvirt,
                    std::unique_ptr<ProcfsDiscovery> procfs);

  // Errors: only the procfs scan's (the host's /proc cannot be read).
  absl::StatusOr<std::vector<DiscoveredVm>> Discover() override;

 private:
  std::unique_ptr<LibvirtDiscovery> libvirt_;
  std::unique_ptr<ProcfsDiscovery> procfs_;
  std::mutex mu_;
  bool libvirt_seen_ = false;              // guarded by mu_
  std::map<int, std::string> libvirt_vms_;  // QEMU pid -> domain; guarded by mu_
};

}  // namespace cosched::discovery

#endif  // COSCHED_DISCOVERY_LIBVIRT_DISCOVERY_H_
