// csd: decides which VMs may share SMT siblings, stores it durably and
// streams it to cs-agents. See server/daemon/csd_main.h.
#include <iostream>

#include "absl/synchronization/mutex.h"

#include "server/daemon/csd_main.h"

int main(int argc, char** argv) {
  // Debian builds Abseil without NDEBUG, so every absl::Mutex lock (gRPC's
  // among them) would run its deadlock detector: 4% of csd's CPU on the
  // threads that take Reports, measured with perf. A debugging aid, off in
  // the daemons; the tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return cosched::server::RunCsdMain(argc, argv, cosched::server::ProcessCsdEnvironment(),
                                     std::cout, std::cerr);
}
