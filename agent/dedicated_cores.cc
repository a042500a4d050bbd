#include "agent/dedicated_cores.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/core_budget.h"
#include "glog/logging.h"

namespace cosched::agent {
namespace {

std::string CoreList(const std::vector<int>& cores) {
  return host::CpuSet(cores).ToString();
}

std::string Plural(int n, absl::string_view word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

// Why `vm_id` got fewer cores than it needs, with who holds the rest.
std::string ShortageMessage(const std::string& vm_id, int vcpus,
                            int siblings, int holds, int free_cores,
                            const std::vector<std::string>& owner) {
  const int needed = (vcpus + siblings - 1) / siblings;
  std::string message = absl::StrCat("dedicated: ", vm_id, " needs ",
                                     Plural(needed, "whole core"));
  if (holds > 0) absl::StrAppend(&message, ", holds ", holds);
  absl::StrAppend(&message, ", ", free_cores, " free of ", owner.size(), " (");
  std::map<std::string, std::vector<int>> held_by;
  for (size_t core = 0; core < owner.size(); ++core) {
    if (!owner[core].empty() && owner[core] != vm_id) {
      held_by[owner[core]].push_back(static_cast<int>(core));
    }
  }
  std::vector<std::string> parts;
  for (const auto& [holder, cores] : held_by) {
    parts.push_back(absl::StrCat(cores.size() == 1 ? "core " : "cores ",
                                 CoreList(cores), " held by ", holder));
  }
  parts.push_back("one core stays for the host and other VMs");
  absl::StrAppend(&message, absl::StrJoin(parts, "; "), ")");
  return message;
}

absl::Status WithMessage(const absl::Status& code_from, std::string message) {
  return absl::Status(code_from.ok() ? absl::StatusCode::kFailedPrecondition
                                     : code_from.code(),
                      message);
}

int StateRank(v1::EnforcementState state) {
  switch (state) {
    case v1::ENFORCEMENT_STATE_ENFORCED:
    case v1::ENFORCEMENT_STATE_FAIL_CLOSED:
      return 0;
    case v1::ENFORCEMENT_STATE_PARTIAL:
      return 1;
    case v1::ENFORCEMENT_STATE_FAILED:
      return 2;
    default:
      return -1;  // pending or unknown: nothing to lower
  }
}

// The part of a non-dedicated VM's pin it may use: its CPUs off the
// dedicated cores (and on the host).
host::CpuSet UsablePin(const DedicatedVmThreads& vm, const DedicatedCorePlan& plan) {
  if (vm.dedicated || vm.pin.empty()) return host::CpuSet();
  return vm.pin.Intersect(plan.shared);
}

}  // namespace

const DedicatedPlacement* DedicatedCorePlan::Find(
    const std::string& vm_id) const {
  for (const DedicatedPlacement& p : dedicated) {
    if (p.vm_id == vm_id) return &p;
  }
  return nullptr;
}

bool DedicatedCorePlan::any_placed() const {
  for (const DedicatedPlacement& p : dedicated) {
    if (!p.cores.empty()) return true;
  }
  return false;
}

DedicatedCorePlan PlanDedicatedCores(const v1::Topology& topology,
                                     std::vector<DedicatedCoreRequest> vms) {
  DedicatedCorePlan plan;
  const int n = topology.cores_size();
  std::vector<host::CpuSet> core_cpus;
  int siblings = 1;
  for (const v1::Core& core : topology.cores()) {
    core_cpus.emplace_back(std::vector<int>(core.cpus().begin(), core.cpus().end()));
    plan.host_cpus = plan.host_cpus.Union(core_cpus.back());
    siblings = std::max(siblings, core_cpus.back().size());
  }
  std::sort(vms.begin(), vms.end(),
            [](const DedicatedCoreRequest& a, const DedicatedCoreRequest& b) {
              return a.vm_id < b.vm_id;
            });

  const int max_dedicated = GiveableCores(n);
  std::vector<std::string> owner(n);
  int claimed = 0;
  auto claim = [&](DedicatedPlacement& p, int core) {
    owner[core] = p.vm_id;
    p.cores.push_back(core);
    p.cpus = p.cpus.Union(core_cpus[core]);
    ++claimed;
  };

  // Running VMs keep the cores they hold, as far as they still need them.
  std::vector<std::pair<const DedicatedCoreRequest*, DedicatedPlacement>> work;
  for (const DedicatedCoreRequest& vm : vms) {
    if (!vm.dedicated) continue;
    DedicatedPlacement p;
    p.vm_id = vm.vm_id;
    p.vcpus = vm.vcpus;
    std::vector<int> held = host::CpuSet(vm.held_cores).cpus();
    for (int core : held) {
      if (p.cpus.size() >= vm.vcpus || claimed >= max_dedicated) break;
      if (core >= n || !owner[core].empty()) continue;
      claim(p, core);
    }
    work.emplace_back(&vm, std::move(p));
  }

  // The rest take free cores from the top, all they need or none.
  for (auto& [vm, p] : work) {
    if (n == 0) {
      p.status = absl::FailedPreconditionError(absl::StrCat(
          "dedicated: ", vm->vm_id, ": the host topology lists no cores"));
      continue;
    }
    if (p.cpus.size() >= vm->vcpus) continue;
    const int room = max_dedicated - claimed;
    std::vector<int> take;
    host::CpuSet got = p.cpus;
    for (int core = n - 1; core >= 0 && got.size() < vm->vcpus; --core) {
      if (!owner[core].empty()) continue;
      if (static_cast<int>(take.size()) >= room) break;
      take.push_back(core);
      got = got.Union(core_cpus[core]);
    }
    if (got.size() >= vm->vcpus) {
      for (int core : take) claim(p, core);
    } else {
      p.status = absl::ResourceExhaustedError(
          ShortageMessage(vm->vm_id, vm->vcpus, siblings,
                          static_cast<int>(p.cores.size()), room, owner));
    }
  }

  host::CpuSet dedicated_cpus;
  for (auto& [vm, p] : work) {
    std::sort(p.cores.begin(), p.cores.end());
    dedicated_cpus = dedicated_cpus.Union(p.cpus);
    plan.dedicated.push_back(std::move(p));
  }
  plan.shared = plan.host_cpus.Minus(dedicated_cpus);
  return plan;
}

std::string DescribePlacement(const DedicatedPlacement& placement) {
  return absl::StrCat("dedicated ",
                      placement.cores.size() == 1 ? "core " : "cores ",
                      CoreList(placement.cores), " (",
                      placement.cpus.size() == 1 ? "CPU " : "CPUs ",
                      placement.cpus.ToString(), ")");
}

DedicatedCoreEnforcer::DedicatedCoreEnforcer(host::CpuAffinity* affinity,
                                             v1::Topology topology)
    : affinity_(affinity), topology_(std::move(topology)) {}

DedicatedCoreResult DedicatedCoreEnforcer::Enforce(
    const std::vector<DedicatedVmThreads>& vms) {
  std::vector<DedicatedVmThreads> sorted = vms;
  std::sort(sorted.begin(), sorted.end(),
            [](const DedicatedVmThreads& a, const DedicatedVmThreads& b) {
              return a.vm_id < b.vm_id;
            });
  std::vector<DedicatedCoreRequest> requests;
  for (const DedicatedVmThreads& vm : sorted) {
    DedicatedCoreRequest r;
    r.vm_id = vm.vm_id;
    r.dedicated = vm.dedicated;
    r.vcpus = static_cast<int>(vm.vcpu_tids.size());
    if (vm.dedicated) {
      auto it = held_.find(vm.vm_id);
      if (it != held_.end()) r.held_cores = it->second;
    }
    requests.push_back(std::move(r));
  }
  DedicatedCoreResult result;
  result.plan = PlanDedicatedCores(topology_, std::move(requests));

  std::map<std::string, std::vector<int>> held;
  for (const DedicatedPlacement& p : result.plan.dedicated) {
    if (p.cores.empty()) continue;
    held[p.vm_id] = p.cores;
    auto before = held_.find(p.vm_id);
    if (before == held_.end() || before->second != p.cores) {
      LOG(INFO) << "vm " << p.vm_id << ": " << DescribePlacement(p);
    }
  }
  for (const auto& [vm_id, cores] : held_) {
    if (!held.count(vm_id)) {
      LOG(INFO) << "vm " << vm_id << " gives back dedicated "
                << (cores.size() == 1 ? "core " : "cores ") << CoreList(cores);
    }
  }
  held_ = std::move(held);

  Apply(result.plan, sorted, result);
  return result;
}

struct DedicatedCoreEnforcer::AffinityJob {
  int tid = 0;
  size_t vm = 0;  // index into vms
  bool dedicated_vcpu = false;
  // A vCPU of a VM the engine pins: `constraint` is its pin.
  bool pinned_vcpu = false;
  host::CpuSet constraint;
  // After the pass:
  bool gone = false;
  std::optional<host::CpuSet> affinity;  // unknown when it could not be read
  absl::Status error;
};

DedicatedVmOutcome DedicatedCoreEnforcer::OutcomeOf(
    size_t i, const DedicatedVmThreads& vm, const DedicatedCorePlan& plan,
    const std::vector<AffinityJob>& jobs, const std::map<int, const AffinityJob*>& job_of) {
  const bool active = plan.any_placed();
  const host::CpuSet dedicated_cpus = plan.host_cpus.Minus(plan.shared);
  DedicatedVmOutcome o;
  o.vm_id = vm.vm_id;
  o.dedicated = vm.dedicated;
  std::vector<std::string> problems;
  absl::Status first_error;
  auto note_error = [&](const absl::Status& s) {
    if (first_error.ok()) first_error = s;
  };
  const DedicatedPlacement* p = vm.dedicated ? plan.Find(vm.vm_id) : nullptr;
  const bool placed = p != nullptr && !p->cores.empty();
  if (p != nullptr) {
    o.cores = p->cores;
    o.cpus = p->cpus;
    if (placed) {
      o.note = DescribePlacement(*p);
    } else if (!p->status.ok()) {
      o.note = std::string(p->status.message());
    } else {
      o.note = "dedicated: no vCPU threads found yet";
    }
    if (!p->status.ok()) {
      problems.push_back(std::string(p->status.message()));
      note_error(p->status);
    }
  }

  o.pinned = UsablePin(vm, plan);
  if (!vm.dedicated && !vm.pin.empty()) {
    if (o.pinned.empty()) {
      problems.push_back(absl::StrCat("pin: CPUs ", vm.pin.ToString(),
                                      " are all on other VMs' dedicated cores or not on "
                                      "this host; not pinned"));
    } else {
      for (int tid : vm.vcpu_tids) {
        auto it = job_of.find(tid);
        if (it == job_of.end() || it->second->gone) continue;
        const AffinityJob& job = *it->second;
        ++o.vcpus;
        if (job.affinity && job.affinity->IsSubsetOf(o.pinned)) ++o.vcpus_confined;
        if (!job.error.ok()) note_error(job.error);
      }
      if (o.vcpus_confined < o.vcpus) {
        problems.push_back(absl::StrCat(
            "pin: ", o.vcpus_confined, " of ", o.vcpus, " vCPU threads confined to CPUs ",
            o.pinned.ToString(),
            first_error.ok() ? "" : absl::StrCat(": ", first_error.message())));
      }
    }
  }

  if (vm.dedicated) {
    for (int tid : vm.vcpu_tids) {
      auto it = job_of.find(tid);
      if (it == job_of.end()) {
        ++o.vcpus;  // not visited: nothing to confine it to
        continue;
      }
      const AffinityJob& job = *it->second;
      if (job.gone) continue;
      ++o.vcpus;
      if (placed && job.affinity && job.affinity->IsSubsetOf(p->cpus)) {
        ++o.vcpus_confined;
      }
      if (!job.error.ok()) note_error(job.error);
    }
    if (placed && o.vcpus_confined < o.vcpus) {
      problems.push_back(absl::StrCat(
          "dedicated: ", o.vcpus_confined, " of ", o.vcpus,
          " vCPU threads confined to CPUs ", p->cpus.ToString(),
          first_error.ok() ? ""
                           : absl::StrCat(": ", first_error.message())));
    }
    if (placed) {
      // Everyone else's threads must be off this VM's cores.
      absl::Status why;
      for (const AffinityJob& job : jobs) {
        if (job.gone || (job.vm == i && job.dedicated_vcpu)) continue;
        const bool on_cores =
            job.affinity ? !job.affinity->Intersect(p->cpus).empty() : true;
        if (!on_cores) continue;
        ++o.threads_unconfined;
        if (why.ok()) why = job.error;
      }
      if (o.threads_unconfined > 0) {
        note_error(why);
        problems.push_back(absl::StrCat(
            "dedicated: ", Plural(o.threads_unconfined, "other thread"),
            " may still run on CPUs ", p->cpus.ToString(),
            why.ok() ? "" : absl::StrCat(": ", why.message())));
      }
    }
  } else if (active) {
    absl::Status why;
    auto check = [&](int tid) {
      auto it = job_of.find(tid);
      if (it == job_of.end() || it->second->gone) return;
      const AffinityJob& job = *it->second;
      const bool on_dedicated =
          job.affinity ? !job.affinity->Intersect(dedicated_cpus).empty()
                       : true;
      if (!on_dedicated) return;
      ++o.threads_unconfined;
      if (why.ok()) why = job.error;
    };
    for (int tid : vm.vcpu_tids) check(tid);
    for (int tid : vm.other_tids) check(tid);
    if (o.threads_unconfined > 0) {
      note_error(why);
      problems.push_back(absl::StrCat(
          "dedicated cores: ", Plural(o.threads_unconfined, "thread"),
          " could not be kept off CPUs ", dedicated_cpus.ToString(),
          why.ok() ? "" : absl::StrCat(": ", why.message())));
    }
  }
  if (!problems.empty()) {
    o.status = WithMessage(first_error, absl::StrJoin(problems, "; "));
  }
  return o;}

std::vector<DedicatedCoreEnforcer::AffinityJob> DedicatedCoreEnforcer::AffinityJobs(
    const DedicatedCorePlan& plan, const std::vector<DedicatedVmThreads>& vms) const {
  const bool active = plan.any_placed();
  std::vector<AffinityJob> jobs;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < vms.size(); ++i) {
      const DedicatedPlacement* p =
          vms[i].dedicated ? plan.Find(vms[i].vm_id) : nullptr;
      const bool placed = p != nullptr && !p->cores.empty();
      const host::CpuSet& others = active ? plan.shared : plan.host_cpus;
      const host::CpuSet pin = UsablePin(vms[i], plan);
      auto add = [&](int tid, bool dedicated_vcpu, bool pinned_vcpu) {
        // Without dedicated cores only pinned vCPUs and threads still
        // carrying a change of ours are visited, to give their CPUs back.
        if (!active && !pinned_vcpu && !changes_.count(tid)) return;
        AffinityJob job;
        job.tid = tid;
        job.vm = i;
        job.dedicated_vcpu = dedicated_vcpu;
        job.pinned_vcpu = pinned_vcpu;
        job.constraint = dedicated_vcpu ? p->cpus : pinned_vcpu ? pin : others;
        jobs.push_back(std::move(job));
      };
      if (round == 0) {
        for (int tid : vms[i].other_tids) add(tid, false, false);
        if (!placed) {
          for (int tid : vms[i].vcpu_tids) add(tid, false, !pin.empty());
        }
      } else if (placed) {
        for (int tid : vms[i].vcpu_tids) add(tid, true, false);
      }
    }
  }

