// A CoreSched that reads the real kernel and keeps every write to itself:
// cs-agent's observe mode (cs-agent.yaml enforce: observe) runs the cookie
// reconciler over it, so that what enforcing would do is worked out by the
// code that enforces, from the cookies the kernel holds now, and no cookie
// changes.
#ifndef COSCHED_HOST_CORE_SCHED_SHADOW_H_
#define COSCHED_HOST_CORE_SCHED_SHADOW_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

#include "host/core_sched.h"

namespace cosched::host {

// Thread-safe. Reads go to `kernel` (so a thread that is gone, or one the
// agent may not touch, fails as it would there) and then see the writes
// made here. Only thread scope is modelled: CREATE and SHARE_TO of a
// thread group or process group are UNIMPLEMENTED. A cookie made here has
// a hash of its own, never one the kernel gave.
class ShadowCoreSched : public CoreSched {
 public:
  // `kernel` must outlive this object.
  explicit ShadowCoreSched(CoreSched* kernel);

  // Create, ShareTo and ShareFrom calls that succeeded: the writes
  // enforcing would have made.
  int writes() const;

  absl::StatusOr<uint64_t> Get(int tid) override;
  absl::Status Create(int pid, CoreSchedScope scope) override;
  absl::Status ShareTo(int pid, CoreSchedScope scope) override;
  absl::Status ShareFrom(int tid) override;
  CoreSchedProbe Probe() override;
  // A courier starts with the cookie its real thread has (its creator's)
  // and its shadow cookie is forgotten at its end.
  void OnCourierStart() override;
  void OnCourierEnd() override;

 private:
  // The calling thread's cookie: its shadow one, else the kernel's.
  absl::StatusOr<uint64_t> CallerCookie();
  static absl::Status ThreadScopeOnly(CoreSchedScope scope, const char* command, int pid);

  CoreSched* const kernel_;
  mutable std::mutex mu_;
  // Threads given a cookie here, by tid; callers (couriers) by std::thread.
  std::map<int, uint64_t> tasks_;
  std::map<std::thread::id, uint64_t> callers_;
  uint64_t next_cookie_;
  int writes_ = 0;
};

}  // namespace cosched::host

#endif  // COSCHED_HOST_CORE_SCHED_SHADOW_H_
