// A VmDiscovery whose VMs the test sets.
#ifndef COSCHED_DISCOVERY_TESTING_STATIC_VM_DISCOVERY_H_
#define COSCHED_DISCOVERY_TESTING_STATIC_VM_DISCOVERY_H_

#include <mutex>
#include <utility>
#include <vector>

#include "discovery/vm_discovery.h"

namespace cosched::discovery {

// Serves a list set by the test. Thread-safe.
class StaticVmDiscovery : public VmDiscovery {
 public:
  void SetVms(std::vector<DiscoveredVm> vms) {
    std::lock_guard<std::mutex> lock(mu_);
    vms_ = std::move(vms);
  }
  // Discover fails with `status` until it is set back to OK.
  void SetError(absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(status);
  }
  absl::StatusOr<std::vector<DiscoveredVm>> Discover() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    return vms_;
  }

 private:
  std::mutex mu_;
  std::vector<DiscoveredVm> vms_;
  absl::Status error_;
};

}  // namespace cosched::discovery

#endif  // COSCHED_DISCOVERY_TESTING_STATIC_VM_DISCOVERY_H_
