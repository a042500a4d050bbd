// lab_tag_gap PID COOKIE [TIMEOUT_MS]: adds a thread to fake QEMU PID (by
// SIGUSR1, the hotplug stand-in) and measures how long the new thread runs
// before it holds COOKIE (hex, as lab_cookies prints it). Prints one line:
//   tid TID inherited            (it held COOKIE when first seen: gap 0)
//   tid TID tagged_after_us N    (the agent tagged it N us after it appeared)
// Exits 1 when the thread never gets COOKIE within the timeout.
// The gap is measured from the first time the thread is seen in
// /proc/PID/task (polled every 100 us), so it is a lower bound by at most
// that much.
#include <dirent.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include "sched_core_prctl.h"

namespace {

std::set<int> Threads(int pid) {
  std::set<int> tids;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') tids.insert(std::atoi(e->d_name));
    }
    closedir(d);
  }
  return tids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: lab_tag_gap PID COOKIE [TIMEOUT_MS]\n");
    return 2;
  }
  const int pid = std::atoi(argv[1]);
  const uint64_t want = std::strtoull(argv[2], nullptr, 16);
  const int timeout_ms = argc > 3 ? std::atoi(argv[3]) : 10000;
  using Clock = std::chrono::steady_clock;
  const std::set<int> before = Threads(pid);
  if (before.empty()) {
    std::fprintf(stderr, "lab_tag_gap: no process %d\n", pid);
    return 2;
  }
  if (kill(pid, SIGUSR1) != 0) {
    std::perror("lab_tag_gap: kill");
    return 2;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int tid = 0;
  Clock::time_point seen;
  while (tid == 0 && Clock::now() < deadline) {
    for (int t : Threads(pid)) {
      if (!before.count(t)) {
        tid = t;
        seen = Clock::now();
        break;
      }
    }
    if (tid == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (tid == 0) {
    std::fprintf(stderr, "lab_tag_gap: no new thread in %d\n", pid);
    return 1;
  }
  bool first = true;
  while (Clock::now() < deadline) {
    uint64_t cookie = 0;
    int err = cosched::lab::SchedCoreCall(cosched::lab::kGet, tid,
                                          cosched::lab::kScopeThread, &cookie);
    if (err == 0 && cookie == want) {
      if (first) {
        std::printf("tid %d inherited\n", tid);
      } else {
        auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                      Clock::now() - seen).count();
        std::printf("tid %d tagged_after_us %lld\n", tid, static_cast<long long>(us));
      }
      return 0;
    }
    first = false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::fprintf(stderr, "lab_tag_gap: thread %d never got cookie %llx\n", tid,
               static_cast<unsigned long long>(want));
  return 1;
}
