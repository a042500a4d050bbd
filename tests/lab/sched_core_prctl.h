// The few PR_SCHED_CORE calls the lab tools make, written out here on purpose:
// the lab checks the agent with its own code, not with the agent's.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

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

// The whole of a /proc file, or "" when it cannot be read. Plain read(2) on
// purpose: a task that exits mid-read makes read fail with ESRCH, and
// iostreams turn that into an exception that istreambuf_iterator does not
// catch (seen in CI: lab_tag_gap aborted while a QEMU process started).
inline std::string ReadProcFile(const std::string& path) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

// The first line of a /proc file (comm), without its newline.
inline std::string ReadProcLine(const std::string& path) {
  std::string s = ReadProcFile(path);
  return s.substr(0, s.find('\n'));
}

inline std::string ErrnoName(int err) {
  const char* name = strerrorname_np(err);
  return name ? name : "errno" + std::to_string(err);
}

}  // namespace cosched::lab
