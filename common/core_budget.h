// How many of a host's cores may be given away to VMs that hold whole cores
// (dedicated, or pinned by placement). One rule for csd's Place and the
// agent's dedicated-core planner, so that csd never hands out a layout the
// agent would refuse.
#ifndef COSCHED_COMMON_CORE_BUDGET_H_
#define COSCHED_COMMON_CORE_BUDGET_H_

#include <algorithm>

namespace cosched {

// Cores that always stay shared: the host's own tasks (agent, libvirtd,
// QEMU's emulator threads of other VMs) need somewhere to run.
inline constexpr int kSharedCoresKept = 1;

// Of `cores` cores, the most that VMs may hold whole.
inline constexpr int GiveableCores(int cores) {
  return std::max(0, cores - kSharedCoresKept);
}

// Whole cores a VM of `vcpus` vCPUs holds on cores of `threads_per_core`
// hardware threads: ceil(vcpus / threads_per_core).
inline constexpr int CoresFor(int vcpus, int threads_per_core) {
  return (vcpus + threads_per_core - 1) / threads_per_core;
}

}  // namespace cosched

#endif  // COSCHED_COMMON_CORE_BUDGET_H_
