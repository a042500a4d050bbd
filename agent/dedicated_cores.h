// The `dedicated` isolation level: a VM's vCPU threads get whole cores that
// no other VM uses ("nosmt for one VM").
//
// It is enforced with per-thread CPU affinity: the dedicated VM's vCPU
// threads are confined to its cores, and every other VM thread (other VMs,
// and the dedicated VM's own emulator, I/O and vhost threads) is kept off
// them. Host tasks are not confined; the dedicated VM's own cookie (the
// level gives it a trust group of its own) already stops them from running
// on a sibling at the same time as one of its vCPUs.
//
// Why affinity and not cpusets: affinity works on any thread the agent
// discovers, whether libvirt manages the VM or not, with cgroup v1 or v2,
// and needs only CAP_SYS_NICE. cpusets would also move host tasks off the
// cores, but libvirt owns the VMs' cgroups (its <vcpupin>/<emulatorpin>
// write cpuset.cpus there) and would fight a second writer; the kernel
// narrows an affinity to the thread's cpuset instead of failing, so the two
// coexist. Partitioning the host with cpusets is for when host tasks must
// leave the cores too.
#ifndef COSCHED_AGENT_DEDICATED_CORES_H_
#define COSCHED_AGENT_DEDICATED_CORES_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "host/cpu_affinity.h"
#include "cosched/v1/types.pb.h"

namespace cosched::agent {

// A core is named by its index in v1::Topology::cores (ordered by first
// CPU): core_id is only unique within a package.

// One VM of a pass, as the planner sees it.
struct DedicatedCoreRequest {
  std::string vm_id;
  bool dedicated = false;
  // vCPU threads found.
  int vcpus = 0;
  // The cores it got in the last pass: a running VM keeps them.
  std::vector<int> held_cores;
};

// Where a dedicated VM's vCPUs go.
struct DedicatedPlacement {
  std::string vm_id;
  int vcpus = 0;
  // Sorted core indices; empty when none could be given.
  std::vector<int> cores;
  // The CPUs of `cores`.
  host::CpuSet cpus;
  // RESOURCE_EXHAUSTED when there are not enough free whole cores (a VM
  // that already held some keeps them and reports the shortfall).
  absl::Status status;
};

struct DedicatedCorePlan {
  // Every CPU of the topology.
  host::CpuSet host_cpus;
  // What every thread but a placed dedicated VM's vCPUs is confined to: the
  // host's CPUs minus the dedicated cores. Never empty on a known topology.
  host::CpuSet shared;
  // One per dedicated VM, by VM id.
  std::vector<DedicatedPlacement> dedicated;

  const DedicatedPlacement* Find(const std::string& vm_id) const;
  // Whether some VM holds cores, i.e. whether anything is to be confined.
  bool any_placed() const;
};

// Pure. Gives each dedicated VM (by VM id, so the result is deterministic)
// enough whole cores for its vCPUs: ceil(vcpus / siblings per core) on a
// uniform host, whole cores always. Placements held from the last pass are
// kept first; new cores come from the highest index down, so core 0, where
// the host's housekeeping usually runs, is the last taken. At least one
// core always stays shared for the host and the other VMs. A VM that cannot
// get all its cores gets no new ones and a RESOURCE_EXHAUSTED status such as
// "dedicated: vm-7 needs 2 whole cores, 1 free of 4 (cores 0,2 held by
// vm-3; one core stays for the host and other VMs)".
DedicatedCorePlan PlanDedicatedCores(const v1::Topology& topology,
                                     std::vector<DedicatedCoreRequest> vms);

// "dedicated cores 1,3 (CPUs 2-3,6-7)".
std::string DescribePlacement(const DedicatedPlacement& placement);

// One VM's threads for the enforcer.
struct DedicatedVmThreads {
  std::string vm_id;
  bool dedicated = false;
  std::vector<int> vcpu_tids;
  // Every other thread of the VM (emulator, I/O, vhost, helpers).
  std::vector<int> other_tids;
  // The CPUs the policy engine pins its vCPU threads to on this host
  // (Assignment.pin); empty: not pinned. Ignored for a dedicated VM. Only
  // the part off other VMs' dedicated cores applies.
  host::CpuSet pin;
};

// What the enforcer did for one VM, for its report.
struct DedicatedVmOutcome {
  std::string vm_id;
  bool dedicated = false;
  // For a dedicated VM: its cores and their CPUs.
  std::vector<int> cores;
  host::CpuSet cpus;
  // "dedicated cores 1,3 (CPUs 2-3,6-7)", or why it has none; empty for
  // other VMs.
  std::string note;
  // The engine's pin as applied (DedicatedVmThreads::pin minus the
  // dedicated cores); empty when the VM is not pinned.
  host::CpuSet pinned;
  // Where its vCPU threads may run by others' pinning: the union of their
  // affinities before any change of the enforcer's; empty when that is
  // every CPU of the host (or none could be read).
  host::CpuSet vcpu_affinity;
  // Alive vCPU threads, and those confined to the VM's dedicated CPUs or,
  // for a pinned VM, to `pinned`.
  int vcpus = 0;
  int vcpus_confined = 0;
  // Threads that should be kept off dedicated cores but may still run
  // there: for a dedicated VM, any other VM thread on its cores; for other
  // VMs, their own threads that could not be moved.
  int threads_unconfined = 0;
  // Not OK when the VM did not get what the level asks for.
  absl::Status status;
};

struct DedicatedCoreStats {
  // Reads of the pass, those for vcpu_affinity included.
  int affinity_reads = 0;
  int affinity_writes = 0;
  // Threads given back CPUs they had lost to a dedicated VM.
  int threads_restored = 0;
};

struct DedicatedCoreResult {
  DedicatedCorePlan plan;
  // One per VM given, by VM id.
  std::vector<DedicatedVmOutcome> vms;
  DedicatedCoreStats stats;
};

// Keeps the plan true in the kernel. Thread-compatible: one Enforce at a
// time. Remembers each VM's cores (so it keeps them) and, for every thread
// whose affinity it changed, the affinity the thread had before, so CPUs
// taken away are given back when no longer dedicated to anyone.
//
// It also applies the policy engine's pins: a pinned VM's vCPU threads are
// confined to its pin's CPUs outside the dedicated cores, and given their
// CPUs back when the pin goes.
//
// It reads affinities first and writes only what differs, so a pass where
// nothing changed makes no writes. When no VM holds dedicated cores or a
// pin and no thread carries a change of its own, it only reads the vCPU
// threads' affinities (for vcpu_affinity): hosts that use neither keep
// whatever pinning other tools set. Other VMs'
// threads keep their own pinning where it avoids the dedicated cores, and
// otherwise are confined to the shared CPUs.
class DedicatedCoreEnforcer {
 public:
  DedicatedCoreEnforcer(host::CpuAffinity* affinity, v1::Topology topology);

