// The agent's safety preflight: the host facts that decide whether setting
// core-scheduling cookies is safe and worth it here. Read through PseudoFs
// (absolute paths under configurable roots), so every probe is tested over
// a fake sysfs with files missing, unreadable or holding garbage. A probe
// that cannot read its file leaves its field empty; it never fails the
// preflight as a whole.
#ifndef COSCHED_HOST_PREFLIGHT_H_
#define COSCHED_HOST_PREFLIGHT_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/config.pb.h"
#include "cosched/v1/types.pb.h"
#include "host/pseudo_fs.h"

namespace cosched::host {

struct PreflightPaths {
  std::string sysfs_root = "/sys";
  std::string procfs_root = "/proc";
  // Where the kernel's sched_ext state is: `state` and `root/ops` below it.
  // Tests point it at a stand-in directory.
  std::string sched_ext_dir = "/sys/kernel/sched_ext";
  // cgroup v2's root (its cpu.stat says whether forced idle is counted).
  std::string cgroupfs_root = "/sys/fs/cgroup";
  // libvirt's QEMU driver config, for its own core scheduling (sched_core).
  std::string libvirt_qemu_conf = "/etc/libvirt/qemu.conf";
};

// libvirt's sched_core setting from the text of qemu.conf: the last
// uncommented `sched_core = "..."`, bounded and printable; "none" (libvirt's
// default) when the file sets none.
std::string LibvirtSchedCore(absl::string_view qemu_conf);

// Hazard names an operator may allow (allow_hazards).
inline constexpr char kHazardSchedExt[] = "sched_ext";
// The host is itself a guest, where the operator says that is a hazard
// (Cloud Hypervisor issue 7792: core scheduling made VMMs segfault in a
// nested setup).
inline constexpr char kHazardNested[] = "nested";
// INVALID_ARGUMENT naming `field`[i] for a name that is not a hazard:
// sched_ext, nested, or known_bad:ID (an entry of the known-bad list).
absl::Status ValidateHazardNames(absl::string_view field, const std::vector<std::string>& names);

// Issues that leak between the SMT siblings of one core, which keeping
// other tenants off a VM's siblings addresses: L1TF, MDS, TAA and MMIO
// stale data (the kernel's core-scheduling admin guide; ChromeOS turns
// core scheduling on only where l1tf or mds say affected).
bool SmtRelevantVulnerability(absl::string_view name);

// Reads every fact of HostPreflight except the hazards.
v1::HostPreflight ReadPreflight(const PseudoFs& fs, const PreflightPaths& paths);

// Only the sched_ext state and scheduler: cheap enough to poll a few times
// a second, which is how a scheduler loaded later is seen within a second
// (sysfs attributes do not notify inotify).
void ReadSchedExt(const PseudoFs& fs, const PreflightPaths& paths, v1::HostPreflight& preflight);

struct HazardRules {
  // Hazards present but allowed: reported apart, not acted on.
  std::set<std::string> allow = {};
  // Running nested (HostPreflight.nested) is a hazard.
  bool nested = false;
  // The known-bad list's entries (host/known_bad.h, validated): each that
  // matches is the hazard "known_bad:ID".
  std::vector<v1::KnownBadEntry> known_bad = {};
};

// Fills preflight.hazards (and allowed_hazards) from its facts. A sched_ext
// state other than "disabled" is a hazard: a scheduler being enabled or
// disabled is as unsafe as one running.
void FindHazards(const HazardRules& rules, v1::HostPreflight& preflight);

}  // namespace cosched::host

#endif  // COSCHED_HOST_PREFLIGHT_H_
