#include "host/core_sched_prctl.h"

#include <linux/prctl.h>
#include <sys/prctl.h>

#include <cerrno>

namespace cosched::host {
namespace {

// Older kernel headers lack these; the values are the kernel's ABI.
#ifndef PR_SCHED_CORE
#define PR_SCHED_CORE 62
#define PR_SCHED_CORE_GET 0
#define PR_SCHED_CORE_CREATE 1
#define PR_SCHED_CORE_SHARE_TO 2
#define PR_SCHED_CORE_SHARE_FROM 3
#endif

// Returns 0 or the errno of the call.
int SchedCore(unsigned long command, int pid, CoreSchedScope scope,
              uint64_t* cookie) {
  int rc = prctl(PR_SCHED_CORE, command, static_cast<unsigned long>(pid),
                 static_cast<unsigned long>(scope),
                 reinterpret_cast<unsigned long>(cookie));
  return rc == 0 ? 0 : errno;
}

}  // namespace

absl::StatusOr<uint64_t> PrctlCoreSched::Get(int tid) {
  uint64_t cookie = 0;
  int err = SchedCore(PR_SCHED_CORE_GET, tid, CoreSchedScope::kThread, &cookie);
  if (err != 0) return CoreSchedErrnoStatus(err, "GET", tid);
  return cookie;
}

absl::Status PrctlCoreSched::Create(int pid, CoreSchedScope scope) {
  return CoreSchedErrnoStatus(
      SchedCore(PR_SCHED_CORE_CREATE, pid, scope, nullptr), "CREATE", pid);
}

absl::Status PrctlCoreSched::ShareTo(int pid, CoreSchedScope scope) {
  return CoreSchedErrnoStatus(
      SchedCore(PR_SCHED_CORE_SHARE_TO, pid, scope, nullptr), "SHARE_TO", pid);
}

absl::Status PrctlCoreSched::ShareFrom(int tid) {
  return CoreSchedErrnoStatus(
      SchedCore(PR_SCHED_CORE_SHARE_FROM, tid, CoreSchedScope::kThread, nullptr),
      "SHARE_FROM", tid);
}

CoreSchedProbe PrctlCoreSched::Probe() {
  uint64_t cookie = 0;
  return CoreSchedProbeFromErrno(
      SchedCore(PR_SCHED_CORE_GET, 0, CoreSchedScope::kThread, &cookie));
}

}  // namespace cosched::host
