#include "host/core_sched.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cosched::host {

std::string ErrnoName(int err) {
  switch (err) {
    case ESRCH: return "ESRCH";
    case EPERM: return "EPERM";
    case ENODEV: return "ENODEV";
    case EINVAL: return "EINVAL";
    case EFAULT: return "EFAULT";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    default: return absl::StrCat("errno ", err);
  }
}

absl::Status CoreSchedErrnoStatus(int err, absl::string_view command,
                                  int pid) {
  if (err == 0) return absl::OkStatus();
  const std::string call =
      absl::StrCat("prctl(PR_SCHED_CORE, ", command, ", ", pid, ") failed with ",
                   ErrnoName(err), ": ");
  switch (err) {
    case ESRCH:
      return absl::NotFoundError(absl::StrCat(call, "thread ", pid, " is gone"));
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat(
          call, "no ptrace access to ", pid, ": needs CAP_SYS_PTRACE"));
    case ENODEV:
      return absl::FailedPreconditionError(
          absl::StrCat(call, "no SMT on this host"));
    case EINVAL:
      return absl::UnimplementedError(absl::StrCat(
          call, "kernel lacks core scheduling (CONFIG_SCHED_CORE)"));
    default:
      return absl::InternalError(absl::StrCat(call, strerror(err)));
  }
}

CoreSchedProbe CoreSchedProbeFromErrno(int err) {
  CoreSchedProbe probe;
  const std::string prefix =
      absl::StrCat("prctl(PR_SCHED_CORE, GET) on the agent's own thread");
  switch (err) {
    case 0:
      probe.support = v1::CORE_SCHED_SUPPORT_SUPPORTED;
      probe.detail = absl::StrCat(prefix, " works: core scheduling is available");
      break;
    case ENODEV:
      probe.support = v1::CORE_SCHED_SUPPORT_NO_SMT;
      probe.detail = absl::StrCat(prefix, " failed with ENODEV: no SMT on this host");
      break;
    case EINVAL:
      probe.support = v1::CORE_SCHED_SUPPORT_NO_KERNEL_SUPPORT;
      probe.detail = absl::StrCat(
          prefix,
          " failed with EINVAL: kernel lacks core scheduling (CONFIG_SCHED_CORE)");
      break;
    case EPERM:
      probe.support = v1::CORE_SCHED_SUPPORT_NO_PERMISSION;
      probe.detail = absl::StrCat(prefix,
                                  " failed with EPERM: the agent lacks the "
                                  "privilege (run as root or with "
                                  "CAP_SYS_PTRACE)");
      break;
    default:
      probe.support = v1::CORE_SCHED_SUPPORT_UNSPECIFIED;
      probe.detail = absl::StrCat(prefix, " failed with ", ErrnoName(err), ": ",
                                  strerror(err));
      break;
  }
  return probe;
}

}  // namespace cosched::host
