// Process and thread events from the kernel, so the agent tags a new thread
// or VM as soon as it appears rather than at the next periodic scan.
#ifndef COSCHED_AGENT_PROCESS_EVENTS_H_
#define COSCHED_AGENT_PROCESS_EVENTS_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <thread>

#include "absl/status/status.h"

namespace cosched::agent {

enum class ProcessEventKind {
  kFork,  // a process or thread was created
  kExec,
  kExit,
  kLost,  // events were dropped (buffer overrun): rescan everything
};

struct ProcessEvent {
  ProcessEventKind kind = ProcessEventKind::kLost;
  // The thread group the event is about (the new one for a fork).
  int tgid = 0;
  // The thread: the new one for a fork, the exiting one for an exit.
  int tid = 0;
  // For forks: the thread group that created it (equal to tgid for a new
  // thread).
  int parent_tgid = 0;
};

using ProcessEventListener = std::function<void(const ProcessEvent&)>;

// Implementations are thread-safe; the listener runs on their thread.
class ProcessEventSource {
 public:
  virtual ~ProcessEventSource() = default;
  virtual absl::Status Start(ProcessEventListener listener) = 0;
  virtual void Stop() = 0;
};

// Calls `listener` for each fork, exec and exit event in one datagram of
// the netlink proc connector; other events are skipped. Pure: tested on
// bytes built in the test.
void ParseProcConnectorDatagram(const char* data, size_t length,
                                const ProcessEventListener& listener);

// The netlink proc connector (needs CAP_NET_ADMIN and a kernel with
// CONFIG_PROC_EVENTS). Start fails with a clear status when it is missing;
// the agent then relies on its periodic scan.
class ProcConnectorEvents : public ProcessEventSource {
 public:
  ~ProcConnectorEvents() override;
  absl::Status Start(ProcessEventListener listener) override;
  void Stop() override;

 private:
  void Run(ProcessEventListener listener);

  int socket_ = -1;
  int wake_ = -1;  // eventfd that interrupts the receive loop on Stop
  std::thread thread_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_PROCESS_EVENTS_H_
