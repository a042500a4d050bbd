// lab_tag_gap [--comm PATTERN] PID COOKIE [TIMEOUT_MS] [-- COMMAND...]:
// adds a thread to process PID and measures how long the new thread runs
// before it holds COOKIE (hex, as lab_cookies prints it). The thread comes
// from SIGUSR1 (fake QEMU's hotplug stand-in) or, after `--`, from COMMAND
// (e.g. `virsh setvcpus DOM 2 --live` for a real QEMU), run in the
// background. With --comm, only a new thread whose name matches PATTERN
// (fnmatch) counts; it is timed from when it first appeared, under whatever
// name (QEMU names its threads after creating them). Prints one line:
//   tid TID inherited            (it held COOKIE when first seen, as did
//                                 the process's main thread, which makes
//                                 them: gap 0)
//   tid TID tagged_after_us N    (the agent tagged it N us after it appeared)
//   tid TID tagged_after_us 0 before_seen_us M
//                                (it held COOKIE when first seen, M us after
//                                 it was asked for, and the main thread did
//                                 not: the agent tagged it before a poll saw
//                                 it, on a guest slow enough to starve the
//                                 poller)
// Exits 1 when the thread never gets COOKIE within the timeout (default
// 10000 ms), 3 when COMMAND failed without creating such a thread (its
// output went to stderr).
// With --vhost, the new task comes from SIGUSR2 (fake QEMU's "NIC added
// later": a real vhost-net worker) and only a task named vhost-PID counts:
// a new thread of PID (Linux >= 6.4) or a new kernel thread elsewhere in
// /proc (before 6.4, a child of kthreadd outside PID's thread group).
// The gap is measured from the first time the thread is seen in
// /proc/PID/task (polled every 100 us), so it is a lower bound by at most
// that much (a few hundred us with --vhost, which also lists /proc).
//
// lab_tag_gap --new-process TEXT COOKIE [TIMEOUT_MS] -- COMMAND...: runs
// COMMAND (e.g. `virsh start DOM`) and watches /proc (every ~2 ms) for a new
// process whose command line contains TEXT, then for the moment every
// thread of it holds COOKIE. Prints one line, times in ms from COMMAND's
// start:
//   pid P seen_ms A tagged_ms B at_first_sight yes|no threads N command_ms C
// (at_first_sight: all its threads held COOKIE when it was first seen;
// command_ms: when COMMAND exited). Exits 1 on timeout, 3 when COMMAND fails.
#include <dirent.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

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

std::string Comm(int pid, int tid) {
  return cosched::lab::ReadProcLine("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) +
                                    "/comm");
}

int Usage() {
  std::fprintf(stderr,
               "usage: lab_tag_gap [--comm PATTERN | --vhost] PID COOKIE [TIMEOUT_MS] [-- COMMAND...]\n"
               "       lab_tag_gap --new-process TEXT COOKIE [TIMEOUT_MS] -- COMMAND...\n");
  return 2;
}

std::string Cmdline(int pid) {
  std::string s = cosched::lab::ReadProcFile("/proc/" + std::to_string(pid) + "/cmdline");
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  return s;
}

std::set<int> Processes() {
  std::set<int> pids;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      long v = strtol(e->d_name, &end, 10);
      if (v > 0 && *end == '\0') pids.insert(static_cast<int>(v));
    }
    closedir(d);
  }
  return pids;
}

// Every thread of PID holds WANT (and there is at least one).
bool AllHold(int pid, uint64_t want, int* threads) {
  std::set<int> tids = Threads(pid);
  *threads = static_cast<int>(tids.size());
  if (tids.empty()) return false;
  for (int t : tids) {
    uint64_t cookie = 0;
    if (cosched::lab::SchedCoreCall(cosched::lab::kGet, t, cosched::lab::kScopeThread, &cookie) ==
            ESRCH) {
      continue;  // exited meanwhile
    }
    if (cookie != want) return false;
  }
  return true;
}

