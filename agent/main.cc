// cs-agent: keeps this hypervisor's VMs in their core-scheduling groups as
// csd assigns them. See agent/agent_main.h.
#include <iostream>

#include "absl/synchronization/mutex.h"

#include "agent/agent_main.h"

int main(int argc, char** argv) {
  // Debian builds Abseil without NDEBUG, so every absl::Mutex lock (gRPC's
  // among them) would run its deadlock detector: 4% of csd's CPU on the
  // threads that take Reports, measured with perf. A debugging aid, off in
  // the daemons; the tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return cosched::agent::RunAgentMain(argc, argv, cosched::agent::ProcessAgentEnvironment(),
                                      std::cout, std::cerr);
}