  // Plans with the VMs of this pass and applies the plan.
  DedicatedCoreResult Enforce(const std::vector<DedicatedVmThreads>& vms);

 private:
  // What the enforcer did to one thread.
  struct Change {
    host::CpuSet before;  // the affinity it had before its first change
    host::CpuSet target;  // what was last asked for
    host::CpuSet applied;  // what the kernel then held (target, or a subset)
  };

  // One thread to visit in a pass, and what the visit found.
  struct AffinityJob;

  // Applies `plan`: the threads to visit, their affinities set, then each
  // VM's outcome.
  void Apply(const DedicatedCorePlan& plan,
             const std::vector<DedicatedVmThreads>& vms,
             DedicatedCoreResult& result);
  // Every thread the plan concerns, others before dedicated vCPUs, so that
  // dedicated cores are cleared before their VM moves in. Without dedicated
  // cores only threads still carrying a change of ours.
  std::vector<AffinityJob> AffinityJobs(const DedicatedCorePlan& plan,
                                        const std::vector<DedicatedVmThreads>& vms) const;
  // Reads, sets and reads back each job's affinity; remembers the changes
  // that stand (and forgets threads not visited, whose ids may be reused).
  void RunJobs(std::vector<AffinityJob>& jobs, DedicatedCoreStats& stats);
  // VM `i`'s outcome of the pass: its placement, how many of its vCPUs are
  // confined to its cores, and whose threads may still run where they
  // should not, with the first error that explains it.
  static DedicatedVmOutcome OutcomeOf(size_t i, const DedicatedVmThreads& vm,
                                      const DedicatedCorePlan& plan,
                                      const std::vector<AffinityJob>& jobs,
                                      const std::map<int, const AffinityJob*>& job_of);

  // VM `vm`'s vcpu_affinity (DedicatedVmOutcome), after RunJobs: what its
  // vCPUs had before our changes, read where the pass did not visit them.
  host::CpuSet OthersAffinity(const DedicatedVmThreads& vm, const DedicatedCorePlan& plan,
                              const std::map<int, const AffinityJob*>& job_of,
                              DedicatedCoreStats& stats);

  host::CpuAffinity* const affinity_;
  const v1::Topology topology_;
  std::map<std::string, std::vector<int>> held_;
  std::map<int, Change> changes_;
};

// Folds a VM's dedicated-core outcome into its enforcement report: its
// vcpu_affinity and pinned_cpus are set; a
// failure is appended to last_error and lowers the state (a dedicated VM
// whose vCPUs are not all confined is PARTIAL, FAILED when none is); a
// success changes nothing. A pin that did not hold is only reported: the
// VM's isolation is its cookie's, which a pin does not change.
void MergeDedicatedOutcome(const DedicatedVmOutcome& outcome,
                           v1::VMEnforcement& enforcement);

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_DEDICATED_CORES_H_
