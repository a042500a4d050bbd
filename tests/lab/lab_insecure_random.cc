// lab_insecure_random.so: an LD_PRELOAD library for the lab scenario
// agent_readback_blind, which holds Linux 6.1 in the state it tests: the
// kernel's random pool not yet initialised, so its pointer-hash key is not
// ready and PR_SCHED_CORE_GET reads 0 for tagged tasks.
//
// On 6.1 a blocking getrandom() (or a read of /dev/urandom) before the pool
// is ready runs the kernel's jitter entropy until the pool is initialised,
// in well under a second here. The stack does one at its first RPC: gRPC's
// backoff seeds absl's random pool with getentropy(), that is
// getrandom(flags 0). So in the lab the window would close a moment after
// the agent starts, whatever the agent does. With this library, getrandom()
// and getentropy() of the programs it is preloaded into ask with
// GRND_INSECURE: bytes without waiting and without initialising the pool
// (absl uses them to jitter backoffs). Nothing of the core-scheduling path
// changes: cookies are set and read by the same prctl calls; only who ends
// the window does (the scenario, by reading /dev/random).
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

extern "C" {

ssize_t getrandom(void* buf, size_t len, unsigned int flags) {
  // GRND_RANDOM and GRND_INSECURE together are refused: drop the former.
  flags = (flags & ~static_cast<unsigned int>(GRND_RANDOM)) | GRND_INSECURE;
  return syscall(SYS_getrandom, buf, len, flags);
}

int getentropy(void* buf, size_t len) {
  if (len > 256) {
    errno = EIO;
    return -1;
  }
  auto* p = static_cast<unsigned char*>(buf);
  while (len > 0) {
    ssize_t n = syscall(SYS_getrandom, p, len, GRND_INSECURE);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return 0;
}

}  // extern "C"
