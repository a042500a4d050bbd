// csd: decides which VMs may share SMT siblings, stores it durably and
// streams it to cs-agents. See server/daemon/csd_main.h.
#include <cstdlib>
#include <iostream>

#include "absl/synchronization/mutex.h"

#include "server/daemon/csd_main.h"

int main(int argc, char** argv) {
  // Debian builds Abseil without NDEBUG, so every absl::Mutex lock (gRPC's
  // among them) would run its deadlock detector: 4% of csd's CPU on the
  // threads that take Reports, measured with perf. A debugging aid, off in
  // the daemons; the tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // gRPC 1.51's tcp_read_chunks experiment, on in Debian's build, reads a
  // connection into 64 KiB slices once its reads pass 12 KiB (an agent's
  // Report of 50 VMs does) and keeps the unread room for the next read: 52
  // KiB of csd's heap per agent at 5 000 agents (147.6 -> 95.2 KiB,
  // docs/benchmarks.md). Without it gRPC sizes each read to what the
  // connection has been reading. Read by gRPC at its first use, so set
  // before any; an operator's own GRPC_EXPERIMENTS wins.
  setenv("GRPC_EXPERIMENTS", "-tcp_read_chunks", /*overwrite=*/0);
  return cosched::server::RunCsdMain(argc, argv, cosched::server::ProcessCsdEnvironment(),
                                     std::cout, std::cerr);
}
