// Which hardware threads (CPUs) share a core: the SMT topology the
// sibling-share computation needs.
#ifndef COSCHED_TELEMETRY_TOPOLOGY_H_
#define COSCHED_TELEMETRY_TOPOLOGY_H_

#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cosched::telemetry {

// CPUs 0..N-1 grouped into cores. Immutable; thread-safe to share.
class CpuTopology {
 public:
  // `lists[cpu]` is that CPU's thread_siblings_list, including itself.
  // INVALID_ARGUMENT ("cpu 3: ...") when a list leaves out its own CPU,
  // names a CPU that is not in `lists`, or disagrees with a sibling's list.
  static absl::StatusOr<CpuTopology> FromSiblingLists(const std::vector<std::vector<int>>& lists);

  // The topology file of `csctl analyze`: one line per CPU, in CPU order,
  // each that CPU's thread_siblings_list (at most 8 CPUs). Errors name
  // `source` and the line: "topo.txt:3: ...".
  static absl::StatusOr<CpuTopology> Parse(std::string_view text, std::string_view source);

  // Each CPU a core of its own (SMT off).
  static CpuTopology NoSmt(int num_cpus);

  int num_cpus() const { return static_cast<int>(core_of_.size()); }
  int num_cores() const { return static_cast<int>(core_begin_.size()) - 1; }
  int core_of(int cpu) const { return core_of_[cpu]; }
  // The CPUs of a core, ascending. Cores are numbered by their lowest CPU.
  std::span<const int> core_cpus(int core) const {
    return {core_cpu_list_.data() + core_begin_[core],
            static_cast<size_t>(core_begin_[core + 1] - core_begin_[core])};
  }

 private:
  std::vector<int> core_of_;
  std::vector<int> core_cpu_list_;  // the cores' CPUs, one core after another
  std::vector<int> core_begin_;     // core i is [core_begin_[i], core_begin_[i+1])
};

}  // namespace cosched::telemetry

#endif  // COSCHED_TELEMETRY_TOPOLOGY_H_
