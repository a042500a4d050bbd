// lab_cookie_set: sets core-scheduling cookies directly, so that a lab
// scenario can prove the kernel path without the agent.
//
//   lab_cookie_set create PID [thread|group|pgroup]     a fresh cookie (default scope: group)
//   lab_cookie_set copy FROM_TID PID [thread|group|pgroup]
//                                       PID gets FROM_TID's cookie
//   lab_cookie_set clear PID [thread|group|pgroup]      PID ends with no cookie
//
// copy and clear go through this short-lived process's own cookie
// (SHARE_FROM, then SHARE_TO), as the kernel offers no other way. Prints
// nothing on success; on failure names the step and errno. Exit 1 on failure.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "sched_core_prctl.h"

namespace {

namespace lab = cosched::lab;

int Usage() {
  fprintf(stderr,
          "usage: lab_cookie_set create PID [thread|group|pgroup]\n"
          "       lab_cookie_set copy FROM_TID PID [thread|group|pgroup]\n"
          "       lab_cookie_set clear PID [thread|group|pgroup]\n");
  return 2;
}

bool ParsePid(const char* s, pid_t* out) {
  char* end = nullptr;
  long v = strtol(s, &end, 10);
  if (v <= 0 || *end != '\0') return false;
  *out = static_cast<pid_t>(v);
  return true;
}

bool ParseScope(int argc, char** argv, int at, int* scope) {
  if (argc == at) return true;
  if (argc != at + 1) return false;
  std::string s = argv[at];
  if (s == "thread") *scope = lab::kScopeThread;
  else if (s == "group") *scope = lab::kScopeThreadGroup;
  else if (s == "pgroup") *scope = lab::kScopeProcessGroup;
  else return false;
  return true;
}

int Fail(const char* step, pid_t pid, int err) {
  fprintf(stderr, "lab_cookie_set: %s %d: %s (%s)\n", step, static_cast<int>(pid),
          lab::ErrnoName(err).c_str(), strerror(err));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  std::string cmd = argv[1];
  int scope = lab::kScopeThreadGroup;
  pid_t target = 0;
  if (cmd == "create" || cmd == "clear") {
    if (!ParsePid(argv[2], &target) || !ParseScope(argc, argv, 3, &scope)) return Usage();
    if (cmd == "create") {
      int err = lab::SchedCoreCall(lab::kCreate, target, scope, nullptr);
      return err ? Fail("create", target, err) : 0;
    }
    uint64_t own = 0;
    int err = lab::SchedCoreCall(lab::kGet, 0, lab::kScopeThread, &own);
    if (err) return Fail("get (self)", getpid(), err);
    if (own != 0) {
      fprintf(stderr, "lab_cookie_set: clear: this process already holds a cookie (inherited), cannot clear\n");
      return 1;
    }
    err = lab::SchedCoreCall(lab::kShareTo, target, scope, nullptr);
    return err ? Fail("clear (share_to)", target, err) : 0;
  }
  if (cmd == "copy") {
    pid_t from = 0;
    if (argc < 4 || !ParsePid(argv[2], &from) || !ParsePid(argv[3], &target) ||
        !ParseScope(argc, argv, 4, &scope))
      return Usage();
    int err = lab::SchedCoreCall(lab::kShareFrom, from, lab::kScopeThread, nullptr);
    if (err) return Fail("copy (share_from)", from, err);
    err = lab::SchedCoreCall(lab::kShareTo, target, scope, nullptr);
    return err ? Fail("copy (share_to)", target, err) : 0;
  }
  return Usage();
}
