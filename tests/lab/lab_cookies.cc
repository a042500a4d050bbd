// lab_cookies: the lab's own reader of core-scheduling cookies.
//
//   lab_cookies [-j] [-n COMM_PATTERN]... [PID|self]...
//
// For every given process, and every process whose comm matches a pattern
// (fnmatch, e.g. 'vhost-*'), lists each thread with the hash that
// PR_SCHED_CORE_GET returns for it (0: no cookie; equal hashes: same cookie).
// Text: one line per thread, "pid tid cookie comm" (comm last: it may hold
// spaces); the cookie is 0, 0x<hex>, or error:<ERRNO NAME> for that thread.
// -j prints a JSON array instead. Exit: 0 all read, 1 some thread or process
// failed or nothing matched, 2 usage.
//
//   lab_cookies --watch INTERVAL_MS SECONDS PID...
//
// Samples the cookies of every thread of the given processes every
// INTERVAL_MS for SECONDS (in one process: a shell loop forking a reader per
// sample could not keep up under emulation), prints every change of a
// thread's cookie between two samples ("change +MS pid tid OLD -> NEW comm")
// and a last line "samples N changes C threads_appeared A threads_gone G".
// Threads that appear or go are counted, not changes. SIGTERM ends the
// sampling early, after the sample in progress, with the same last line: a
// scenario stops the sampler once what it watches is over, instead of
// waiting out a SECONDS long enough for the slowest machine. Exit: 0 no
// change, 1 some change (or a process is gone), 2 usage.
//
//   lab_cookies --kill-on-cookie PID VICTIM TIMEOUT_MS
//
// Reads the cookie of PID's main thread in a tight loop and sends SIGKILL to
// VICTIM (the agent) the moment it is not 0, then at once reads every thread
// of PID and prints "killed_after_us N tagged T of M" (T < M: VICTIM died in
// the middle of tagging PID). Exit: 0 killed, 1 timeout, 2 usage.
#include <dirent.h>
#include <fnmatch.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sched_core_prctl.h"

namespace {

struct ThreadCookie {
  long pid = 0;
  long tid = 0;
  std::string comm;
  uint64_t cookie = 0;
  int err = 0;
};

std::vector<long> ListNumericDir(const std::string& path, int* err) {
  std::vector<long> ids;
  DIR* d = opendir(path.c_str());
  if (!d) {
    *err = errno == ENOENT ? ESRCH : errno;
    return ids;
  }
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long v = strtol(e->d_name, &end, 10);
    if (v > 0 && *end == '\0') ids.push_back(v);
  }
  closedir(d);
  std::sort(ids.begin(), ids.end());
  return ids;
}

void ReadProcess(long pid, std::vector<ThreadCookie>* out) {
  int err = 0;
  std::vector<long> tids = ListNumericDir("/proc/" + std::to_string(pid) + "/task", &err);
  if (err) {
    out->push_back({pid, 0, "", 0, err});
    return;
  }
  for (long tid : tids) {
    ThreadCookie t;
    t.pid = pid;
    t.tid = tid;
    t.comm = cosched::lab::ReadProcLine("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/comm");
    t.err = cosched::lab::SchedCoreCall(cosched::lab::kGet, static_cast<pid_t>(tid),
                                        cosched::lab::kScopeThread, &t.cookie);
    out->push_back(std::move(t));
  }
}

std::string CookieText(const ThreadCookie& t) {
  if (t.err) return "error:" + cosched::lab::ErrnoName(t.err);
  if (t.cookie == 0) return "0";
  char buf[32];
  snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(t.cookie));
  return buf;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

int Usage() {
  fprintf(stderr,
          "usage: lab_cookies [-j] [-n COMM_PATTERN]... [PID|self]...\n"
          "       lab_cookies --watch INTERVAL_MS SECONDS PID...\n"
          "       lab_cookies --kill-on-cookie PID VICTIM TIMEOUT_MS\n");
  return 2;
}

volatile sig_atomic_t g_stop_watch = 0;
void StopWatch(int) { g_stop_watch = 1; }

int Watch(int interval_ms, int seconds, const std::vector<long>& pids) {
  using Clock = std::chrono::steady_clock;
  struct sigaction stop {};
  stop.sa_handler = StopWatch;
  sigemptyset(&stop.sa_mask);
  sigaction(SIGTERM, &stop, nullptr);
  auto sample = [&pids](bool* gone) {
    std::map<std::pair<long, long>, ThreadCookie> m;
    std::vector<ThreadCookie> rows;
    for (long pid : pids) ReadProcess(pid, &rows);
    for (ThreadCookie& t : rows) {
      if (t.tid == 0) {
        *gone = true;  // the whole process
        continue;
      }
      if (t.err == ESRCH) continue;  // exited between listing and reading
      m[{t.pid, t.tid}] = std::move(t);
    }
    return m;
  };
  bool gone = false;
  auto last = sample(&gone);
  if (gone) {
    fprintf(stderr, "lab_cookies: a process is gone\n");
    return 1;
  }
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  long samples = 1, changes = 0, appeared = 0, vanished = 0;
  auto next = start;
  while (true) {
    next += std::chrono::milliseconds(interval_ms);
    if (next > end || g_stop_watch) break;
    std::this_thread::sleep_until(next);
    auto now = sample(&gone);
    ++samples;
    const long ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    for (const auto& [key, t] : now) {
      auto it = last.find(key);
      if (it == last.end()) {
        ++appeared;
        continue;
      }
      if (CookieText(it->second) != CookieText(t)) {
        ++changes;
        printf("change +%ld %ld %ld %s -> %s %s\n", ms, t.pid, t.tid,
               CookieText(it->second).c_str(), CookieText(t).c_str(), t.comm.c_str());
      }
    }
    for (const auto& [key, t] : last) vanished += now.count(key) ? 0 : 1;
    last = std::move(now);
  }
  printf("samples %ld changes %ld threads_appeared %ld threads_gone %ld\n", samples, changes,
         appeared, vanished);
  if (gone) fprintf(stderr, "lab_cookies: a process is gone\n");
  return changes == 0 && !gone ? 0 : 1;
}

