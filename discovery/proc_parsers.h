// Pure parsers for what discovery reads from /proc: QEMU command lines,
// thread names, /proc/<pid>/stat and /proc/<pid>/cgroup. No I/O.
#ifndef COSCHED_DISCOVERY_PROC_PARSERS_H_
#define COSCHED_DISCOVERY_PROC_PARSERS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "discovery/vm_discovery.h"

namespace cosched::discovery {

// What identifies a VM on a QEMU command line.
struct QemuCommandLine {
  // From -name guest=NAME,... or -name NAME,...; empty without -name.
  std::string name;
  // From -uuid, in lower case; empty without it.
  std::string uuid;

  // The VM id: the name, else the UUID.
  std::string VmId() const { return name.empty() ? uuid : name; }

  bool operator==(const QemuCommandLine&) const = default;
};

// True when `argv0`'s basename starts with "qemu-system-" or "qemu-kvm".
bool IsQemuBinary(absl::string_view argv0);

// The -name and -uuid of any NUL-separated command line, whatever argv[0].
QemuCommandLine ParseQemuArguments(absl::string_view cmdline);

// Parses the NUL-separated content of /proc/<pid>/cmdline. nullopt when the
// process is not a QEMU VM (another program, a kernel thread, a zombie).
// Option values follow QEMU's syntax: "a,,b" is the value "a,b".
std::optional<QemuCommandLine> ParseQemuCommandLine(absl::string_view cmdline);

// The kind of a thread of QEMU process `qemu_pid` from its comm (without the
// trailing newline): "CPU <n>/KVM", "CPU <n>/TCG" -> kVcpu; "IO <id>" ->
// kIothread; "vhost-<qemu_pid>" -> kVhostWorker; else kEmulator.
DiscoveredThread::Kind ClassifyQemuThread(absl::string_view comm, int qemu_pid);

// The comm of a vhost worker of QEMU process `qemu_pid`: "vhost-<qemu_pid>".
std::string VhostWorkerName(int qemu_pid);

// The fields of /proc/<pid>/stat that discovery uses.
struct ProcStat {
  int pid = 0;
  std::string comm;
  char state = '?';
  int ppid = 0;

  bool operator==(const ProcStat&) const = default;
};

// Parses /proc/<pid>/stat. The comm is in parentheses and may itself
// contain spaces, parentheses and ") ": it ends at the LAST ')'.
// INVALID_ARGUMENT when the text is not a stat line.
absl::StatusOr<ProcStat> ParseProcStat(absl::string_view text);

// One line of /proc/<pid>/cgroup: "hierarchy-id:controllers:path".
struct CgroupEntry {
  int hierarchy = 0;
  // Empty for the cgroup v2 line ("0::/path"); "name=systemd" style names
  // are kept as they are.
  std::vector<std::string> controllers;
  std::string path;

  bool operator==(const CgroupEntry&) const = default;
};

// Parses /proc/<pid>/cgroup (v1, v2 or hybrid). INVALID_ARGUMENT names the
// bad line.
absl::StatusOr<std::vector<CgroupEntry>> ParseCgroupFile(absl::string_view text);

// The cgroup that best says where the process is placed: the v2 path when it
// is not "/" (pure v2, or hybrid with a populated unified tree), else the v1
// path of the "cpu" controller, else the v2 path, else "".
std::string PlacementCgroup(const std::vector<CgroupEntry>& entries);

// The cgroup of the VM that a process placed at `path` belongs to, when that
// cgroup is one VM's own: libvirt's inner groups ("emulator", "vcpuN",
// "iothreadN", "libvirt") are stripped from the end, and the rest must lie
// strictly below one of `vm_parents` (e.g. "/machine.slice",
// "/machine"). nullopt otherwise, e.g. for a shared session cgroup, so
// that processes are never taken for a VM's helpers just because they share
// a user's cgroup.
std::optional<std::string> VmCgroup(absl::string_view path,
                                    const std::vector<std::string>& vm_parents);

}  // namespace cosched::discovery

#endif  // COSCHED_DISCOVERY_PROC_PARSERS_H_
