// Which processes may be VMs. Any program can set its own argv, so a
// process that calls itself "qemu-system-x86_64 -name guest=acme-vm-9" is
// not taken at its word: it must run an allowed VMM binary as an allowed
// user. One that claims a VM and fails is an impostor (vm_discovery.h).
#ifndef COSCHED_DISCOVERY_VMM_IDENTITY_H_
#define COSCHED_DISCOVERY_VMM_IDENTITY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "host/pseudo_fs.h"

namespace cosched::discovery {

struct VmmRule {
  // fnmatch(3) patterns (FNM_PATHNAME) of the binaries a VM may run, as
  // /proc/<pid>/exe names them. A binary that an upgrade replaced while the
  // VM runs (" (deleted)") still counts by its path.
  std::vector<std::string> binaries = DefaultBinaries();
  // The users a VM may run as: both its real and its effective uid must be
  // one of these.
  std::vector<uint32_t> uids = {0};

  // Debian's QEMU binaries, and the paths other distributions use.
  static std::vector<std::string> DefaultBinaries();
};

// nullopt when process `pid` (under procfs `root`) runs an allowed binary
// as an allowed user; else why not, for logs and Reports. A process that
// cannot be checked (its exe or status unreadable) is not allowed.
std::optional<std::string> VmmRuleViolation(const host::PseudoFs& fs, absl::string_view root,
                                            int pid, const VmmRule& rule);

// The real and effective uid from the text of /proc/<pid>/status.
// INVALID_ARGUMENT when it has no well-formed "Uid:" line.
struct ProcessUids {
  uint32_t real = 0;
  uint32_t effective = 0;
};
absl::StatusOr<ProcessUids> ParseStatusUids(absl::string_view status);

// The uids of `users` (names, or numbers as text). INVALID_ARGUMENT naming
// `field` and the user for one that does not exist, unless
// `skip_missing` (for the defaults: libvirt-qemu exists only with libvirt).
absl::StatusOr<std::vector<uint32_t>> ResolveUsers(const std::vector<std::string>& users,
                                                   absl::string_view field, bool skip_missing);

}  // namespace cosched::discovery

#endif  // COSCHED_DISCOVERY_VMM_IDENTITY_H_