int KillOnCookie(long pid, long victim, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto end = start + std::chrono::milliseconds(timeout_ms);
  uint64_t cookie = 0;
  while (Clock::now() < end) {
    int err = cosched::lab::SchedCoreCall(cosched::lab::kGet, static_cast<pid_t>(pid),
                                          cosched::lab::kScopeThread, &cookie);
    if (err == 0 && cookie != 0) break;
    if (err != 0) {
      fprintf(stderr, "lab_cookies: cannot read %ld: %s\n", pid, cosched::lab::ErrnoName(err).c_str());
      return 1;
    }
  }
  if (cookie == 0) {
    fprintf(stderr, "lab_cookies: %ld got no cookie within %d ms\n", pid, timeout_ms);
    return 1;
  }
  kill(static_cast<pid_t>(victim), SIGKILL);
  const long us =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
  std::vector<ThreadCookie> rows;
  ReadProcess(pid, &rows);
  long tagged = 0;
  for (const ThreadCookie& t : rows) tagged += (t.err == 0 && t.cookie != 0) ? 1 : 0;
  printf("killed_after_us %ld tagged %ld of %zu\n", us, tagged, rows.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--kill-on-cookie") {
    long pid = atol(argv[2]), victim = atol(argv[3]);
    int timeout_ms = atoi(argv[4]);
    if (pid <= 0 || victim <= 0 || timeout_ms <= 0) return Usage();
    return KillOnCookie(pid, victim, timeout_ms);
  }
  if (argc >= 5 && std::string(argv[1]) == "--watch") {
    int interval_ms = atoi(argv[2]), seconds = atoi(argv[3]);
    std::vector<long> pids;
    for (int i = 4; i < argc; ++i) {
      char* end = nullptr;
      long v = strtol(argv[i], &end, 10);
      if (v <= 0 || *end != '\0') return Usage();
      pids.push_back(v);
    }
    if (interval_ms <= 0 || seconds <= 0) return Usage();
    return Watch(interval_ms, seconds, pids);
  }
  bool json = false;
  std::vector<long> pids;
  std::vector<std::string> patterns;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-j") {
      json = true;
    } else if (a == "-n" && i + 1 < argc) {
      patterns.push_back(argv[++i]);
    } else if (a == "self") {
      pids.push_back(getpid());
    } else {
      char* end = nullptr;
      long v = strtol(a.c_str(), &end, 10);
      if (v <= 0 || *end != '\0') return Usage();
      pids.push_back(v);
    }
  }
  if (pids.empty() && patterns.empty()) return Usage();

  if (!patterns.empty()) {
    int err = 0;
    std::set<long> given(pids.begin(), pids.end());
    for (long pid : ListNumericDir("/proc", &err)) {
      std::string comm = cosched::lab::ReadProcLine("/proc/" + std::to_string(pid) + "/comm");
      for (const auto& p : patterns) {
        if (!comm.empty() && fnmatch(p.c_str(), comm.c_str(), 0) == 0 && given.insert(pid).second) {
          pids.push_back(pid);
          break;
        }
      }
    }
  }
  if (pids.empty()) {
    fprintf(stderr, "lab_cookies: no process matched\n");
    return 1;
  }

  std::vector<ThreadCookie> rows;
  for (long pid : pids) ReadProcess(pid, &rows);
  bool failed = false;
  if (json) printf("[");
  for (size_t i = 0; i < rows.size(); ++i) {
    const ThreadCookie& t = rows[i];
    failed |= t.err != 0;
    if (json) {
      printf("%s\n  {\"pid\": %ld, \"tid\": %ld, \"comm\": %s, ", i ? "," : "", t.pid, t.tid,
             JsonString(t.comm).c_str());
      if (t.err)
        printf("\"error\": %s}", JsonString(cosched::lab::ErrnoName(t.err)).c_str());
      else
        printf("\"cookie\": %s}", JsonString(CookieText(t)).c_str());
    } else {
      printf("%ld %ld %s %s\n", t.pid, t.tid, CookieText(t).c_str(), t.comm.c_str());
    }
  }
  if (json) printf("\n]\n");
  return failed ? 1 : 0;
}
