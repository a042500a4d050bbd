#include <libvirt/libvirt.h>

#include "discovery/libvirt_discovery.h"
#include "gtest/gtest.h"

namespace cosched::discovery {
namespace {

TEST(LibvirtRunState, RunningAndPlainPauses) {
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_BOOTED, "", false),
            v1::VM_RUN_STATE_RUNNING);
  // A destination after the switch-over, and during post-copy: it runs.
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_MIGRATED, "", false),
            v1::VM_RUN_STATE_RUNNING);
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_POSTCOPY, "migration in",
                            false),
            v1::VM_RUN_STATE_RUNNING);
  // A source during pre-copy still runs the guest.
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_RUNNING, VIR_DOMAIN_RUNNING_UNPAUSED, "migration out",
                            true),
            v1::VM_RUN_STATE_RUNNING);
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_BLOCKED, 0, "", true), v1::VM_RUN_STATE_RUNNING);
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_SHUTDOWN, VIR_DOMAIN_SHUTDOWN_USER, "", true),
            v1::VM_RUN_STATE_RUNNING);
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_USER, "", true),
            v1::VM_RUN_STATE_PAUSED);
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_IOERROR, "", true),
            v1::VM_RUN_STATE_PAUSED);
  // Paused by a save, not a migration.
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_SAVE, "save", true),
            v1::VM_RUN_STATE_PAUSED);
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_PMSUSPENDED, 0, "", true), v1::VM_RUN_STATE_PAUSED);
}

TEST(LibvirtRunState, PausedForMigrationByTheAsyncJob) {
  // The job says which end this is, whatever this agent saw before (it may
  // have restarted in the middle).
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_MIGRATION, "migration in", true),
            v1::VM_RUN_STATE_MIGRATING_IN);
  EXPECT_EQ(
      LibvirtRunState(VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_MIGRATION, "migration out", false),
      v1::VM_RUN_STATE_MIGRATING_OUT);
}

TEST(LibvirtRunState, PausedForMigrationWithoutAJobByWhatWasSeen) {
  // An incoming domain never ran here; a source did.
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_MIGRATION, "", false),
            v1::VM_RUN_STATE_MIGRATING_IN);
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_MIGRATION, "", true),
            v1::VM_RUN_STATE_MIGRATING_OUT);
}

TEST(LibvirtRunState, PostCopySourceAndShutOff) {
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_PAUSED, VIR_DOMAIN_PAUSED_POSTCOPY, "", false),
            v1::VM_RUN_STATE_MIGRATING_OUT);
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_MIGRATED, "", true),
            v1::VM_RUN_STATE_MIGRATING_OUT);
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_SHUTOFF, VIR_DOMAIN_SHUTOFF_DESTROYED, "", true),
            v1::VM_RUN_STATE_SHUT_OFF);
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_CRASHED, VIR_DOMAIN_CRASHED_PANICKED, "", true),
            v1::VM_RUN_STATE_SHUT_OFF);
  EXPECT_EQ(LibvirtRunState(VIR_DOMAIN_NOSTATE, 0, "", true), v1::VM_RUN_STATE_UNSPECIFIED);
}

}  // namespace
}  // namespace cosched::discovery

namespace cosched::discovery {
namespace {

DiscoveredVm Vm(const std::string& name, int pid) {
  DiscoveredVm vm;
  vm.vm_id = name;
  vm.uuid = "uuid-of-" + name;
  vm.qemu_pid = pid;
  return vm;
}

// While libvirtd is away (a restart), the QEMU processes procfs finds are
// VMs only as libvirt last named them: a process started meanwhile under a
// domain's name, or a pid that now claims another name, is an impostor.
TEST(LibvirtAway, OnlyTheProcessesLibvirtLastNamedAreVms) {
  std::vector<DiscoveredVm> vms = {Vm("vm-a", 100), Vm("vm-b", 200), Vm("vm-a", 300),
                                   Vm("vm-c", 400)};
  MarkVmsLibvirtDidNotName(vms, {{100, "vm-a"}, {200, "vm-b"}, {400, "vm-x"}});
  EXPECT_FALSE(vms[0].impostor.has_value());
  EXPECT_EQ(vms[0].vm_id, "vm-a");
  EXPECT_FALSE(vms[1].impostor.has_value());
  for (int i : {2, 3}) {
    ASSERT_TRUE(vms[i].impostor.has_value()) << vms[i].qemu_pid;
    EXPECT_EQ(vms[i].vm_id, "");
    EXPECT_EQ(vms[i].uuid, "");
    EXPECT_NE(vms[i].impostor->reason.find("libvirtd is away"), std::string::npos);
  }
  EXPECT_EQ(vms[2].impostor->claimed_vm_id, "vm-a");
  EXPECT_EQ(vms[3].impostor->claimed_uuid, "uuid-of-vm-c");
}

}  // namespace
}  // namespace cosched::discovery
