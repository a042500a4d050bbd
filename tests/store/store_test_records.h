// Records to put in a store and synchronous reads of it, for the tests of
// both Store backends.
#ifndef COSCHED_TESTS_STORE_STORE_TEST_RECORDS_H_
#define COSCHED_TESTS_STORE_STORE_TEST_RECORDS_H_

#include <optional>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "store/store.h"

namespace cosched::store {

inline v1::VM MakeVm(const std::string& id, const std::string& tenant = "t1",
              const std::string& host = "", const std::string& group = "") {
  v1::VM vm;
  vm.set_vm_id(id);
  vm.set_tenant_id(tenant);
  vm.set_host_id(host);
  vm.mutable_assignment()->set_vm_id(id);
  vm.mutable_assignment()->set_tenant_id(tenant);
  vm.mutable_assignment()->set_trust_group(group);
  return vm;
}

inline v1::VMObservation MakeObservation(const std::string& id,
                                  const std::string& uuid,
                                  const std::string& applied_group) {
  v1::VMObservation vm;
  vm.set_vm_id(id);
  vm.set_uuid(uuid);
  vm.mutable_enforcement()->set_state(v1::ENFORCEMENT_STATE_ENFORCED);
  vm.mutable_enforcement()->set_applied_trust_group(applied_group);
  return vm;
}

inline VmFilter Filter(const std::string& tenant, const std::string& host,
                const std::string& group) {
  VmFilter filter;
  filter.tenant_id = tenant;
  filter.host_id = host;
  filter.trust_group = group;
  return filter;
}

inline std::vector<std::string> VmIds(const std::vector<v1::VM>& vms) {
  std::vector<std::string> ids;
  for (const v1::VM& vm : vms) ids.push_back(vm.vm_id());
  return ids;
}

inline std::optional<v1::VM> GetVm(Store& store, const std::string& id) {
  std::optional<v1::VM> vm;
  absl::Status status = store.Read([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(vm, txn.GetVm(id));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return vm;
}

inline std::vector<v1::VM> ListVms(Store& store, const VmFilter& filter,
                            const Page& page) {
  std::vector<v1::VM> vms;
  absl::Status status = store.Read([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(vms, txn.ListVms(filter, page));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return vms;
}

inline HostChanges ChangesSince(Store& store, const std::string& host,
                         int64_t revision) {
  HostChanges changes;
  absl::Status status = store.Read([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(changes, txn.ChangesSince(host, revision));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return changes;
}

inline std::optional<Observation> FindObservation(Store& store,
                                           const std::string& key) {
  std::optional<Observation> observation;
  absl::Status status = store.Read([&](Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(observation, txn.FindObservation(key));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return observation;
}

// Writes `vm` and records its change; returns the write's revision.
// Returns the revision of its commit: the store's once it is done (the
// tests that use it write from one thread). WriteRevision() may be below it
// on etcd, when keys outside csd's writes changed since the snapshot.
inline int64_t PutAndRecord(Store& store, const v1::VM& vm) {
  absl::Status status = store.WriteSync([&](Transaction& txn) -> absl::Status {
    RETURN_IF_ERROR(txn.PutVm(vm));
    return txn.RecordChange(vm.host_id(), vm.vm_id());
  });
  EXPECT_TRUE(status.ok()) << status;
  return store.CurrentRevision();
}

inline v1::AuditRecord MakeAudit(const std::string& who, const std::string& subject,
                          int64_t time_ns) {
  v1::AuditRecord record;
  record.set_who(who);
  record.set_role("admin");
  record.set_method("TagVM");
  record.set_subject(subject);
  record.set_time_unix_ns(time_ns);
  record.set_after("{}");
  return record;
}

}  // namespace cosched::store

#endif  // COSCHED_TESTS_STORE_STORE_TEST_RECORDS_H_
