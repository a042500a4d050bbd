// Hosts for the policy engine's tests and benchmarks: four tenants, two of
// which (t0, t1) may relax to level tenant, and VMs at level-vm defaults.
#ifndef COSCHED_TESTS_TESTING_ENGINE_HOSTS_H_
#define COSCHED_TESTS_TESTING_ENGINE_HOSTS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "policy/scenario.h"

namespace cosched::testing {

// `vms` VMs of `vcpus` vCPUs on `cores` cores, VM v of tenant
// "t<v % tenants_used>" with load util(v).
inline policy::Scenario EngineHost(int cores, int vms, int vcpus, int tenants_used,
                                   const std::function<double(int)>& util, uint64_t seed) {
  policy::Scenario s;
  s.name = "engine-host";
  s.cores = cores;
  s.duration_s = 8;
  s.seed = seed;
  for (int t = 0; t < 4; ++t) {
    policy::TenantSpec tenant;
    tenant.policy.set_tenant_id("t" + std::to_string(t));
    tenant.policy.set_default_isolation(v1::ISOLATION_LEVEL_VM);
    tenant.policy.add_allowed_isolation(v1::ISOLATION_LEVEL_VM);
    if (t < 2) tenant.policy.add_allowed_isolation(v1::ISOLATION_LEVEL_TENANT);
    s.tenants.push_back(tenant);
  }
  for (int v = 0; v < vms; ++v) {
    policy::VmSpec vm;
    vm.name = "vm-" + std::to_string(v);
    vm.vcpus = vcpus;
    vm.tenant = "t" + std::to_string(v % tenants_used);
    vm.workload.util = util(v);
    s.vms.push_back(vm);
  }
  return s;
}

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_ENGINE_HOSTS_H_
