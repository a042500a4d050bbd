// A stand-in for a QEMU process, for the real-procfs discovery test. Built
// as `qemu-system-x86_64`, so its argv[0] looks like QEMU's.
//
//   qemu-system-x86_64 -name guest=NAME,debug-threads=on -uuid UUID
//
// Forks one helper child process (comm "fake-helper"), then names its
// threads as QEMU does: "CPU 0/KVM", "CPU 1/KVM", "IO iothread0",
// "vhost-<pid>". Prints "ready" on stdout once all exist and are named, and
// exits when its stdin closes or its parent dies (the child with it).
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

int main() {
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  pid_t self = getpid();
  // The helper says when it has its name: "ready" printed before the rename
  // would let the test see it still called "qemu-system-x86".
  int named[2];
  if (pipe(named) != 0) return 1;
  pid_t helper = fork();
  if (helper < 0) return 1;
  if (helper == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != self) _exit(0);
    prctl(PR_SET_NAME, "fake-helper", 0, 0, 0);
    close(named[0]);
    close(named[1]);
    for (;;) pause();
  }
  close(named[1]);
  char eof;
  if (read(named[0], &eof, 1) != 0) return 1;  // EOF once the helper has closed its end
  close(named[0]);
  for (const std::string& name :
       {std::string("CPU 0/KVM"), std::string("CPU 1/KVM"), std::string("IO iothread0"),
        "vhost-" + std::to_string(self)}) {
    std::thread thread([] {
      for (;;) pause();
    });
    // Named before "ready" is printed: the test sees every name at once.
    if (pthread_setname_np(thread.native_handle(), name.c_str()) != 0) return 1;
    thread.detach();
  }
  printf("ready\n");
  fflush(stdout);
  char buffer[64];
  while (read(0, buffer, sizeof buffer) > 0) {
  }
  kill(helper, SIGKILL);
  return 0;
}
