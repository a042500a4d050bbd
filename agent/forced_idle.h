// Forced idle per VM: idle the VM forced on its SMT siblings, i.e. time a
// sibling was kept idle while the VM's threads ran, because nothing runnable
// there matched their cookie. The kernel charges it to the task that was
// running (__sched_core_account_forceidle), not to a task that waited, so it
// is what the VM cost other work on its cores. While schedstats are on
// the kernel counts it per cgroup (cpu.stat core_sched.force_idle_usec,
// cgroup v2, Linux >= 5.19) and per task (core_forceidle_sum in
// /proc/<pid>/task/<tid>/sched). A VM's forced idle over a window is the
// growth of its own cgroup's count when it has one: that count keeps the
// time of threads that ended within the window and costs one read per VM.
// Otherwise (a QEMU in a shared cgroup, a kernel without the cgroup field)
// it is the growth of its threads' counts.
#ifndef COSCHED_AGENT_FORCED_IDLE_H_
#define COSCHED_AGENT_FORCED_IDLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "host/pseudo_fs.h"

namespace cosched::agent {

// core_forceidle_sum of a /proc/.../sched text, in ns. The kernel prints it
// as milliseconds with six decimals ("1234.567890"), or as plain
// nanoseconds on kernels that print it raw. nullopt when the text has no
// such line (kernel without core scheduling). INVALID_ARGUMENT quoting the
// line when its value is not a number.
absl::StatusOr<std::optional<int64_t>> ParseCoreForceidleSum(absl::string_view sched_text);

// core_sched.force_idle_usec of a cgroup v2 cpu.stat text, in ns. nullopt
// when the text has no such line (kernel without core scheduling or before
// 5.19). INVALID_ARGUMENT quoting the line when its value is not a number.
absl::StatusOr<std::optional<int64_t>> ParseCgroupForceIdle(absl::string_view cpu_stat_text);

// Where one VM's forced idle is counted.
struct ForcedIdleSource {
  const std::vector<int>* tids = nullptr;
  // The VM's own cgroup path (as in /proc/<pid>/cgroup); empty: none.
  const std::string* cgroup = nullptr;
};

// Not thread-safe: one instance, called once per window.
class ForcedIdleMeter {
 public:
  // `cgroupfs_root` is where cgroup v2 is mounted ("/sys/fs/cgroup"; on a
  // hybrid host its "unified" subdirectory is tried too).
  ForcedIdleMeter(const host::PseudoFs* fs, std::string procfs_root, std::string cgroupfs_root);

  // For each VM: the growth of its cgroup's count since the previous Sample
  // when the cgroup has the field, else of its threads' core_forceidle_sum;
  // nullopt when neither could be read. A cgroup or thread seen for the
  // first time adds nothing (its count so far covers unknown time); those
  // gone since are forgotten, so memory follows what is alive.
  std::vector<std::optional<int64_t>> Sample(const std::vector<ForcedIdleSource>& vms);

 private:
  std::optional<int64_t> ReadCgroup(const std::string& cgroup) const;
  std::optional<int64_t> ReadThread(int tid) const;

  const host::PseudoFs* const fs_;
  const std::string procfs_root_;
  const std::string cgroupfs_root_;
  absl::flat_hash_map<int, int64_t> last_tid_;
  absl::flat_hash_map<std::string, int64_t> last_cgroup_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_FORCED_IDLE_H_
