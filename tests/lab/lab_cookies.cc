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
#include <dirent.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
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

std::string ReadComm(const std::string& path) {
  std::ifstream f(path);
  std::string comm;
  std::getline(f, comm);
  return comm;
}

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
    t.comm = ReadComm("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/comm");
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
  fprintf(stderr, "usage: lab_cookies [-j] [-n COMM_PATTERN]... [PID|self]...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
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
      std::string comm = ReadComm("/proc/" + std::to_string(pid) + "/comm");
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
