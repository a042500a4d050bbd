// The host's CPU topology and the capabilities that depend on it, read from
// sysfs and procfs through PseudoFs.
#ifndef COSCHED_HOST_TOPOLOGY_H_
#define COSCHED_HOST_TOPOLOGY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "host/pseudo_fs.h"
#include "cosched/v1/types.pb.h"

namespace cosched::host {

// Reads <sysfs_root>/devices/system/cpu/online and, for each online CPU,
// topology/{thread_siblings_list,core_id,physical_package_id}. CPUs that
// list each other as siblings form one core; cores are ordered by their
// first CPU. NOT_FOUND or INVALID_ARGUMENT naming the file that is missing or
// malformed.
absl::StatusOr<v1::Topology> ReadTopology(const PseudoFs& fs,
                                          absl::string_view sysfs_root);

// <sysfs_root>/devices/system/cpu/smt/active when the kernel has it, else
// whether any core of `topology` has more than one CPU.
absl::StatusOr<bool> ReadSmtActive(const PseudoFs& fs,
                                   absl::string_view sysfs_root,
                                   const v1::Topology& topology);

// Whether <procfs_root>/sys/kernel/sched_schedstats is 1 (false when the
// kernel has no schedstats at all).
absl::StatusOr<bool> ReadSchedstatsEnabled(const PseudoFs& fs,
                                           absl::string_view procfs_root);

}  // namespace cosched::host

#endif  // COSCHED_HOST_TOPOLOGY_H_
