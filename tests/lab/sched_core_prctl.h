// The few PR_SCHED_CORE calls the lab tools make, written out here on purpose:
// the lab checks the agent with its own code, not with the agent's.
#pragma once

#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace cosched::lab {

// Values from linux/prctl.h (Linux 5.14), repeated so the tools build with
// older headers too.
inline constexpr int kPrSchedCore = 62;
inline constexpr int kGet = 0, kCreate = 1, kShareTo = 2, kShareFrom = 3;
inline constexpr int kScopeThread = 0, kScopeThreadGroup = 1, kScopeProcessGroup = 2;

// 0 on success, else the errno (ESRCH: gone, EPERM: no ptrace access,
// ENODEV: no SMT, EINVAL: no CONFIG_SCHED_CORE).
inline int SchedCoreCall(int cmd, pid_t pid, int scope, uint64_t* cookie) {
  unsigned long addr = reinterpret_cast<unsigned long>(cookie);
  if (prctl(kPrSchedCore, cmd, static_cast<unsigned long>(pid), static_cast<unsigned long>(scope), addr) == 0)
    return 0;
  return errno;
}

inline std::string ErrnoName(int err) {
  const char* name = strerrorname_np(err);
  return name ? name : "errno" + std::to_string(err);
}

}  // namespace cosched::lab
