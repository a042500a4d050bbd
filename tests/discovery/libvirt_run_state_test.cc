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
