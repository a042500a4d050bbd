// An in-memory kernel for CoreSched: tasks with cookies, the same errors as
// prctl(PR_SCHED_CORE), and counts of calls so tests and benchmarks can
// assert how many writes a reconcile made.
#ifndef COSCHED_HOST_TESTING_CORE_SCHED_FAKE_H_
#define COSCHED_HOST_TESTING_CORE_SCHED_FAKE_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "host/core_sched.h"

namespace cosched::host {

// Thread-safe. Cookies are not inherited (there is no fork here): a task has
// the cookie it was given with AddTask or by a call.
class FakeCoreSched : public CoreSched {
 public:
  // What the whole fake kernel answers, like a host's kernel would.
  enum class Mode {
    kSupported,
    kNoSmt,            // every call fails with ENODEV
    kNoKernelSupport,  // every call fails with EINVAL
    kNoPermission,     // every call fails with EPERM
  };

  // The kernel acts on "the calling thread" for GET(0), SHARE_FROM and the
  // source of SHARE_TO. Here that is a task id: the one set with
  // SetCallerTid for the calling std::thread, else `default_caller_tid`.
  // The default caller task exists from the start, in its own group.
  explicit FakeCoreSched(int default_caller_tid = 1);

  // Adds (or replaces) task `tid` of thread group `tgid` and process group
  // `pgid` (-1: the same as tgid) holding `cookie` (0 = none).
  void AddTask(int tid, int tgid, int pgid = -1, uint64_t cookie = 0);
  // The task exits: later calls on it fail with ESRCH.
  void RemoveTask(int tid);
  // Makes calls from the current std::thread act as task `tid` (added if
  // missing).
  void SetCallerTid(int tid);
  void SetMode(Mode mode);
  // Calls that target `tid` fail with `err` (0 clears).
  void SetTaskErrno(int tid, int err);
  // Linux 6.1 before its pointer-hash key is ready: GET succeeds and reads
  // 0 for every task, cookies or not; everything else works.
  void SetReadbackBlind(bool blind);

  // The cookie task `tid` holds, 0 for none or an unknown task.
  uint64_t CookieOf(int tid) const;
  // Create, ShareTo and ShareFrom calls, failed ones included.
  int write_calls() const;
  int get_calls() const;
  // Tasks whose cookie a SHARE_TO took away (from a cookie to none), over
  // the fake's life: a VM thread that was at cookie 0 for a while, which
  // its final state no longer shows.
  int cookies_cleared() const;
  void ResetCallCounts();

  absl::StatusOr<uint64_t> Get(int tid) override;
  absl::Status Create(int pid, CoreSchedScope scope) override;
  absl::Status ShareTo(int pid, CoreSchedScope scope) override;
  absl::Status ShareFrom(int tid) override;
  CoreSchedProbe Probe() override;
  // A courier is a fresh task in the default caller's thread group with the
  // default caller's cookie, gone at its end.
  void OnCourierStart() override;
  void OnCourierEnd() override;

 private:
  struct Task {
    int tgid = 0;
    int pgid = 0;
    uint64_t cookie = 0;
  };

  int CallerLocked() const;
  // 0 or the errno a call on `tid` gets.
  int CheckLocked(int tid) const;
  std::vector<int> TargetsLocked(int pid, CoreSchedScope scope) const;

  const int default_caller_tid_;
  mutable std::mutex mu_;
  Mode mode_ = Mode::kSupported;
  bool readback_blind_ = false;
  std::map<int, Task> tasks_;
  std::map<int, int> task_errno_;
  std::map<std::thread::id, int> caller_tids_;
  uint64_t next_cookie_ = 1;
  int next_courier_tid_ = 1 << 30;
  int write_calls_ = 0;
  int get_calls_ = 0;
  int cookies_cleared_ = 0;
};

}  // namespace cosched::host

#endif  // COSCHED_HOST_TESTING_CORE_SCHED_FAKE_H_
