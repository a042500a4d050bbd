#include "discovery/procfs_discovery.h"

#include <glog/logging.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "discovery/proc_parsers.h"

namespace cosched::discovery {
namespace {

using Kind = DiscoveredThread::Kind;

// kthreadd's pid in the initial PID namespace: every kernel thread is its
// child.
constexpr int kKthreaddPid = 2;

// kthreadd's pid as this /proc shows it, or -1 when it shows none. In any
// other PID namespace (a container, two agents on one machine in a test)
// pid 2 is an ordinary process, perhaps QEMU itself, and kernel threads are
// not visible at all; kthreadd is the pid 2 without a parent.
int KthreaddPid(const host::PseudoFs& fs, absl::string_view root) {
  absl::StatusOr<std::string> text = fs.ReadFile(absl::StrCat(root, "/", kKthreaddPid, "/stat"));
  if (!text.ok()) return -1;
  absl::StatusOr<ProcStat> stat = ParseProcStat(*text);
  return stat.ok() && stat->ppid == 0 ? kKthreaddPid : -1;
}

struct Process {
  ProcStat stat;
  std::string cmdline;
};

struct Thread {
  int tid = 0;
  std::string comm;
};

// Logs an unexpected failure to read one process or thread (NOT_FOUND, the
// task having exited, is expected and only traced).
void NoteSkipped(const absl::Status& status) {
  if (absl::IsNotFound(status)) {
    VLOG(2) << "discovery: skipped a task that exited: " << status.message();
  } else {
    LOG_EVERY_N(WARNING, 100) << "discovery: skipped a task: " << status;
  }
}

// The threads of process `pid` with their names; empty when it has exited.
std::vector<Thread> ListThreads(const host::PseudoFs& fs, absl::string_view root, int pid) {
  std::vector<Thread> threads;
  absl::StatusOr<std::vector<std::string>> tids = fs.ListDirectory(absl::StrCat(root, "/", pid, "/task"));
  if (!tids.ok()) {
    NoteSkipped(tids.status());
    return threads;
  }
  for (const std::string& name : *tids) {
    int tid = 0;
    if (!absl::SimpleAtoi(name, &tid)) continue;
    absl::StatusOr<std::string> comm = fs.ReadFile(absl::StrCat(root, "/", pid, "/task/", tid, "/comm"));
    if (!comm.ok()) {
      NoteSkipped(comm.status());
      continue;
    }
    threads.push_back({tid, std::string(absl::StripSuffix(*comm, "\n"))});
  }
  return threads;
}

// The VM cgroup of process `pid`, if it is placed in one.
std::optional<std::string> ReadVmCgroup(const host::PseudoFs& fs, absl::string_view root, int pid,
                                        const std::vector<std::string>& vm_parents) {
  absl::StatusOr<std::string> text = fs.ReadFile(absl::StrCat(root, "/", pid, "/cgroup"));
  if (!text.ok()) {
    NoteSkipped(text.status());
    return std::nullopt;
  }
  absl::StatusOr<std::vector<CgroupEntry>> entries = ParseCgroupFile(*text);
  if (!entries.ok()) {
    LOG_EVERY_N(WARNING, 100) << "discovery: pid " << pid << ": " << entries.status();
    return std::nullopt;
  }
  return VmCgroup(PlacementCgroup(*entries), vm_parents);
}

}  // namespace

ProcfsDiscovery::ProcfsDiscovery(std::shared_ptr<const host::PseudoFs> fs)
    : ProcfsDiscovery(std::move(fs), Options()) {}

ProcfsDiscovery::ProcfsDiscovery(std::shared_ptr<const host::PseudoFs> fs, Options options)
    : fs_(std::move(fs)), options_(std::move(options)) {}

absl::StatusOr<std::vector<DiscoveredVm>> ProcfsDiscovery::Discover() {
  return Discover(std::span<const int>());
}

namespace {

// Every process of the procfs: what it is and who its parent is. Zombies
// are left out (no threads left to tag), and so is a process that goes
// away or cannot be read during the scan.
std::map<int, Process> ScanProcesses(const host::PseudoFs& fs, absl::string_view root,
                                     const std::vector<std::string>& names, int kthreadd) {
  std::map<int, Process> processes;
  for (const std::string& name : names) {
    int pid = 0;
    if (!absl::SimpleAtoi(name, &pid) || pid <= 0) continue;
    absl::StatusOr<std::string> stat_text = fs.ReadFile(absl::StrCat(root, "/", pid, "/stat"));
    if (!stat_text.ok()) {
      NoteSkipped(stat_text.status());
      continue;
    }
    absl::StatusOr<ProcStat> stat = ParseProcStat(*stat_text);
    if (!stat.ok()) {
      LOG_EVERY_N(WARNING, 100) << "discovery: pid " << pid << ": " << stat.status();
      continue;
    }
    if (stat->state == 'Z' || stat->state == 'X') continue;
    Process process{std::move(*stat), ""};
    // Kernel threads have no command line.
    if (process.stat.ppid != kthreadd && pid != kthreadd) {
      absl::StatusOr<std::string> cmdline = fs.ReadFile(absl::StrCat(root, "/", pid, "/cmdline"));
      if (!cmdline.ok()) {
        NoteSkipped(cmdline.status());
        continue;
      }
      process.cmdline = std::move(*cmdline);
    }
    processes.emplace(pid, std::move(process));
  }
  return processes;
}

// The scanned processes, indexed the ways a VM's threads are found.
struct ProcessTree {
  int kthreadd = 0;
  std::map<int, Process> processes;
  std::map<int, QemuCommandLine> qemus;  // the VMs, and impostors
  std::map<int, std::string> impostors;  // pid -> why it is not believed
  std::map<int, std::vector<int>> children;
  std::map<std::string, std::vector<int>> vhost_by_comm;  // "vhost-<pid>" -> pids
  // Each VM's own cgroup, and (with helpers) every other process in one.
  std::map<int, std::string> qemu_cgroups;
  std::map<std::string, std::vector<int>> cgroup_members;
};

void FindQemus(const host::PseudoFs& fs, absl::string_view root, const VmmRule& vmm,
               const std::set<int>& known, ProcessTree& tree) {
  for (const auto& [pid, process] : tree.processes) {
    if (std::optional<QemuCommandLine> qemu = ParseQemuCommandLine(process.cmdline)) {
      if (!known.count(pid)) {
        if (std::optional<std::string> why = VmmRuleViolation(fs, root, pid, vmm)) {
          tree.impostors.emplace(pid, std::move(*why));
        }
      }
      tree.qemus.emplace(pid, std::move(*qemu));
    } else if (known.count(pid)) {
      tree.qemus.emplace(pid, ParseQemuArguments(process.cmdline));
    }
    tree.children[process.stat.ppid].push_back(pid);
    if (absl::StartsWith(process.stat.comm, "vhost-")) {
      tree.vhost_by_comm[process.stat.comm].push_back(pid);
    }
  }
  // A child that QEMU forked without exec shows QEMU's command line: it is
  // a helper of that VM, not a VM of its own.
  for (auto it = tree.qemus.begin(); it != tree.qemus.end();) {
    const Process& process = tree.processes.at(it->first);
    auto parent = tree.processes.find(process.stat.ppid);
    if (!known.count(it->first) && tree.qemus.count(process.stat.ppid) &&
        parent != tree.processes.end() && parent->second.cmdline == process.cmdline) {
      tree.impostors.erase(it->first);
      it = tree.qemus.erase(it);
    } else {
      ++it;
    }
  }
}

// Each VM's own cgroup (forced idle is read there). Helpers by cgroup: only
// read every process's cgroup when some VM has a cgroup of its own.
void FindCgroups(const host::PseudoFs& fs, absl::string_view root,
                 const ProcfsDiscovery::Options& options, ProcessTree& tree) {
  for (const auto& [pid, qemu] : tree.qemus) {
    if (auto cgroup = ReadVmCgroup(fs, root, pid, options.vm_cgroup_parents)) {
      tree.qemu_cgroups.emplace(pid, *cgroup);
    }
  }
  if (!options.include_helpers || tree.qemu_cgroups.empty()) return;
  for (const auto& [pid, process] : tree.processes) {
    if (tree.qemus.count(pid) || process.stat.ppid == tree.kthreadd || pid == tree.kthreadd) {
      continue;
    }
    if (auto cgroup = ReadVmCgroup(fs, root, pid, options.vm_cgroup_parents)) {
      tree.cgroup_members[*cgroup].push_back(pid);
    }
  }
}

// The VM of QEMU `qemu_pid` and every thread that carries its cookie: its
// own, its vhost kernel threads and (with helpers) its children and the
// other processes of its cgroup. Nullopt when QEMU exited during the scan.
std::optional<DiscoveredVm> BuildVm(const host::PseudoFs& fs, absl::string_view root,
                                    const ProcfsDiscovery::Options& options,
                                    const ProcessTree& tree, int qemu_pid,
                                    const QemuCommandLine& qemu) {
  std::vector<Thread> own = ListThreads(fs, root, qemu_pid);
  if (own.empty()) return std::nullopt;
  DiscoveredVm vm;
  vm.vm_id = qemu.VmId();
  vm.uuid = qemu.uuid;
  vm.qemu_pid = qemu_pid;
  auto own_cgroup = tree.qemu_cgroups.find(qemu_pid);
  if (own_cgroup != tree.qemu_cgroups.end()) vm.cgroup = own_cgroup->second;
  for (Thread& t : own) {
    Kind kind = ClassifyQemuThread(t.comm, qemu_pid);
    vm.threads.push_back({t.tid, qemu_pid, std::move(t.comm), kind});
  }

  // vhost workers outside QEMU's thread group (kernel threads).
  std::set<int> taken = {qemu_pid};
  auto vhost = tree.vhost_by_comm.find(VhostWorkerName(qemu_pid));
  if (vhost != tree.vhost_by_comm.end()) {
    for (int pid : vhost->second) {
      // vhost workers before Linux 6.4 are kernel threads (children of
      // kthreadd); a child of that QEMU is the VM's own process either way.
      // Any other process that names itself vhost-<pid> must not get the
      // VM's cookie.
      const int ppid = tree.processes.at(pid).stat.ppid;
      if (ppid != tree.kthreadd && ppid != qemu_pid) continue;
      if (!taken.insert(pid).second) continue;
      for (Thread& t : ListThreads(fs, root, pid)) {
        Kind kind = t.comm == vhost->first ? Kind::kVhostWorker : Kind::kHelper;
        vm.threads.push_back({t.tid, pid, std::move(t.comm), kind});
      }
    }
  }

  if (options.include_helpers) {
    std::set<int> helpers;
    if (auto kids = tree.children.find(qemu_pid); kids != tree.children.end()) {
      helpers.insert(kids->second.begin(), kids->second.end());
    }
    if (auto members = tree.cgroup_members.find(vm.cgroup);
        !vm.cgroup.empty() && members != tree.cgroup_members.end()) {
      helpers.insert(members->second.begin(), members->second.end());
    }
    for (int pid : helpers) {
      if (tree.qemus.count(pid) || !taken.insert(pid).second) continue;
      for (Thread& t : ListThreads(fs, root, pid)) {
        vm.threads.push_back({t.tid, pid, std::move(t.comm), Kind::kHelper});
      }
    }
  }

  std::sort(vm.threads.begin(), vm.threads.end(),
            [](const DiscoveredThread& a, const DiscoveredThread& b) {
              return std::pair(a.pid, a.tid) < std::pair(b.pid, b.tid);
            });
  if (auto impostor = tree.impostors.find(qemu_pid); impostor != tree.impostors.end()) {
    LOG_EVERY_N(WARNING, 100) << "discovery: pid " << qemu_pid << " claims VM '" << vm.vm_id
                              << "' but " << impostor->second
                              << ": isolating it on a cookie of its own";
    vm.MarkImpostor(impostor->second);
  } else if (vm.vm_id.empty()) {
    LOG_EVERY_N(WARNING, 100) << "discovery: QEMU pid " << qemu_pid
                              << " has neither -name nor -uuid";
  }
  return vm;
}

}  // namespace

absl::StatusOr<std::vector<DiscoveredVm>> ProcfsDiscovery::Discover(
    std::span<const int> known_qemu_pids) {
  const host::PseudoFs& fs = *fs_;
  const absl::string_view root = options_.procfs_root;
  absl::StatusOr<std::vector<std::string>> names = fs.ListDirectory(root);
  if (!names.ok()) {
    return absl::Status(names.status().code(),
                        absl::StrCat("cannot scan procfs: ", names.status().message()));
  }
  ProcessTree tree;
  tree.kthreadd = KthreaddPid(fs, root);
  tree.processes = ScanProcesses(fs, root, *names, tree.kthreadd);
  FindQemus(fs, root, options_.vmm, std::set<int>(known_qemu_pids.begin(), known_qemu_pids.end()),
            tree);
  FindCgroups(fs, root, options_, tree);
  std::vector<DiscoveredVm> vms;
  for (const auto& [qemu_pid, qemu] : tree.qemus) {
    if (std::optional<DiscoveredVm> vm = BuildVm(fs, root, options_, tree, qemu_pid, qemu)) {
      vms.push_back(std::move(*vm));
    }
  }
  return vms;
}

absl::StatusOr<bool> RunsQemu(const host::PseudoFs& fs, absl::string_view procfs_root, int pid) {
  absl::StatusOr<std::string> cmdline =
      fs.ReadFile(absl::StrCat(procfs_root, "/", pid, "/cmdline"));
  if (!cmdline.ok()) return cmdline.status();
  // ParseQemuCommandLine's test, without splitting the rest of the line.
  const absl::string_view text = *cmdline;
  return IsQemuBinary(text.substr(0, text.find('\0')));
}

std::vector<DiscoveredThread> ThreadsInScope(const DiscoveredVm& vm, v1::ThreadScope scope) {
  std::vector<DiscoveredThread> threads;
  for (const DiscoveredThread& t : vm.threads) {
    bool in = false;
    switch (scope) {
      case v1::THREAD_SCOPE_VCPUS:
        in = t.kind == Kind::kVcpu;
        break;
      case v1::THREAD_SCOPE_FULL:
        in = true;
        break;
      default:  // EMULATOR, and UNSPECIFIED which means it
        in = t.kind != Kind::kHelper;
        break;
    }
    if (in) threads.push_back(t);
  }
  return threads;
}

const char* ThreadKindName(Kind kind) {
  switch (kind) {
    case Kind::kVcpu:
      return "vcpu";
    case Kind::kEmulator:
      return "emulator";
    case Kind::kIothread:
      return "iothread";
    case Kind::kVhostWorker:
      return "vhost";
    case Kind::kHelper:
      return "helper";
  }
  return "unknown";
}

}  // namespace cosched::discovery
