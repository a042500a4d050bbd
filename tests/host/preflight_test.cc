#include "host/preflight.h"

#include <filesystem>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/testing/pseudo_fs_fake.h"
#include "tests/testing/status_matchers.h"

namespace cosched::host {
namespace {

using ::testing::HasSubstr;

constexpr char kVuln[] = "/sys/devices/system/cpu/vulnerabilities";

// A bare-metal host of today: sched_ext present but off, SMT on, two
// vulnerabilities, schedstats and cgroup forced idle.
FakePseudoFs BareMetal() {
  FakePseudoFs fs;
  fs.SetFile("/proc/sys/kernel/osrelease", "6.12.9-amd64\n");
  fs.SetFile("/sys/devices/system/cpu/smt/control", "on\n");
  fs.SetFile("/sys/kernel/sched_ext/state", "disabled\n");
  fs.SetFile("/proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu vme de pse ht\n\nprocessor\t: 1\n");
  fs.SetFile("/sys/class/dmi/id/sys_vendor", "Dell Inc.\n");
  fs.SetFile("/sys/class/dmi/id/product_name", "PowerEdge R760\n");
  fs.SetFile(std::string(kVuln) + "/mds", "Mitigation: Clear CPU buffers; SMT vulnerable\n");
  fs.SetFile(std::string(kVuln) + "/meltdown", "Not affected\n");
  fs.SetFile("/sys/fs/cgroup/cpu.stat",
             "usage_usec 10\ncore_sched.force_idle_usec 0\n");
  fs.SetFile("/etc/libvirt/qemu.conf",
             "# sched_core = \"full\"\n#sched_core = \"none\"\nsched_core = \"vcpus\"  # ours\n");
  return fs;
}

TEST(PreflightTest, ReadsEveryFactOfABareMetalHost) {
  const FakePseudoFs fs = BareMetal();
  v1::HostPreflight p = ReadPreflight(fs, PreflightPaths());
  EXPECT_EQ(p.kernel_release(), "6.12.9-amd64");
  EXPECT_EQ(p.smt_control(), "on");
  EXPECT_EQ(p.sched_ext_state(), "disabled");
  EXPECT_EQ(p.sched_ext_ops(), "");
  EXPECT_FALSE(p.nested()) << p.nested_detail();
  ASSERT_EQ(p.vulnerabilities_size(), 2);
  EXPECT_EQ(p.vulnerabilities(0).name(), "mds");
  EXPECT_TRUE(p.vulnerabilities(0).affected());
  EXPECT_TRUE(p.vulnerabilities(0).smt_relevant());
  EXPECT_EQ(p.vulnerabilities(1).name(), "meltdown");
  EXPECT_FALSE(p.vulnerabilities(1).affected());
  EXPECT_FALSE(p.vulnerabilities(1).smt_relevant());
  EXPECT_TRUE(p.cgroup_forced_idle());
  EXPECT_EQ(p.libvirt_sched_core(), "vcpus");
  FindHazards(HazardRules(), p);
  EXPECT_EQ(p.hazards_size(), 0);
}

TEST(PreflightTest, LibvirtSchedCoreIsTheLastSettingAndNoneByDefault) {
  EXPECT_EQ(LibvirtSchedCore(""), "none");
  EXPECT_EQ(LibvirtSchedCore("user = \"qemu\"\n#sched_core = \"full\"\n"), "none");
  EXPECT_EQ(LibvirtSchedCore("sched_core=\"emulator\"\nsched_core = \"full\"\n"), "full");
  // Not sched_core itself, or not a setting.
  EXPECT_EQ(LibvirtSchedCore("sched_core_x = \"full\"\nsched_core\n"), "none");
  EXPECT_EQ(LibvirtSchedCore("sched_core = \"" + std::string(1000, 'v') + "\"\n").size(), 256u);
  EXPECT_EQ(LibvirtSchedCore(std::string("sched_core = \"v\x01\"")), "v?");
}

TEST(PreflightTest, EveryFileMissingLeavesItsFieldEmpty) {
  const FakePseudoFs fs;  // nothing at all
  v1::HostPreflight p = ReadPreflight(fs, PreflightPaths());
  EXPECT_EQ(p.kernel_release(), "");
  EXPECT_EQ(p.smt_control(), "");
  EXPECT_EQ(p.sched_ext_state(), "");  // a kernel without sched_ext
  EXPECT_FALSE(p.nested());
  EXPECT_EQ(p.vulnerabilities_size(), 0);
  EXPECT_FALSE(p.cgroup_forced_idle());
  EXPECT_EQ(p.libvirt_sched_core(), "");  // no libvirt
  FindHazards(HazardRules(), p);
  EXPECT_EQ(p.hazards_size(), 0);
}

TEST(PreflightTest, UnreadableFilesAreLikeMissingOnes) {
  FakePseudoFs fs = BareMetal();
  fs.SetReadError("/proc/sys/kernel/osrelease", absl::PermissionDeniedError("EACCES"));
  fs.SetReadError(std::string(kVuln) + "/mds", absl::PermissionDeniedError("EACCES"));
  fs.SetReadError("/sys/kernel/sched_ext/state", absl::PermissionDeniedError("EACCES"));
  fs.SetReadError("/etc/libvirt/qemu.conf", absl::PermissionDeniedError("EACCES"));
  v1::HostPreflight p = ReadPreflight(fs, PreflightPaths());
  EXPECT_EQ(p.kernel_release(), "");
  EXPECT_EQ(p.libvirt_sched_core(), "");
  ASSERT_EQ(p.vulnerabilities_size(), 1);
  EXPECT_EQ(p.vulnerabilities(0).name(), "meltdown");
  EXPECT_EQ(p.sched_ext_state(), "");
}

TEST(PreflightTest, GarbageIsBoundedAndPrintable) {
  FakePseudoFs fs = BareMetal();
  fs.SetFile("/proc/sys/kernel/osrelease", std::string(5000, 'x') + "\n");
  fs.SetFile("/sys/devices/system/cpu/smt/control", std::string("o\x01n\xff", 4));
  v1::HostPreflight p = ReadPreflight(fs, PreflightPaths());
  EXPECT_EQ(p.kernel_release().size(), 256u);
  EXPECT_EQ(p.smt_control(), "o?n?");
}

TEST(PreflightTest, AGuestIsRecognisedByItsSigns) {
  FakePseudoFs fs = BareMetal();
  fs.SetFile("/proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n");
  fs.SetFile("/sys/class/dmi/id/sys_vendor", "QEMU\n");
  fs.SetFile("/sys/class/dmi/id/product_name", "Standard PC (Q35 + ICH9, 2009)\n");
  v1::HostPreflight p = ReadPreflight(fs, PreflightPaths());
  EXPECT_TRUE(p.nested());
  EXPECT_THAT(p.nested_detail(), HasSubstr("cpu flag 'hypervisor'"));
  EXPECT_THAT(p.nested_detail(), HasSubstr("DMI sys_vendor 'QEMU'"));
  // A flag that merely contains the word is not the flag.
  fs.SetFile("/proc/cpuinfo", "flags\t\t: fpu hypervisor_x\n");
  fs.SetFile("/sys/class/dmi/id/sys_vendor", "Microsoft Corporation\n");
  fs.SetFile("/sys/class/dmi/id/product_name", "Surface Laptop 5\n");
  EXPECT_FALSE(ReadPreflight(fs, PreflightPaths()).nested());
  fs.SetFile("/sys/class/dmi/id/product_name", "Virtual Machine\n");
  EXPECT_TRUE(ReadPreflight(fs, PreflightPaths()).nested());
}

TEST(PreflightTest, AnActiveSchedExtIsAHazardNamingTheScheduler) {
  FakePseudoFs fs = BareMetal();
  fs.SetFile("/sys/kernel/sched_ext/state", "enabled\n");
  fs.SetFile("/sys/kernel/sched_ext/root/ops", "rusty_1.0.4\n");
  v1::HostPreflight p = ReadPreflight(fs, PreflightPaths());
  FindHazards(HazardRules(), p);
  ASSERT_EQ(p.hazards_size(), 1);
  EXPECT_EQ(p.hazards(0).name(), "sched_ext");
  EXPECT_THAT(p.hazards(0).detail(),
              HasSubstr("sched_ext state 'enabled', scheduler 'rusty_1.0.4'"));
  EXPECT_THAT(p.hazards(0).detail(), HasSubstr("issue 3715"));
  // Half-way states are hazards too.
  for (const char* state : {"enabling", "disabling", "garbage"}) {
    fs.SetFile("/sys/kernel/sched_ext/state", state);
    v1::HostPreflight q = ReadPreflight(fs, PreflightPaths());
    FindHazards(HazardRules(), q);
    EXPECT_EQ(q.hazards_size(), 1) << state;
  }
}

TEST(PreflightTest, NestedIsAHazardOnlyWhereConfigured) {
  FakePseudoFs fs = BareMetal();
  fs.SetFile("/proc/cpuinfo", "flags\t\t: fpu hypervisor\n");
  v1::HostPreflight p = ReadPreflight(fs, PreflightPaths());
  FindHazards(HazardRules(), p);
  EXPECT_EQ(p.hazards_size(), 0);
  FindHazards({.nested = true}, p);
  ASSERT_EQ(p.hazards_size(), 1);
  EXPECT_EQ(p.hazards(0).name(), "nested");
  EXPECT_THAT(p.hazards(0).detail(), HasSubstr("cpu flag 'hypervisor'"));
  FindHazards({.allow = {"nested"}, .nested = true}, p);
  EXPECT_EQ(p.hazards_size(), 0);
  EXPECT_EQ(p.allowed_hazards_size(), 1);
  // On bare metal the rule finds nothing.
  v1::HostPreflight metal = ReadPreflight(BareMetal(), PreflightPaths());
  FindHazards({.nested = true}, metal);
  EXPECT_EQ(metal.hazards_size(), 0);
}

TEST(PreflightTest, AnAllowedHazardIsListedApart) {
  FakePseudoFs fs = BareMetal();
  fs.SetFile("/sys/kernel/sched_ext/state", "enabled\n");
  v1::HostPreflight p = ReadPreflight(fs, PreflightPaths());
  FindHazards({.allow = {"sched_ext"}}, p);
  EXPECT_EQ(p.hazards_size(), 0);
  ASSERT_EQ(p.allowed_hazards_size(), 1);
  EXPECT_EQ(p.allowed_hazards(0).name(), "sched_ext");
}

TEST(PreflightTest, SchedExtAloneFollowsItsStandInDirectory) {
  FakePseudoFs fs;
  PreflightPaths paths;
  paths.sched_ext_dir = "/tmp/stand-in";
  fs.SetFile("/tmp/stand-in/state", "enabled");
  v1::HostPreflight p;
  ReadSchedExt(fs, paths, p);
  EXPECT_EQ(p.sched_ext_state(), "enabled");
}

TEST(PreflightTest, UnknownHazardNamesAreRefused) {
  EXPECT_OK(ValidateHazardNames("allow_hazards", {"sched_ext"}));
  EXPECT_OK(ValidateHazardNames("allow_hazards", {"sched_ext", "nested"}));
  absl::Status s = ValidateHazardNames("allow_hazards", {"nested", "smt"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("allow_hazards[1] 'smt' is not a hazard; known: sched_ext, nested"));
}

// The probe reads this machine's own vulnerability files, all of them.
TEST(PreflightTest, VulnerabilitiesMatchThisMachine) {
  std::set<std::string> on_disk;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kVuln, ec)) {
    on_disk.insert(entry.path().filename().string());
  }
  // Every x86 Linux since 4.15 has the folder; CI runs on one.
  ASSERT_FALSE(ec) << kVuln << " cannot be listed: " << ec.message();
  ASSERT_FALSE(on_disk.empty());
  LocalPseudoFs fs;
  std::set<std::string> probed;
  const v1::HostPreflight preflight = ReadPreflight(fs, PreflightPaths());
  for (const v1::CpuVulnerability& v : preflight.vulnerabilities()) {
    probed.insert(v.name());
  }
  EXPECT_EQ(probed, on_disk);
}

}  // namespace
}  // namespace cosched::host
