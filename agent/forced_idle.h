// Forced idle per VM: the time the kernel kept a VM's threads off a CPU
// because the sibling ran an incompatible cookie. The kernel counts it per
// task in /proc/<pid>/task/<tid>/sched (core_forceidle_sum) while
// schedstats are on; a VM's forced idle over a window is the growth of its
// threads' counts.
#ifndef COSCHED_AGENT_FORCED_IDLE_H_
#define COSCHED_AGENT_FORCED_IDLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/host_fs.h"

namespace cosched::agent {

// core_forceidle_sum of a /proc/.../sched text, in ns. The kernel prints it
// as milliseconds with six decimals ("1234.567890"), or as plain
// nanoseconds on kernels that print it raw. nullopt when the text has no
// such line (kernel without core scheduling). INVALID_ARGUMENT quoting the
// line when its value is not a number.
absl::StatusOr<std::optional<int64_t>> ParseCoreForceidleSum(absl::string_view sched_text);

// Not thread-safe: one instance, called once per window.
class ForcedIdleMeter {
 public:
  ForcedIdleMeter(const HostFs* fs, std::string procfs_root);

  // For each list of thread ids (one per VM): the growth of their
  // core_forceidle_sum since the previous Sample, or nullopt when none of
  // them could be read with the field. A thread seen for the first time
  // adds nothing (its count so far covers unknown time); threads gone since
  // are forgotten, so memory follows the threads alive.
  std::vector<std::optional<int64_t>> Sample(const std::vector<const std::vector<int>*>& vms);

 private:
  const HostFs* const fs_;
  const std::string procfs_root_;
  absl::flat_hash_map<int, int64_t> last_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_FORCED_IDLE_H_
