// Names the calling thread, so that `top -H`, /proc/<pid>/task/*/comm and
// csd's per-thread CPU metric (metrics/thread_cpu.h) tell its threads apart.
#ifndef COSCHED_COMMON_THREAD_NAME_H_
#define COSCHED_COMMON_THREAD_NAME_H_

#include <string>
#include <thread>
#include <utility>

#include "absl/strings/string_view.h"

namespace cosched {

// Linux keeps the first 15 bytes of a name: longer ones are cut there.
// Best effort: a name the kernel refuses leaves the thread as it was.
void NameThisThread(absl::string_view name);

// A thread that names itself `name` and runs `body`: how csd starts each of
// its threads.
template <typename Body>
std::thread NamedThread(std::string name, Body body) {
  return std::thread([name = std::move(name), body = std::move(body)]() mutable {
    NameThisThread(name);
    body();
  });
}

}  // namespace cosched

#endif  // COSCHED_COMMON_THREAD_NAME_H_
