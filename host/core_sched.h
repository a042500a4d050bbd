// The kernel's core-scheduling interface, prctl(PR_SCHED_CORE), behind an
// interface so that tagging logic can run against a fake kernel.
#ifndef COSCHED_HOST_CORE_SCHED_H_
#define COSCHED_HOST_CORE_SCHED_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/types.pb.h"

namespace cosched::host {

// Which tasks a CREATE or SHARE_TO applies to (the kernel's scope values).
enum class CoreSchedScope {
  kThread = 0,
  kThreadGroup = 1,
  kProcessGroup = 2,
};

// What prctl(PR_SCHED_CORE, GET) on the agent's own thread says about the
// host, with a message for people.
struct CoreSchedProbe {
  v1::CoreSchedSupport support = v1::CORE_SCHED_SUPPORT_UNSPECIFIED;
  std::string detail;
};

// Implementations are thread-safe. Every method maps the kernel's errno to a
// status through CoreSchedErrnoStatus: NOT_FOUND (the thread is gone),
// PERMISSION_DENIED (no ptrace access), FAILED_PRECONDITION (no SMT),
// UNIMPLEMENTED (kernel without CONFIG_SCHED_CORE).
class CoreSched {
 public:
  virtual ~CoreSched() = default;

  // The hash of thread `tid`'s cookie; 0 when it has none, 0 = the calling
  // thread. Equal hashes mean the same cookie, nothing more.
  virtual absl::StatusOr<uint64_t> Get(int tid) = 0;
  // Gives the tasks of `pid` in `scope` a new cookie of their own.
  virtual absl::Status Create(int pid, CoreSchedScope scope) = 0;
  // Gives the tasks of `pid` in `scope` the calling thread's cookie.
  virtual absl::Status ShareTo(int pid, CoreSchedScope scope) = 0;
  // Gives the calling thread the cookie of thread `tid`.
  virtual absl::Status ShareFrom(int tid) = 0;
  // Whether the host can do core scheduling, from a GET on the calling
  // thread (see CoreSchedProbeFromErrno). Never fails.
  virtual CoreSchedProbe Probe() = 0;

  // Called first on each short-lived "courier" thread that carries a cookie
  // from one task to others (SHARE_FROM, then SHARE_TO), and last before it
  // ends. The real kernel needs nothing: a new thread starts with its
  // creator's cookie (the agent's: none) and the cookie it picked up dies
  // with it. A fake kernel models the courier as a task of its own.
  virtual void OnCourierStart() {}
  virtual void OnCourierEnd() {}
};

// The status for errno `err` of prctl(PR_SCHED_CORE) command `command`
// ("GET", "CREATE", ...) on task `pid`: the codes named above, INTERNAL for
// anything else. `err` = 0 gives OK.
absl::Status CoreSchedErrnoStatus(int err, absl::string_view command, int pid);

// The probe result for the errno of a GET on the calling thread (0 = it
// worked): SUPPORTED, NO_SMT (ENODEV), NO_KERNEL_SUPPORT (EINVAL),
// NO_PERMISSION (EPERM); UNSPECIFIED for anything else. The detail is never
// empty.
CoreSchedProbe CoreSchedProbeFromErrno(int err);

// "ENODEV", "EINVAL", ... for the errnos prctl(PR_SCHED_CORE) returns, else
// "errno N".
std::string ErrnoName(int err);

}  // namespace cosched::host

#endif  // COSCHED_HOST_CORE_SCHED_H_