  return jobs;
}

void DedicatedCoreEnforcer::RunJobs(std::vector<AffinityJob>& jobs, DedicatedCoreStats& stats) {
  std::map<int, Change> kept;
  for (AffinityJob& job : jobs) {
    ++stats.affinity_reads;
    absl::StatusOr<host::CpuSet> actual = affinity_->Get(job.tid);
    if (absl::IsNotFound(actual.status())) {
      job.gone = true;
      continue;
    }
    auto it = changes_.find(job.tid);
    if (!actual.ok()) {
      job.error = actual.status();
      if (it != changes_.end()) kept[job.tid] = it->second;
      continue;
    }
    // A change whose result someone else has replaced since is theirs now.
    const Change* prev = (it != changes_.end() && it->second.applied == *actual)
                             ? &it->second
                             : nullptr;
    const host::CpuSet before = prev ? prev->before : *actual;
    host::CpuSet target = job.constraint;
    if (!job.dedicated_vcpu && !job.pinned_vcpu) {
      // Keep the thread's own pinning where it avoids the dedicated cores.
      host::CpuSet narrowed = before.Intersect(job.constraint);
      if (!narrowed.empty()) target = std::move(narrowed);
    }
    job.affinity = *actual;
    if (prev && prev->target == target) {
      // Done before (the kernel may have narrowed it to the cpuset).
      if (target != before) kept[job.tid] = *prev;
      continue;
    }
    if (*actual == target) {
      if (target != before) kept[job.tid] = Change{before, target, *actual};
      continue;
    }
    ++stats.affinity_writes;
    absl::Status set = affinity_->Set(job.tid, target);
    if (absl::IsNotFound(set)) {
      job.gone = true;
      continue;
    }
    if (!set.ok()) {
      job.error = set;
      if (prev) kept[job.tid] = *prev;
      LOG_EVERY_N(WARNING, 100) << set;
      continue;
    }
    ++stats.affinity_reads;
    absl::StatusOr<host::CpuSet> now = affinity_->Get(job.tid);
    if (absl::IsNotFound(now.status())) {
      job.gone = true;
      continue;
    }
    host::CpuSet applied = now.ok() ? *now : target;
    if (now.ok()) {
      job.affinity = applied;
    } else {
      job.affinity.reset();
      job.error = now.status();
    }
    if (target == before) {
      ++stats.threads_restored;
    } else {
      kept[job.tid] = Change{before, target, applied};
    }
  }
  // Threads not seen in this pass are gone (their ids may be reused).
  changes_ = std::move(kept);

}

