#include "discovery/proc_parsers.h"

#include <gtest/gtest.h>

#include <string>
#include "tests/testing/status_matchers.h"

namespace cosched::discovery {
namespace {

using Kind = discovery::DiscoveredThread::Kind;

std::string Cmdline(std::initializer_list<std::string> args) {
  std::string text;
  for (const std::string& a : args) text += a + '\0';
  return text;
}

TEST(QemuCommandLine, LibvirtStyle) {
  // As libvirt 9.0 started it on this machine (abridged).
  auto parsed = ParseQemuCommandLine(Cmdline(
      {"/usr/bin/qemu-system-x86_64", "-name", "guest=cosched-exp,debug-threads=on", "-S",
       "-machine", "pc-i440fx-7.2,usb=off", "-accel", "tcg", "-smp", "2,sockets=2,cores=1",
       "-uuid", "72224024-0B1E-4f29-afc2-0628c2b2f05a", "-display", "none"}));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->name, "cosched-exp");
  EXPECT_EQ(parsed->uuid, "72224024-0b1e-4f29-afc2-0628c2b2f05a");
  EXPECT_EQ(parsed->VmId(), "cosched-exp");
}

TEST(QemuCommandLine, PlainNameAndDoubleDash) {
  auto parsed = ParseQemuCommandLine(Cmdline({"qemu-system-aarch64", "--name", "vm-7,process=x"}));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->name, "vm-7");
  EXPECT_EQ(parsed->uuid, "");
}

TEST(QemuCommandLine, CommaEscaping) {
  EXPECT_EQ(ParseQemuCommandLine(Cmdline({"qemu-kvm", "-name", "guest=a,,b,debug-threads=on"}))->name,
            "a,b");
  EXPECT_EQ(ParseQemuCommandLine(Cmdline({"qemu-kvm", "-name", "a,,b"}))->name, "a,b");
  EXPECT_EQ(ParseQemuCommandLine(Cmdline({"qemu-kvm", "-name", "debug-threads=on,guest=late"}))->name,
            "late");
}

TEST(QemuCommandLine, UuidIsTheIdWithoutName) {
  auto parsed = ParseQemuCommandLine(
      Cmdline({"/usr/libexec/qemu-kvm", "-uuid", "a4c5e430-d04a-4e7e-a5e2-ae60b295b691"}));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->VmId(), "a4c5e430-d04a-4e7e-a5e2-ae60b295b691");
}

TEST(QemuCommandLine, NotQemu) {
  EXPECT_FALSE(ParseQemuCommandLine("").has_value());  // kernel thread, zombie
  EXPECT_FALSE(ParseQemuCommandLine(Cmdline({"/usr/bin/qemu-img", "info", "x"})).has_value());
  EXPECT_FALSE(ParseQemuCommandLine(Cmdline({"/bin/bash", "-name", "guest=x"})).has_value());
  EXPECT_FALSE(ParseQemuCommandLine(Cmdline({"/opt/qemu-system-x86_64/bin/sleep"})).has_value());
  // A trailing option without its value is ignored, not a crash.
  auto parsed = ParseQemuCommandLine(Cmdline({"qemu-system-x86_64", "-name"}));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->VmId(), "");
}

TEST(QemuCommandLine, ArgumentsOfAnyBinary) {
  EXPECT_EQ(ParseQemuArguments(Cmdline({"/usr/local/bin/kvm-wrapper", "-name", "guest=w"})).name,
            "w");
}

TEST(ClassifyQemuThread, Names) {
  EXPECT_EQ(ClassifyQemuThread("CPU 0/KVM", 1000), Kind::kVcpu);
  EXPECT_EQ(ClassifyQemuThread("CPU 12/TCG", 1000), Kind::kVcpu);
  EXPECT_EQ(ClassifyQemuThread("CPU x/KVM", 1000), Kind::kEmulator);
  EXPECT_EQ(ClassifyQemuThread("CPU 1/", 1000), Kind::kEmulator);
  EXPECT_EQ(ClassifyQemuThread("IO iothread1", 1000), Kind::kIothread);
  EXPECT_EQ(ClassifyQemuThread("IO mon_iothread", 1000), Kind::kIothread);
  EXPECT_EQ(ClassifyQemuThread("IO ", 1000), Kind::kEmulator);
  EXPECT_EQ(ClassifyQemuThread("vhost-1000", 1000), Kind::kVhostWorker);
  EXPECT_EQ(ClassifyQemuThread("vhost-1001", 1000), Kind::kEmulator);
  EXPECT_EQ(ClassifyQemuThread("vhost-10000", 1000), Kind::kEmulator);
  EXPECT_EQ(ClassifyQemuThread("qemu-system-x86", 1000), Kind::kEmulator);
  EXPECT_EQ(ClassifyQemuThread("call_rcu", 1000), Kind::kEmulator);
  EXPECT_EQ(ClassifyQemuThread("worker", 1000), Kind::kEmulator);
}