int NewProcess(const std::string& text, uint64_t want, int timeout_ms,
               std::vector<char*> command) {
  using Clock = std::chrono::steady_clock;
  std::set<int> known = Processes();
  command.push_back(nullptr);
  const auto start = Clock::now();
  pid_t child = fork();
  if (child < 0) {
    std::perror("lab_tag_gap: fork");
    return 2;
  }
  if (child == 0) {
    dup2(2, 1);
    execvp(command[0], command.data());
    std::perror("lab_tag_gap: exec");
    _exit(127);
  }
  known.insert(child);
  auto ms = [&start](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - start).count();
  };
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  int pid = 0, threads = 0, status = 0;
  bool first_sight = false, exited = false;
  Clock::time_point seen, tagged, command_end;
  bool is_tagged = false;
  while (Clock::now() < deadline && !(is_tagged && exited)) {
    if (!exited && waitpid(child, &status, WNOHANG) == child) {
      exited = true;
      command_end = Clock::now();
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "lab_tag_gap: %s failed (status %d)\n", command[0],
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 3;
      }
    }
    if (pid == 0) {
      for (int p : Processes()) {
        if (!known.insert(p).second) continue;
        // A process forked by COMMAND's helpers shows TEXT only after its
        // exec: look again at the next round.
        if (Cmdline(p).find(text) != std::string::npos) {
          pid = p;
          seen = Clock::now();
          first_sight = AllHold(pid, want, &threads);
          if (first_sight) {
            is_tagged = true;
            tagged = seen;
          }
          break;
        }
        known.erase(p);
      }
    } else if (!is_tagged && AllHold(pid, want, &threads)) {
      is_tagged = true;
      tagged = Clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!is_tagged) {
    std::fprintf(stderr, "lab_tag_gap: %s within %d ms\n",
                 pid ? "the new process was not fully tagged" : "no new process", timeout_ms);
    if (!exited) kill(child, SIGTERM), waitpid(child, nullptr, 0);
    return 1;
  }
  if (!exited) {
    waitpid(child, &status, 0);
    command_end = Clock::now();
  }
  std::printf("pid %d seen_ms %.0f tagged_ms %.0f at_first_sight %s threads %d command_ms %.0f\n",
              pid, ms(seen), ms(tagged), first_sight ? "yes" : "no", threads, ms(command_end));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 6 && std::string(argv[1]) == "--new-process") {
    std::vector<char*> rest(argv + 2, argv + argc);
    auto dashes = std::find(rest.begin(), rest.end(), std::string("--"));
    if (dashes == rest.end() || dashes + 1 == rest.end()) return Usage();
    std::vector<char*> args(rest.begin(), dashes), command(dashes + 1, rest.end());
    if (args.size() < 2 || args.size() > 3) return Usage();
    return NewProcess(args[0], std::strtoull(args[1], nullptr, 16),
                      args.size() > 2 ? std::atoi(args[2]) : 10000, command);
  }
  std::string pattern;
  bool vhost = false;
  std::vector<char*> positional;
  std::vector<char*> command;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--comm" && i + 1 < argc) {
      pattern = argv[++i];
    } else if (a == "--vhost") {
      vhost = true;
    } else if (a == "--") {
      command.assign(argv + i + 1, argv + argc);
      break;
    } else {
      positional.push_back(argv[i]);
    }
  }
  if (positional.size() < 2 || positional.size() > 3) return Usage();
  const int pid = std::atoi(positional[0]);
  const uint64_t want = std::strtoull(positional[1], nullptr, 16);
  const int timeout_ms = positional.size() > 2 ? std::atoi(positional[2]) : 10000;
  using Clock = std::chrono::steady_clock;
  const std::set<int> before = Threads(pid);
  if (before.empty()) {
    std::fprintf(stderr, "lab_tag_gap: no process %d\n", pid);
    return 2;
  }
  const std::string vhost_name = "vhost-" + std::to_string(pid);
  if (vhost) pattern = vhost_name;
  // Kernel-thread workers: tasks outside PID, so every process is a
  // candidate; those that exist now are not new.
  const std::set<int> processes_before = vhost ? Processes() : std::set<int>{};
  pid_t child = -1;
  if (command.empty()) {
    if (kill(pid, vhost ? SIGUSR2 : SIGUSR1) != 0) {
      std::perror("lab_tag_gap: kill");
      return 2;
    }
  } else {
    command.push_back(nullptr);
    child = fork();
    if (child < 0) {
      std::perror("lab_tag_gap: fork");
      return 2;
    }
    if (child == 0) {
      dup2(2, 1);  // the command's output goes to stderr
      execvp(command[0], command.data());
      std::perror("lab_tag_gap: exec");
      _exit(127);
    }
  }
  const auto asked = Clock::now();
  const auto deadline = asked + std::chrono::milliseconds(timeout_ms);
  int tid = 0;
  int command_status = -1;
  // Every new thread: when it was first seen, and whether it held the
  // cookie then.
  struct Seen {
    Clock::time_point at;
    bool had_cookie;
  };
  std::map<int, Seen> first_seen;
  Clock::time_point seen;
  bool born_with_cookie = false;
  auto holds = [&](int t) {
    uint64_t cookie = 0;
    return cosched::lab::SchedCoreCall(cosched::lab::kGet, t, cosched::lab::kScopeThread,
                                       &cookie) == 0 &&
           cookie == want;
  };
  while (tid == 0 && Clock::now() < deadline) {
    if (vhost) {
      for (int p : Processes()) {
        if (processes_before.count(p) || first_seen.count(p)) continue;
        // A kernel thread is born as a copy of kthreadd and named by
        // kthread_create just after: timed from its name, the first moment
        // anything can tell it is this VM's worker.
        if (cosched::lab::ReadProcLine("/proc/" + std::to_string(p) + "/comm") != vhost_name) continue;
        first_seen.emplace(p, Seen{Clock::now(), holds(p)});
        tid = p;
        seen = first_seen[p].at;
        born_with_cookie = first_seen[p].had_cookie;
        break;
      }
      if (tid != 0) break;
    }
    for (int t : Threads(pid)) {
      if (before.count(t)) continue;
      auto it = first_seen.find(t);
      if (it == first_seen.end()) {
        Clock::time_point now = Clock::now();
        it = first_seen.emplace(t, Seen{now, holds(t)}).first;
      }
      if (pattern.empty() || fnmatch(pattern.c_str(), Comm(pid, t).c_str(), 0) == 0) {
        tid = t;
        seen = it->second.at;
        born_with_cookie = it->second.had_cookie;
        break;
      }
    }
    if (tid != 0) break;
    if (child > 0 && command_status < 0) {
      int status = 0;
      if (waitpid(child, &status, WNOHANG) == child) {
        command_status = status;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          std::fprintf(stderr, "lab_tag_gap: %s failed (status %d) and made no new thread\n",
                       command[0], WIFEXITED(status) ? WEXITSTATUS(status) : -1);
          return 3;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (tid == 0) {
    std::fprintf(stderr, "lab_tag_gap: no new thread%s%s in %d\n",
                 pattern.empty() ? "" : " named ", pattern.c_str(), pid);
    if (child > 0 && command_status < 0) kill(child, SIGTERM), waitpid(child, nullptr, 0);
    return 1;
  }
  // "inherited" only if it held the cookie when it was first seen (under
  // whatever name it had then).
  int result = 1;
  while (Clock::now() < deadline) {
    if (holds(tid)) {
      if (born_with_cookie && !vhost && !holds(pid)) {
        // Nothing it could inherit from held the cookie.
        std::printf("tid %d tagged_after_us 0 before_seen_us %lld\n", tid,
                    static_cast<long long>(
                        std::chrono::duration_cast<std::chrono::microseconds>(seen - asked)
                            .count()));
      } else if (born_with_cookie) {
        std::printf("tid %d inherited\n", tid);
      } else {
        auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                      Clock::now() - seen).count();
        std::printf("tid %d tagged_after_us %lld\n", tid, static_cast<long long>(us));
      }
      result = 0;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (result != 0) {
    std::fprintf(stderr, "lab_tag_gap: thread %d never got cookie %llx\n", tid,
                 static_cast<unsigned long long>(want));
  }
  if (child > 0 && command_status < 0) {
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "lab_tag_gap: %s failed (status %d) after making thread %d\n",
                   command[0], WIFEXITED(status) ? WEXITSTATUS(status) : -1, tid);
      if (result == 0) result = 3;
    }
  }
  return result;
}
