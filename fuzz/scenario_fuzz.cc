// Fuzzes the simulator's scenario parser (policy/scenario.h) as `csctl
// simulate` and `csctl plan` use it: parse, expand the VM instances, and, for
// small hosts, run one mode of the simulator (the policy engine included) on
// a run clamped to a few milliseconds of simulated time so that an input
// stays fast.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "policy/scenario.h"
#include "policy/tradeoff.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cosched::policy;
  absl::StatusOr<Scenario> scenario =
      ParseScenarioYaml(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!scenario.ok()) {
    if (scenario.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  std::vector<VmInstance> instances = ExpandInstances(*scenario);
  int vcpus = 0;
  for (const VmInstance& vm : instances) {
    if (vm.spec < 0 || vm.spec >= static_cast<int>(scenario->vms.size())) std::abort();
    vcpus += vm.vcpus;
  }
  if (scenario->cores > 8 || instances.size() > 16 || vcpus > 32) return 0;

  Scenario small = *scenario;
  small.duration_s = std::min(small.duration_s, 0.02);
  const Mode modes[] = {Mode::kSmt, Mode::kNoSmt, Mode::kVm, Mode::kTenant, Mode::kPolicy};
  (void)RunMode(small, modes[small.seed % 5]);
  return 0;
}