void DedicatedCoreEnforcer::Apply(const DedicatedCorePlan& plan,
                                  const std::vector<DedicatedVmThreads>& vms,
                                  DedicatedCoreResult& result) {
  std::vector<AffinityJob> jobs = AffinityJobs(plan, vms);
  RunJobs(jobs, result.stats);
  std::map<int, const AffinityJob*> job_of;
  for (const AffinityJob& job : jobs) job_of[job.tid] = &job;
  for (size_t i = 0; i < vms.size(); ++i) {
    result.vms.push_back(OutcomeOf(i, vms[i], plan, jobs, job_of));
    result.vms.back().vcpu_affinity = OthersAffinity(vms[i], plan, job_of, result.stats);
  }
}

host::CpuSet DedicatedCoreEnforcer::OthersAffinity(const DedicatedVmThreads& vm,
                                                   const DedicatedCorePlan& plan,
                                                   const std::map<int, const AffinityJob*>& job_of,
                                                   DedicatedCoreStats& stats) {
  host::CpuSet all;
  for (int tid : vm.vcpu_tids) {
    if (auto change = changes_.find(tid); change != changes_.end()) {
      all = all.Union(change->second.before);
      continue;
    }
    if (auto job = job_of.find(tid); job != job_of.end()) {
      if (job->second->affinity) all = all.Union(*job->second->affinity);
      continue;
    }
    ++stats.affinity_reads;
    absl::StatusOr<host::CpuSet> actual = affinity_->Get(tid);
    if (actual.ok()) all = all.Union(*actual);
  }
  const host::CpuSet on_host = all.Intersect(plan.host_cpus);
  return on_host == plan.host_cpus ? host::CpuSet() : on_host;
}

void MergeDedicatedOutcome(const DedicatedVmOutcome& outcome,
                           v1::VMEnforcement& enforcement) {
  enforcement.clear_vcpu_affinity();
  for (int cpu : outcome.vcpu_affinity.cpus()) enforcement.add_vcpu_affinity(cpu);
  enforcement.clear_pinned_cpus();
  for (int cpu : outcome.pinned.cpus()) enforcement.add_pinned_cpus(cpu);
  if (outcome.status.ok()) return;
  const std::string message(outcome.status.message());
  enforcement.set_last_error(
      enforcement.last_error().empty()
          ? message
          : absl::StrCat(enforcement.last_error(), "; ", message));
  // Other VMs keep their state: their own isolation (the cookie) holds, and
  // the dedicated VM whose cores they may reach reports the breach.
  if (!outcome.dedicated) return;
  const v1::EnforcementState lowered =
      outcome.vcpus > 0 && outcome.vcpus_confined == 0
          ? v1::ENFORCEMENT_STATE_FAILED
          : v1::ENFORCEMENT_STATE_PARTIAL;
  const int rank = StateRank(enforcement.state());
  if (rank >= 0 && StateRank(lowered) > rank) enforcement.set_state(lowered);
}

}  // namespace cosched::agent
