// An in-memory CpuAffinity: threads with their CPU sets, the same errors as
// sched_setaffinity, and counts of calls so tests can assert how many writes
// a pass made.
#ifndef COSCHED_HOST_TESTING_CPU_AFFINITY_FAKE_H_
#define COSCHED_HOST_TESTING_CPU_AFFINITY_FAKE_H_

#include <map>
#include <mutex>

#include "host/cpu_affinity.h"

namespace cosched::host {

// Thread-safe. Unknown threads are gone (NOT_FOUND). Like the kernel, Set
// narrows the set to the CPUs the thread's cpuset allows (default: every
// host CPU) and fails with EINVAL when nothing is left.
class FakeCpuAffinity : public CpuAffinity {
 public:
  // `host_cpus`: the host's online CPUs, what a new thread may run on.
  explicit FakeCpuAffinity(CpuSet host_cpus);

  // Adds (or replaces) thread `tid` with affinity `cpus` (empty: every host
  // CPU).
  void AddThread(int tid, CpuSet cpus = CpuSet());
  // The thread exits: later calls on it fail with ESRCH.
  void RemoveThread(int tid);
  // Calls on `tid` fail with `err` (0 clears).
  void SetThreadErrno(int tid, int err);
  // Models a cgroup cpuset: Set on `tid` keeps only these CPUs.
  void SetAllowed(int tid, CpuSet cpus);

  // The affinity of `tid`; empty for an unknown thread.
  CpuSet CpusOf(int tid) const;
  // Set calls, failed ones included.
  int write_calls() const;
  int read_calls() const;
  void ResetCallCounts();

  absl::StatusOr<CpuSet> Get(int tid) override;
  absl::Status Set(int tid, const CpuSet& cpus) override;

 private:
  struct Thread {
    CpuSet cpus;
    CpuSet allowed;
    int err = 0;
  };

  const CpuSet host_cpus_;
  mutable std::mutex mu_;
  std::map<int, Thread> threads_;
  int writes_ = 0;
  int reads_ = 0;
};

}  // namespace cosched::host

#endif  // COSCHED_HOST_TESTING_CPU_AFFINITY_FAKE_H_
