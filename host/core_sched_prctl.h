// CoreSched on the running kernel, through prctl(PR_SCHED_CORE).
#ifndef COSCHED_HOST_CORE_SCHED_PRCTL_H_
#define COSCHED_HOST_CORE_SCHED_PRCTL_H_

#include "host/core_sched.h"

namespace cosched::host {

// Thread-safe: each call acts on the calling thread where the kernel says so
// (ShareFrom, ShareTo's source, Get(0)).
class PrctlCoreSched : public CoreSched {
 public:
  absl::StatusOr<uint64_t> Get(int tid) override;
  absl::Status Create(int pid, CoreSchedScope scope) override;
  absl::Status ShareTo(int pid, CoreSchedScope scope) override;
  absl::Status ShareFrom(int tid) override;
  CoreSchedProbe Probe() override;
};

}  // namespace cosched::host

#endif  // COSCHED_HOST_CORE_SCHED_PRCTL_H_
