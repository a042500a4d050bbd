// The kernel's per-thread CPU affinity (sched_setaffinity and
// sched_getaffinity) behind an interface, so that the `dedicated` isolation
// level can be planned and enforced against a fake kernel in tests.
#ifndef COSCHED_HOST_CPU_AFFINITY_H_
#define COSCHED_HOST_CPU_AFFINITY_H_

#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/cpu_list.h"

namespace cosched::host {

// A set of logical CPU ids: a small value type. Kept as a sorted vector
// rather than a cpu_set_t so that hosts with more CPUs than CPU_SETSIZE work
// and the type needs no system header.
class CpuSet {
 public:
  CpuSet() = default;
  CpuSet(std::initializer_list<int> cpus) : CpuSet(std::vector<int>(cpus)) {}
  // Any order, duplicates allowed; negative ids are dropped.
  explicit CpuSet(std::vector<int> cpus) : cpus_(std::move(cpus)) {
    std::erase_if(cpus_, [](int cpu) { return cpu < 0; });
    std::sort(cpus_.begin(), cpus_.end());
    cpus_.erase(std::unique(cpus_.begin(), cpus_.end()), cpus_.end());
  }

  const std::vector<int>& cpus() const { return cpus_; }
  bool empty() const { return cpus_.empty(); }
  int size() const { return static_cast<int>(cpus_.size()); }
  bool Contains(int cpu) const {
    return std::binary_search(cpus_.begin(), cpus_.end(), cpu);
  }
  bool IsSubsetOf(const CpuSet& other) const {
    return std::includes(other.cpus_.begin(), other.cpus_.end(),
                         cpus_.begin(), cpus_.end());
  }

  CpuSet Union(const CpuSet& other) const {
    CpuSet out;
    std::set_union(cpus_.begin(), cpus_.end(), other.cpus_.begin(),
                   other.cpus_.end(), std::back_inserter(out.cpus_));
    return out;
  }
  CpuSet Intersect(const CpuSet& other) const {
    CpuSet out;
    std::set_intersection(cpus_.begin(), cpus_.end(), other.cpus_.begin(),
                          other.cpus_.end(), std::back_inserter(out.cpus_));
    return out;
  }
  CpuSet Minus(const CpuSet& other) const {
    CpuSet out;
    std::set_difference(cpus_.begin(), cpus_.end(), other.cpus_.begin(),
                        other.cpus_.end(), std::back_inserter(out.cpus_));
    return out;
  }

  // The kernel's list format: "0-1,4"; "" for the empty set.
  std::string ToString() const { return FormatCpuList(cpus_); }

  bool operator==(const CpuSet&) const = default;

 private:
  std::vector<int> cpus_;
};

// Implementations are thread-safe. Errors (from CpuAffinityErrnoStatus):
// NOT_FOUND when the thread is gone (normal during reconcile),
// PERMISSION_DENIED when the agent may not change it (needs CAP_SYS_NICE),
// INVALID_ARGUMENT when the set has no CPU the thread may run on.
class CpuAffinity {
 public:
  virtual ~CpuAffinity() = default;

  // The CPUs thread `tid` may run on.
  virtual absl::StatusOr<CpuSet> Get(int tid) = 0;
  // Lets thread `tid` run on `cpus` only. The kernel narrows the set to the
  // CPUs the thread's cgroup cpuset allows, so a Get afterwards may return
  // a subset of `cpus`.
  virtual absl::Status Set(int tid, const CpuSet& cpus) = 0;
};

// The real kernel (cpu_affinity_linux.cc). Stateless.
class LinuxCpuAffinity : public CpuAffinity {
 public:
  absl::StatusOr<CpuSet> Get(int tid) override;
  absl::Status Set(int tid, const CpuSet& cpus) override;
};

// The status for errno `err` of `call` ("sched_setaffinity", ...) on thread
// `tid`: the codes named above, INTERNAL for anything else; OK for 0.
// `cpus` (may be empty) names the set asked for, for the message.
absl::Status CpuAffinityErrnoStatus(int err, absl::string_view call, int tid,
                                    const CpuSet& cpus = CpuSet());

}  // namespace cosched::host

#endif  // COSCHED_HOST_CPU_AFFINITY_H_
