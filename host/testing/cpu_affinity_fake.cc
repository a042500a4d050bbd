#include "host/testing/cpu_affinity_fake.h"

#include <cerrno>

namespace cosched::host {

FakeCpuAffinity::FakeCpuAffinity(CpuSet host_cpus)
    : host_cpus_(std::move(host_cpus)) {}

void FakeCpuAffinity::AddThread(int tid, CpuSet cpus) {
  std::lock_guard<std::mutex> lock(mu_);
  Thread& t = threads_[tid];
  t.cpus = cpus.empty() ? host_cpus_ : std::move(cpus);
  t.allowed = host_cpus_;
  t.err = 0;
}

void FakeCpuAffinity::RemoveThread(int tid) {
  std::lock_guard<std::mutex> lock(mu_);
  threads_.erase(tid);
}

void FakeCpuAffinity::SetThreadErrno(int tid, int err) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = threads_.find(tid);
  if (it != threads_.end()) it->second.err = err;
}

void FakeCpuAffinity::SetAllowed(int tid, CpuSet cpus) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = threads_.find(tid);
  if (it != threads_.end()) it->second.allowed = std::move(cpus);
}

CpuSet FakeCpuAffinity::CpusOf(int tid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = threads_.find(tid);
  return it == threads_.end() ? CpuSet() : it->second.cpus;
}

int FakeCpuAffinity::write_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writes_;
}

int FakeCpuAffinity::read_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_;
}

void FakeCpuAffinity::ResetCallCounts() {
  std::lock_guard<std::mutex> lock(mu_);
  writes_ = 0;
  reads_ = 0;
}

absl::StatusOr<CpuSet> FakeCpuAffinity::Get(int tid) {
  std::lock_guard<std::mutex> lock(mu_);
  ++reads_;
  auto it = threads_.find(tid);
  if (it == threads_.end()) {
    return CpuAffinityErrnoStatus(ESRCH, "sched_getaffinity", tid);
  }
  // The kernel lets any task read any affinity: a per-thread errno only
  // fails reads when it is ESRCH.
  if (it->second.err == ESRCH) {
    return CpuAffinityErrnoStatus(ESRCH, "sched_getaffinity", tid);
  }
  return it->second.cpus;
}

absl::Status FakeCpuAffinity::Set(int tid, const CpuSet& cpus) {
  std::lock_guard<std::mutex> lock(mu_);
  ++writes_;
  auto it = threads_.find(tid);
  if (it == threads_.end()) {
    return CpuAffinityErrnoStatus(ESRCH, "sched_setaffinity", tid, cpus);
  }
  Thread& t = it->second;
  if (t.err != 0) {
    return CpuAffinityErrnoStatus(t.err, "sched_setaffinity", tid, cpus);
  }
  CpuSet effective = cpus.Intersect(t.allowed);
  if (effective.empty()) {
    return CpuAffinityErrnoStatus(EINVAL, "sched_setaffinity", tid, cpus);
  }
  t.cpus = std::move(effective);
  return absl::OkStatus();
}

}  // namespace cosched::host