TEST(ProcStat, CommWithSpacesAndParentheses) {
  auto stat = ParseProcStat("4242 (CPU 0/KVM) S 4200 4200 4200 0 -1 4194560 1 0 0 0\n");
  ASSERT_OK(stat);
  EXPECT_EQ(stat->pid, 4242);
  EXPECT_EQ(stat->comm, "CPU 0/KVM");
  EXPECT_EQ(stat->state, 'S');
  EXPECT_EQ(stat->ppid, 4200);

  stat = ParseProcStat("77 (a) b) (c) R 1 77 77 0 -1 0");
  ASSERT_OK(stat);
  EXPECT_EQ(stat->comm, "a) b) (c");
  EXPECT_EQ(stat->state, 'R');
  EXPECT_EQ(stat->ppid, 1);

  stat = ParseProcStat("2 (kthreadd) S 0 0 0 0 -1");
  ASSERT_OK(stat);
  EXPECT_EQ(stat->ppid, 0);
}

TEST(ProcStat, Malformed) {
  EXPECT_FALSE(ParseProcStat("").ok());
  EXPECT_FALSE(ParseProcStat("12 comm S 1").ok());
  EXPECT_FALSE(ParseProcStat("x (comm) S 1").ok());
  EXPECT_FALSE(ParseProcStat("12 (comm) S").ok());
  EXPECT_FALSE(ParseProcStat("12 (comm) S one").ok());
}

TEST(Cgroup, HybridAsLibvirtPlacesQemu) {
  // /proc/<qemu pid>/cgroup of a libvirt 9.0 domain on this (hybrid) machine.
  auto entries = ParseCgroupFile(
      "9:name=systemd:/\n"
      "8:pids:/\n"
      "4:memory:/machine/qemu-1-cosched-exp.libvirt-qemu\n"
      "3:cpuset:/machine/qemu-1-cosched-exp.libvirt-qemu/emulator\n"
      "2:cpuacct:/\n"
      "1:cpu:/machine/qemu-1-cosched-exp.libvirt-qemu/emulator\n"
      "0::/machine/qemu-1-cosched-exp.libvirt-qemu/emulator\n");
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 7u);
  EXPECT_EQ((*entries)[0].controllers, std::vector<std::string>{"name=systemd"});
  EXPECT_EQ((*entries)[6].hierarchy, 0);
  EXPECT_TRUE((*entries)[6].controllers.empty());
  EXPECT_EQ(PlacementCgroup(*entries), "/machine/qemu-1-cosched-exp.libvirt-qemu/emulator");
  EXPECT_EQ(VmCgroup(PlacementCgroup(*entries), {"/machine.slice", "/machine"}),
            "/machine/qemu-1-cosched-exp.libvirt-qemu");
}

TEST(Cgroup, V1Only) {
  auto entries = ParseCgroupFile(
      "11:cpu,cpuacct:/machine.slice/machine-qemu\\x2d3\\x2dvm1.scope/vcpu0\n"
      "10:memory:/machine.slice/machine-qemu\\x2d3\\x2dvm1.scope\n"
      "1:name=systemd:/machine.slice/machine-qemu\\x2d3\\x2dvm1.scope\n");
  ASSERT_OK(entries);
  EXPECT_EQ((*entries)[0].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ(PlacementCgroup(*entries), "/machine.slice/machine-qemu\\x2d3\\x2dvm1.scope/vcpu0");
  EXPECT_EQ(VmCgroup(PlacementCgroup(*entries), {"/machine.slice"}),
            "/machine.slice/machine-qemu\\x2d3\\x2dvm1.scope");
}

TEST(Cgroup, V2SystemdLibvirtLayout) {
  auto entries = ParseCgroupFile("0::/machine.slice/machine-qemu\\x2d1\\x2dvm\\x2d1.scope/libvirt/emulator\n");
  ASSERT_OK(entries);
  EXPECT_EQ(VmCgroup(PlacementCgroup(*entries), {"/machine.slice"}),
            "/machine.slice/machine-qemu\\x2d1\\x2dvm\\x2d1.scope");
  // A helper that libvirt placed in the scope itself maps to the same VM.
  EXPECT_EQ(VmCgroup("/machine.slice/machine-qemu\\x2d1\\x2dvm\\x2d1.scope", {"/machine.slice"}),
            "/machine.slice/machine-qemu\\x2d1\\x2dvm\\x2d1.scope");
}

TEST(Cgroup, SharedCgroupsAreNoVmCgroup) {
  const std::vector<std::string> parents = {"/machine.slice", "/machine"};
  EXPECT_EQ(VmCgroup("/", parents), std::nullopt);
  EXPECT_EQ(VmCgroup("/user.slice/user-1000.slice/session-3.scope", parents), std::nullopt);
  EXPECT_EQ(VmCgroup("/machine.slice", parents), std::nullopt);
  EXPECT_EQ(VmCgroup("/machine", parents), std::nullopt);
  EXPECT_EQ(VmCgroup("/machines/x", parents), std::nullopt);
}

TEST(Cgroup, PathWithColonAndMalformedLines) {
  auto entries = ParseCgroupFile("0::/a:b/c\n");
  ASSERT_OK(entries);
  EXPECT_EQ((*entries)[0].path, "/a:b/c");
  EXPECT_FALSE(ParseCgroupFile("garbage\n").ok());
  EXPECT_FALSE(ParseCgroupFile("x:cpu:/\n").ok());
  EXPECT_FALSE(ParseCgroupFile("1:cpu:relative\n").ok());
  EXPECT_OK(ParseCgroupFile(""));
}

}  // namespace
}  // namespace cosched::discovery
