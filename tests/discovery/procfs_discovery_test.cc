#include "discovery/procfs_discovery.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "host/pseudo_fs.h"
#include "host/testing/pseudo_fs_fake.h"
#include "tests/testing/status_matchers.h"

namespace cosched::discovery {
namespace {

using discovery::DiscoveredThread;
using discovery::DiscoveredVm;
using Kind = discovery::DiscoveredThread::Kind;

std::string Cmdline(std::initializer_list<std::string> args) {
  std::string text;
  for (const std::string& a : args) text += a + '\0';
  return text;
}

struct FakeThread {
  int tid;
  std::string comm;
};

// Adds a process the way procfs shows it: run by root, its exe the path
// its argv[0] names (under /usr/bin when relative).
void AddProcess(host::FakePseudoFs& fs, int pid, int ppid, const std::string& comm,
                const std::string& cmdline, const std::string& cgroup,
                std::vector<FakeThread> threads = {}) {
  fs.SetFile(absl::StrCat("/proc/", pid, "/stat"),
             absl::StrCat(pid, " (", comm, ") S ", ppid, " ", pid, " ", pid, " 0 -1 4194560 0\n"));
  fs.SetFile(absl::StrCat("/proc/", pid, "/cmdline"), cmdline);
  const std::string argv0 = cmdline.substr(0, cmdline.find('\0'));
  if (!argv0.empty()) {
    fs.SetLink(absl::StrCat("/proc/", pid, "/exe"),
               argv0[0] == '/' ? argv0 : absl::StrCat("/usr/bin/", argv0));
  }
  fs.SetFile(absl::StrCat("/proc/", pid, "/status"),
             absl::StrCat("Name:\t", comm, "\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n"));
  fs.SetFile(absl::StrCat("/proc/", pid, "/cgroup"), cgroup);
  if (threads.empty()) threads.push_back({pid, comm});
  for (const FakeThread& t : threads) {
    fs.SetFile(absl::StrCat("/proc/", pid, "/task/", t.tid, "/comm"), t.comm + "\n");
  }
}

// A host with one libvirt-style QEMU VM and everything around it.
std::shared_ptr<host::FakePseudoFs> FakeHost() {
  auto fs = std::make_shared<host::FakePseudoFs>();
  const std::string vm_cgroup = "0::/machine.slice/machine-qemu\\x2d1\\x2dvm\\x2d1.scope/libvirt/emulator\n";
  AddProcess(*fs, 1, 0, "init", Cmdline({"/sbin/init"}), "0::/init.scope\n");
  AddProcess(*fs, 2, 0, "kthreadd", "", "0::/\n");
  AddProcess(*fs, 1000, 1, "qemu-system-x86",
             Cmdline({"/usr/bin/qemu-system-x86_64", "-name", "guest=vm-1,debug-threads=on",
                      "-uuid", "11111111-2222-3333-4444-555555555555", "-smp", "2"}),
             vm_cgroup,
             {{1000, "qemu-system-x86"},
              {1001, "call_rcu"},
              {1002, "CPU 0/KVM"},
              {1003, "CPU 1/KVM"},
              {1004, "IO iothread0"},
              {1005, "vhost-1000"}});
  // A thread that exits between the listing of task/ and the read of comm.
  fs->SetReadError("/proc/1000/task/1006/comm", absl::NotFoundError("ESRCH"));
  // Old-style vhost worker: a kernel thread of its own.
  AddProcess(*fs, 1100, 2, "vhost-1000", "", "0::/\n");
  // A user process posing as vm-1's old-style vhost worker: not a kernel
  // thread, so not the VM's.
  AddProcess(*fs, 1150, 1400, "vhost-1000", Cmdline({"./pose"}),
             "0::/user.slice/session-1.scope\n");
  // A vhost worker of another (gone) QEMU.
  AddProcess(*fs, 1101, 2, "vhost-999", "", "0::/\n");
  // A child process of QEMU (e.g. a helper it started).
  AddProcess(*fs, 1200, 1000, "virtiofsd", Cmdline({"/usr/libexec/virtiofsd", "--fd=3"}),
             "0::/user.slice\n", {{1200, "virtiofsd"}, {1201, "virtiofsd"}});
  // A child that QEMU forked without exec (same command line).
  AddProcess(*fs, 1250, 1000, "qemu-system-x86",
             Cmdline({"/usr/bin/qemu-system-x86_64", "-name", "guest=vm-1,debug-threads=on",
                      "-uuid", "11111111-2222-3333-4444-555555555555", "-smp", "2"}),
             vm_cgroup);
  // A helper that libvirt started in the VM's cgroup (not QEMU's child).
  AddProcess(*fs, 1300, 1, "swtpm", Cmdline({"/usr/bin/swtpm", "socket"}),
             "0::/machine.slice/machine-qemu\\x2d1\\x2dvm\\x2d1.scope\n");
  // Unrelated processes, one in a shared cgroup with an unmanaged QEMU.
  AddProcess(*fs, 1400, 1, "bash", Cmdline({"/bin/bash"}), "0::/user.slice/session-1.scope\n");
  // An unmanaged QEMU with a UUID only, in a shared session cgroup.
  AddProcess(*fs, 2000, 1400, "qemu-kvm",
             Cmdline({"/usr/libexec/qemu-kvm", "-uuid", "99999999-8888-7777-6666-555555555555"}),
             "0::/user.slice/session-1.scope\n", {{2000, "qemu-kvm"}, {2001, "CPU 0/TCG"}});
  AddProcess(*fs, 2100, 1, "sshd", Cmdline({"sshd"}), "0::/user.slice/session-1.scope\n");
  // A process that is gone by the time its files are read.
  fs->SetReadError("/proc/3000/stat", absl::NotFoundError("ENOENT"));
  // A QEMU whose threads are gone (exited after its stat was read).
  AddProcess(*fs, 3100, 1, "qemu-system-x86", Cmdline({"qemu-system-x86_64", "-name", "gone"}),
             "0::/\n");
  fs->Remove("/proc/3100/task");
  // A zombie QEMU.
  fs->SetFile("/proc/3200/stat", "3200 (qemu-system-x86) Z 1 3200 3200 0 -1 0\n");
  fs->SetFile("/proc/3200/cmdline", "");
  return fs;
}

const discovery::DiscoveredVm* FindVm(const std::vector<discovery::DiscoveredVm>& vms, int qemu_pid) {
  for (const discovery::DiscoveredVm& vm : vms) {
    if (vm.qemu_pid == qemu_pid) return &vm;
  }
  return nullptr;
}

TEST(ProcfsDiscovery, FakeHostWithEveryKindOfThread) {
  ProcfsDiscovery discovery(FakeHost());
  auto vms = discovery.Discover();
  ASSERT_OK(vms);
  ASSERT_EQ(vms->size(), 2u);

  const discovery::DiscoveredVm& vm = (*vms)[0];
  EXPECT_EQ(vm.vm_id, "vm-1");
  EXPECT_EQ(vm.uuid, "11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(vm.qemu_pid, 1000);
  // libvirt's inner "libvirt/emulator" groups belong to the VM's scope.
  EXPECT_EQ(vm.cgroup, "/machine.slice/machine-qemu\\x2d1\\x2dvm\\x2d1.scope");
  std::vector<discovery::DiscoveredThread> expected = {
      {1000, 1000, "qemu-system-x86", Kind::kEmulator},
      {1001, 1000, "call_rcu", Kind::kEmulator},
      {1002, 1000, "CPU 0/KVM", Kind::kVcpu},
      {1003, 1000, "CPU 1/KVM", Kind::kVcpu},
      {1004, 1000, "IO iothread0", Kind::kIothread},
      {1005, 1000, "vhost-1000", Kind::kVhostWorker},
      {1100, 1100, "vhost-1000", Kind::kVhostWorker},
      {1200, 1200, "virtiofsd", Kind::kHelper},
      {1201, 1200, "virtiofsd", Kind::kHelper},
      {1250, 1250, "qemu-system-x86", Kind::kHelper},
      {1300, 1300, "swtpm", Kind::kHelper},
  };
  EXPECT_EQ(vm.threads, expected);

  const discovery::DiscoveredVm& unmanaged = (*vms)[1];
  EXPECT_EQ(unmanaged.vm_id, "99999999-8888-7777-6666-555555555555");
  EXPECT_EQ(unmanaged.qemu_pid, 2000);
  EXPECT_EQ(unmanaged.cgroup, "");
  // Its session cgroup is shared, so sshd and bash are not its helpers.
  EXPECT_EQ(unmanaged.threads, (std::vector<discovery::DiscoveredThread>{
                                   {2000, 2000, "qemu-kvm", Kind::kEmulator},
                                   {2001, 2000, "CPU 0/TCG", Kind::kVcpu}}));
}

TEST(ProcfsDiscovery, WithoutHelpers) {
  ProcfsDiscovery::Options no_helpers;
  no_helpers.include_helpers = false;
  ProcfsDiscovery discovery(FakeHost(), no_helpers);
  auto vms = discovery.Discover();
  ASSERT_OK(vms);
  for (const discovery::DiscoveredThread& t : (*vms)[0].threads) EXPECT_NE(t.kind, Kind::kHelper) << t.tid;
  EXPECT_EQ((*vms)[0].threads.size(), 7u);
  // The VM's cgroup is found without helpers too: forced idle needs it.
  EXPECT_EQ((*vms)[0].cgroup, "/machine.slice/machine-qemu\\x2d1\\x2dvm\\x2d1.scope");
}

TEST(ProcfsDiscovery, KnownPidOfAWrapper) {
  auto fs = FakeHost();
  AddProcess(*fs, 4000, 1, "kvm-wrapper",
             Cmdline({"/usr/local/bin/kvm-wrapper", "-name", "guest=wrapped"}), "0::/\n",
             {{4000, "kvm-wrapper"}, {4001, "CPU 0/KVM"}});
  ProcfsDiscovery discovery(fs);
  auto plain = discovery.Discover();
  ASSERT_OK(plain);
  EXPECT_EQ(FindVm(*plain, 4000), nullptr);
  const int known[] = {4000, 4242};  // 4242 does not exist
  auto with_known = discovery.Discover(known);
  ASSERT_OK(with_known);
  const discovery::DiscoveredVm* vm = FindVm(*with_known, 4000);
  ASSERT_NE(vm, nullptr);
  EXPECT_EQ(vm->vm_id, "wrapped");
  EXPECT_EQ(vm->threads.size(), 2u);
  EXPECT_EQ(FindVm(*with_known, 4242), nullptr);
}

// In a PID namespace of its own (a container, or one "host" of a test with
// two agents on one machine) pid 2 is whatever started second, here QEMU;
// kernel threads are not visible there at all.
TEST(ProcfsDiscovery, QemuAsPid2OfAPidNamespaceIsAVm) {
  auto fs = std::make_shared<host::FakePseudoFs>();
  AddProcess(*fs, 1, 0, "sh", Cmdline({"/bin/sh"}), "0::/\n");
  AddProcess(*fs, 2, 1, "qemu-system-x86",
             Cmdline({"qemu-system-x86_64", "-name", "guest=vm-ns", "-uuid",
                      "11111111-2222-3333-4444-555555555555"}),
             "0::/\n", {{2, "qemu-system-x86"}, {3, "CPU 0/TCG"}});
  AddProcess(*fs, 4, 2, "vhost-2", Cmdline({"./pose"}), "0::/\n");
  AddProcess(*fs, 5, 1, "cs-agent", Cmdline({"cs-agent"}), "0::/\n");
  ProcfsDiscovery discovery(fs);
  auto vms = discovery.Discover();
  ASSERT_OK(vms);
  const discovery::DiscoveredVm* vm = FindVm(*vms, 2);
  ASSERT_NE(vm, nullptr);
  EXPECT_EQ(vm->vm_id, "vm-ns");
  EXPECT_EQ(vm->threads.size(), 3u);  // its two threads and its child
}

TEST(ProcfsDiscovery, UnreadableProcIsAnError) {
  ProcfsDiscovery::Options nowhere;
  nowhere.procfs_root = "/nonexistent/proc";
  ProcfsDiscovery missing(std::make_shared<host::LocalPseudoFs>(), nowhere);
  auto vms = missing.Discover();
  ASSERT_FALSE(vms.ok());
  EXPECT_EQ(vms.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(vms.status().message().find("cannot scan procfs"), std::string::npos);

  auto fs = std::make_shared<host::FakePseudoFs>();  // nothing at all
  EXPECT_FALSE(ProcfsDiscovery(fs).Discover().ok());
}

TEST(ProcfsDiscovery, ThreadsInScope) {
  ProcfsDiscovery discovery(FakeHost());
  auto vms = discovery.Discover();
  ASSERT_OK(vms);
  const discovery::DiscoveredVm& vm = (*vms)[0];
  EXPECT_EQ(ThreadsInScope(vm, v1::THREAD_SCOPE_VCPUS).size(), 2u);
  EXPECT_EQ(ThreadsInScope(vm, v1::THREAD_SCOPE_EMULATOR).size(), 7u);
  EXPECT_EQ(ThreadsInScope(vm, v1::THREAD_SCOPE_UNSPECIFIED).size(), 7u);
  EXPECT_EQ(ThreadsInScope(vm, v1::THREAD_SCOPE_FULL).size(), 11u);
  EXPECT_STREQ(ThreadKindName(Kind::kVhostWorker), "vhost");
}

// Runs the fake QEMU (fake_vm_process.cc, built as qemu-system-x86_64) and
// finds it, with every thread, in the machine's real /proc.
class FakeVmProcess {
 public:
  FakeVmProcess(const std::string& name, const std::string& uuid) {
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      std::string guest = "guest=" + name + ",debug-threads=on";
      execl(COSCHED_FAKE_VM_PROCESS, COSCHED_FAKE_VM_PROCESS, "-name", guest.c_str(), "-uuid",
            uuid.c_str(), nullptr);
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    stdin_ = to_child[1];
    FILE* out = fdopen(from_child[0], "r");
    char line[32] = {};
    ready_ = out != nullptr && fgets(line, sizeof line, out) != nullptr &&
             std::string(line) == "ready\n";
    if (out != nullptr) fclose(out);
  }
  ~FakeVmProcess() {
    if (stdin_ >= 0) close(stdin_);  // it exits when its stdin closes
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  int pid() const { return pid_; }
  bool ready() const { return ready_; }

 private:
  int pid_ = -1;
  int stdin_ = -1;
  bool ready_ = false;
};

// The fake QEMU counts as a VMM binary, run by whoever runs the test.
ProcfsDiscovery::Options FakeVmmAllowed() {
  ProcfsDiscovery::Options options;
  options.vmm.binaries = {COSCHED_FAKE_VM_PROCESS};
  options.vmm.uids = {static_cast<uint32_t>(getuid())};
  return options;
}

TEST(ProcfsDiscovery, FindsARealProcessWithEveryThread) {
  FakeVmProcess fake("vm-real", "0cc5e3a0-7f4b-4a5e-9a4c-2b9d1c3e4f50");
  ASSERT_TRUE(fake.ready()) << "the fake VM process did not start";
  ProcfsDiscovery discovery(std::make_shared<host::LocalPseudoFs>(), FakeVmmAllowed());
  auto vms = discovery.Discover();
  ASSERT_OK(vms);
  const discovery::DiscoveredVm* vm = FindVm(*vms, fake.pid());
  ASSERT_NE(vm, nullptr) << "pid " << fake.pid() << " not found among " << vms->size() << " VMs";
  EXPECT_EQ(vm->vm_id, "vm-real");
  EXPECT_EQ(vm->uuid, "0cc5e3a0-7f4b-4a5e-9a4c-2b9d1c3e4f50");

  int pid = fake.pid();
  std::vector<std::pair<std::string, Kind>> seen;
  int helper_pid = 0;
  for (const discovery::DiscoveredThread& t : vm->threads) {
    if (t.kind == Kind::kHelper) {
      helper_pid = t.pid;
      EXPECT_EQ(t.name, "fake-helper");
      continue;
    }
    EXPECT_EQ(t.pid, pid) << t.name;
    seen.emplace_back(t.name, t.kind);
  }
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, Kind>>{
                      {"qemu-system-x86", Kind::kEmulator},
                      {"CPU 0/KVM", Kind::kVcpu},
                      {"CPU 1/KVM", Kind::kVcpu},
                      {"IO iothread0", Kind::kIothread},
                      {"vhost-" + std::to_string(pid), Kind::kVhostWorker}}));
  EXPECT_GT(helper_pid, 0) << "the child process was not found as a helper";
  EXPECT_EQ(vm->threads.front().tid, pid);
}

// The same real process under the default rule: its binary is not QEMU's,
// whatever its argv says, so it is an impostor with every thread still
// found (they get a fail-closed cookie of their own).
TEST(ProcfsDiscovery, ARealProcessPosingAsQemuIsAnImpostor) {
  FakeVmProcess fake("vm-posing", "0cc5e3a0-7f4b-4a5e-9a4c-2b9d1c3e4f51");
  ASSERT_TRUE(fake.ready()) << "the fake VM process did not start";
  ProcfsDiscovery discovery(std::make_shared<host::LocalPseudoFs>());
  auto vms = discovery.Discover();
  ASSERT_OK(vms);
  const discovery::DiscoveredVm* vm = FindVm(*vms, fake.pid());
  ASSERT_NE(vm, nullptr);
  EXPECT_EQ(vm->vm_id, "");
  EXPECT_EQ(vm->uuid, "");
  ASSERT_TRUE(vm->impostor.has_value());
  EXPECT_EQ(vm->impostor->claimed_vm_id, "vm-posing");
  EXPECT_EQ(vm->impostor->claimed_uuid, "0cc5e3a0-7f4b-4a5e-9a4c-2b9d1c3e4f51");
  EXPECT_NE(vm->impostor->reason.find(COSCHED_FAKE_VM_PROCESS), std::string::npos)
      << vm->impostor->reason;
  EXPECT_EQ(vm->threads.size(), 6u);  // its five threads and its helper's
}

// A host where three processes claim VMs: one by the rules, one from a
// binary that is not a VMM's, one run by a user that may not run VMs.
std::shared_ptr<host::FakePseudoFs> PosingHost() {
  auto fs = std::make_shared<host::FakePseudoFs>();
  AddProcess(*fs, 1, 0, "init", Cmdline({"/sbin/init"}), "0::/init.scope\n");
  AddProcess(*fs, 2, 0, "kthreadd", "", "0::/\n");
  AddProcess(*fs, 100, 1, "qemu-system-x86",
             Cmdline({"/usr/bin/qemu-system-x86_64", "-name", "guest=acme-1"}), "0::/\n",
             {{100, "qemu-system-x86"}, {101, "CPU 0/KVM"}});
  // An upgrade replaced QEMU's binary while the VM runs.
  fs->SetLink("/proc/100/exe", "/usr/bin/qemu-system-x86_64 (deleted)");
  AddProcess(*fs, 200, 1, "qemu-system-x86",
             Cmdline({"qemu-system-x86_64", "-name", "guest=acme-9", "-uuid", "abc"}), "0::/\n");
  fs->SetLink("/proc/200/exe", "/home/mallory/qemu-system-x86_64");
  AddProcess(*fs, 300, 1, "qemu-system-x86",
             Cmdline({"/usr/bin/qemu-system-x86_64", "-name", "guest=acme-8"}), "0::/\n");
  fs->SetFile("/proc/300/status", "Name:\tqemu\nUid:\t1000\t1000\t1000\t1000\n");
  return fs;
}

TEST(ProcfsDiscovery, OnlyAllowedBinariesRunByAllowedUsersAreVms) {
  ProcfsDiscovery discovery(PosingHost());
  auto vms = discovery.Discover();
  ASSERT_OK(vms);
  ASSERT_EQ(vms->size(), 3u);
  const DiscoveredVm* real = FindVm(*vms, 100);
  ASSERT_NE(real, nullptr);
  EXPECT_EQ(real->vm_id, "acme-1");
  EXPECT_FALSE(real->impostor.has_value()) << real->impostor->reason;

  const DiscoveredVm* binary = FindVm(*vms, 200);
  ASSERT_NE(binary, nullptr);
  EXPECT_EQ(binary->vm_id, "");
  ASSERT_TRUE(binary->impostor.has_value());
  EXPECT_EQ(binary->impostor->claimed_vm_id, "acme-9");
  EXPECT_EQ(binary->impostor->claimed_uuid, "abc");
  EXPECT_NE(binary->impostor->reason.find("runs /home/mallory/qemu-system-x86_64, not an allowed "
                                          "VMM binary"),
            std::string::npos)
      << binary->impostor->reason;

  const DiscoveredVm* user = FindVm(*vms, 300);
  ASSERT_NE(user, nullptr);
  ASSERT_TRUE(user->impostor.has_value());
  EXPECT_EQ(user->impostor->claimed_vm_id, "acme-8");
  EXPECT_NE(user->impostor->reason.find("uid 1000"), std::string::npos) << user->impostor->reason;

  // An operator who allows that user and a pattern for that binary.
  ProcfsDiscovery::Options allowed;
  allowed.vmm.binaries = {"/usr/bin/qemu-system-*", "/home/*/qemu-system-x86_64"};
  allowed.vmm.uids = {0, 1000};
  auto all = ProcfsDiscovery(PosingHost(), allowed).Discover();
  ASSERT_OK(all);
  for (const DiscoveredVm& vm : *all) {
    EXPECT_FALSE(vm.impostor.has_value()) << vm.qemu_pid << ": " << vm.impostor->reason;
  }
}

// A process whose binary or user cannot be checked is not believed; one
// that libvirt names by pid is libvirt's word.
TEST(ProcfsDiscovery, UncheckableProcessesAreImpostorsUnlessLibvirtNamesThem) {
  auto fs = PosingHost();
  fs->SetReadError("/proc/100/status", absl::PermissionDeniedError("EACCES"));
  auto vms = ProcfsDiscovery(fs).Discover();
  ASSERT_OK(vms);
  const DiscoveredVm* vm = FindVm(*vms, 100);
  ASSERT_NE(vm, nullptr);
  ASSERT_TRUE(vm->impostor.has_value());
  EXPECT_NE(vm->impostor->reason.find("its user cannot be checked"), std::string::npos);

  const int known[] = {100, 200};
  vms = ProcfsDiscovery(fs).Discover(known);
  ASSERT_OK(vms);
  for (int pid : known) {
    const DiscoveredVm* named = FindVm(*vms, pid);
    ASSERT_NE(named, nullptr);
    EXPECT_FALSE(named->impostor.has_value()) << pid;
  }
  EXPECT_TRUE(FindVm(*vms, 300)->impostor.has_value());
}

TEST(VmmIdentity, ParsesStatusUids) {
  auto uids = ParseStatusUids("Name:\tqemu\nUmask:\t0022\nUid:\t64055\t0\t64055\t64055\n");
  ASSERT_OK(uids);
  EXPECT_EQ(uids->real, 64055u);
  EXPECT_EQ(uids->effective, 0u);
  EXPECT_FALSE(ParseStatusUids("Name:\tqemu\n").ok());
  EXPECT_FALSE(ParseStatusUids("Uid:\tx\t0\n").ok());
  EXPECT_FALSE(ParseStatusUids("Uid:\t5\n").ok());
}

TEST(VmmIdentity, ResolvesUsers) {
  auto uids = ResolveUsers({"root", "1234"}, "vmm_users", false);
  ASSERT_OK(uids);
  EXPECT_EQ(*uids, (std::vector<uint32_t>{0, 1234}));
  auto missing = ResolveUsers({"root", "no-such-user-here"}, "vmm_users", false);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("vmm_users: user 'no-such-user-here' does not exist"),
            std::string::npos)
      << missing.status();
  auto skipped = ResolveUsers({"root", "no-such-user-here"}, "vmm_users", true);
  ASSERT_OK(skipped);
  EXPECT_EQ(*skipped, std::vector<uint32_t>{0});
  EXPECT_FALSE(ResolveUsers({"no-such-user-here"}, "vmm_users", true).ok());
}

}  // namespace
}  // namespace cosched::discovery
