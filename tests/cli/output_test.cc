#include "cli/output.h"

#include <sstream>

#include "gtest/gtest.h"

namespace cosched::cli {
namespace {

v1::VM TaggedVm(const std::string& id, const std::string& tenant) {
  v1::VM vm;
  vm.set_vm_id(id);
  vm.set_tenant_id(tenant);
  vm.add_interference_classes("db");
  vm.add_interference_classes("noisy");
  v1::Assignment* a = vm.mutable_assignment();
  a->set_isolation(v1::ISOLATION_LEVEL_TENANT);
  a->set_trust_group("tg-" + tenant);
  a->set_thread_scope(v1::THREAD_SCOPE_EMULATOR);
  a->set_revision(12);
  return vm;
}

TEST(OutputTest, VmBlock) {
  v1::VM vm = TaggedVm("vm-1", "acme");
  vm.set_host_id("kvm-01");
  vm.mutable_enforcement()->set_state(v1::ENFORCEMENT_STATE_PARTIAL);
  vm.mutable_enforcement()->set_threads_found(4);
  vm.mutable_enforcement()->set_threads_tagged(3);
  vm.mutable_enforcement()->set_last_error("tid 77:\nEPERM");
  vm.mutable_update_time()->set_seconds(1700000000);
  std::ostringstream out;
  PrintVm(vm, out);
  EXPECT_EQ(out.str(),
            "vm:                   vm-1\n"
            "tenant:               acme\n"
            "isolation:            tenant (requested: default)\n"
            "trust group:          tg-acme\n"
            "dedicated cores:      no\n"
            "interference classes: db,noisy\n"
            "thread scope:         emulator\n"
            "revision:             12\n"
            "host:                 kvm-01\n"
            "on hosts:             -\n"
            "enforcement:          partial (3/4 threads tagged)\n"
            "last error:           tid 77:?EPERM\n"
            "created:              -\n"
            "updated:              2023-11-14T22:13:20Z\n");
}

TEST(OutputTest, VmTableAlignsColumnsWithoutTrailingSpaces) {
  v1::VM none = TaggedVm("a-long-vm-name", "t");
  none.mutable_assignment()->set_isolation(v1::ISOLATION_LEVEL_NONE);
  none.mutable_assignment()->clear_trust_group();
  std::ostringstream out;
  PrintVmTable({TaggedVm("vm-1", "acme"), none}, out);
  EXPECT_EQ(out.str(),
            "VM              TENANT  ISOLATION  TRUST GROUP  REVISION  HOST  "
            "ENFORCEMENT\n"
            "vm-1            acme    tenant     tg-acme      12        -     -\n"
            "a-long-vm-name  t       none       -            12        -     -\n");
}

TEST(OutputTest, VmJsonUsesShortNamesAndNullForMissingParts) {
  nlohmann::json j = VmToJson(TaggedVm("vm-1", "acme"));
  EXPECT_EQ(j["isolation"], "tenant");
  EXPECT_EQ(j["requested_isolation"], "default");
  EXPECT_EQ(j["thread_scope"], "emulator");
  EXPECT_TRUE(j["enforcement"].is_null());
  EXPECT_TRUE(j["create_time"].is_null());
}

TEST(OutputTest, JsonReplacesInvalidUtf8InsteadOfThrowing) {
  std::ostringstream out;
  PrintJson({{"last_error", std::string("bad \xff byte")}}, out);
  EXPECT_NE(out.str().find("bad"), std::string::npos);
}

}  // namespace
}  // namespace cosched::cli
