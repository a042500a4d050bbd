// The real CpuAffinity: sched_setaffinity/sched_getaffinity on one thread.
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "host/core_sched.h"
#include "host/cpu_affinity.h"

namespace cosched::host {
namespace {

// sched_getaffinity fails with EINVAL when the mask is smaller than the
// kernel's CPU count; masks grow up to this many CPUs before giving up.
constexpr int kMaxCpus = 1 << 16;

struct CpuSetFree {
  void operator()(cpu_set_t* set) const { CPU_FREE(set); }
};
using CpuSetPtr = std::unique_ptr<cpu_set_t, CpuSetFree>;

}  // namespace

absl::Status CpuAffinityErrnoStatus(int err, absl::string_view call, int tid,
                                    const CpuSet& cpus) {
  if (err == 0) return absl::OkStatus();
  std::string head = absl::StrCat(call, "(", tid);
  if (!cpus.empty()) absl::StrAppend(&head, ", CPUs ", cpus.ToString());
  absl::StrAppend(&head, ") failed with ", ErrnoName(err), ": ");
  switch (err) {
    case ESRCH:
      return absl::NotFoundError(
          absl::StrCat(head, "thread ", tid, " is gone"));
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat(
          head, "no permission to change the CPU affinity of thread ", tid,
          ": needs CAP_SYS_NICE"));
    case EINVAL:
      return absl::InvalidArgumentError(absl::StrCat(
          head, "no CPU of the set is online and allowed to thread ", tid,
          " (its cgroup cpuset may exclude them)"));
    default:
      return absl::InternalError(absl::StrCat(head, strerror(err)));
  }
}

absl::StatusOr<CpuSet> LinuxCpuAffinity::Get(int tid) {
  for (int ncpus = CPU_SETSIZE; ncpus <= kMaxCpus; ncpus *= 2) {
    CpuSetPtr set(CPU_ALLOC(ncpus));
    if (!set) return absl::ResourceExhaustedError("CPU_ALLOC failed");
    const size_t size = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(size, set.get());
    if (sched_getaffinity(tid, size, set.get()) != 0) {
      const int err = errno;
      if (err == EINVAL) continue;  // the kernel has more CPUs than the mask
      return CpuAffinityErrnoStatus(err, "sched_getaffinity", tid);
    }
    std::vector<int> cpus;
    for (int cpu = 0; cpu < ncpus; ++cpu) {
      if (CPU_ISSET_S(cpu, size, set.get())) cpus.push_back(cpu);
    }
    return CpuSet(std::move(cpus));
  }
  return CpuAffinityErrnoStatus(EINVAL, "sched_getaffinity", tid);
}

absl::Status LinuxCpuAffinity::Set(int tid, const CpuSet& cpus) {
  if (cpus.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sched_setaffinity(", tid, ") asked for an empty CPU set"));
  }
  const int ncpus = cpus.cpus().back() + 1;
  if (ncpus > kMaxCpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sched_setaffinity(", tid, "): CPU ", ncpus - 1, " is out of range"));
  }
  CpuSetPtr set(CPU_ALLOC(ncpus));
  if (!set) return absl::ResourceExhaustedError("CPU_ALLOC failed");
  const size_t size = CPU_ALLOC_SIZE(ncpus);
  CPU_ZERO_S(size, set.get());
  for (int cpu : cpus.cpus()) CPU_SET_S(cpu, size, set.get());
  if (sched_setaffinity(tid, size, set.get()) != 0) {
    return CpuAffinityErrnoStatus(errno, "sched_setaffinity", tid, cpus);
  }
  return absl::OkStatus();
}

}  // namespace cosched::host
