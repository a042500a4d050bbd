// Fuzzes the parsers of what discovery reads from /proc (discovery/
// proc_parsers.h): every parser gets the same bytes, as if a process had
// put them in its cmdline, comm, stat or cgroup file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "discovery/proc_parsers.h"

namespace cosched::discovery {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void FuzzOne(absl::string_view text, int qemu_pid) {
  IsQemuBinary(text);
  QemuCommandLine args = ParseQemuArguments(text);
  std::optional<QemuCommandLine> cmdline = ParseQemuCommandLine(text);
  if (cmdline) {
    // A QEMU command line names the VM the same way as any command line.
    Check(*cmdline == args);
    cmdline->VmId();
  }

  ClassifyQemuThread(text, qemu_pid);
  Check(ClassifyQemuThread(VhostWorkerName(qemu_pid), qemu_pid) ==
        discovery::DiscoveredThread::Kind::kVhostWorker);

  absl::StatusOr<ProcStat> stat = ParseProcStat(text);
  if (stat.ok()) Check(stat->comm.size() <= text.size());

  const std::vector<std::string> parents = {"/machine.slice", "/machine"};
  absl::StatusOr<std::vector<CgroupEntry>> cgroups = ParseCgroupFile(text);
  if (cgroups.ok()) {
    std::string placement = PlacementCgroup(*cgroups);
    VmCgroup(placement, parents);
  }
  std::optional<std::string> vm = VmCgroup(text, parents);
  // The VM's cgroup lies strictly below a parent.
  if (vm) Check(vm->size() > std::string("/machine").size());
}

}  // namespace
}  // namespace cosched::discovery

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first 4 bytes are the QEMU pid ClassifyQemuThread compares with.
  int pid = 1;
  if (size >= 4) {
    std::memcpy(&pid, data, 4);
    data += 4;
    size -= 4;
  }
  cosched::discovery::FuzzOne(
      absl::string_view(reinterpret_cast<const char*>(data), size), pid);
  return 0;
}
