/* The lab kernel's check, run as the guest's only program by lab_kernel.sh
 * (built static: the check's initramfs has no libc). It asks the booted kernel
 * for what every lab scenario relies on and prints one line per finding, then
 * "KERNEL_CHECK: OK" or "KERNEL_CHECK: FAIL <what>":
 *   - 4 CPUs online in 2 cores x 2 SMT siblings (0-1 and 2-3), SMT active;
 *   - core scheduling: PR_SCHED_CORE_CREATE on this task, read back non-zero;
 *   - schedstats and /proc/<pid>/sched, and /dev/vhost-net.
 * Written in C, not with the project's libraries: it checks the kernel, so it
 * must not depend on anything the kernel might break. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifndef PR_SCHED_CORE
#define PR_SCHED_CORE 62
#define PR_SCHED_CORE_GET 0
#define PR_SCHED_CORE_CREATE 1
#endif
#define PIDTYPE_PID 0

static int failures;

static void fail(const char *what) {
  printf("kernel_check: FAIL %s\n", what);
  failures++;
}

/* The first line of PATH into buf, without its newline; "" when unreadable. */
static const char *first_line(const char *path, char *buf, size_t size) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (f == NULL) return buf;
  if (fgets(buf, (int)size, f) == NULL) buf[0] = '\0';
  fclose(f);
  buf[strcspn(buf, "\n")] = '\0';
  return buf;
}

static void expect_line(const char *path, const char *want, const char *what) {
  char buf[256];
  first_line(path, buf, sizeof buf);
  printf("kernel_check: %s = '%s'\n", path, buf);
  if (strcmp(buf, want) != 0) fail(what);
}

int main(void) {
  /* The initramfs has no /dev/console, so this program starts without stdio:
   * devtmpfs first, then the console. */
  mkdir("/dev", 0755);
  mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
  int console = open("/dev/console", O_RDWR);
  if (console >= 0) {
    dup2(console, 1);
    dup2(console, 2);
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  mkdir("/proc", 0755);
  mkdir("/sys", 0755);
  mount("proc", "/proc", "proc", 0, NULL);
  mount("sysfs", "/sys", "sysfs", 0, NULL);

  struct utsname u;
  if (uname(&u) == 0) printf("kernel_check: release %s\n", u.release);

  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  printf("kernel_check: %ld CPUs online\n", cpus);
  if (cpus != 4) fail("4 CPUs online (-smp 4,sockets=1,cores=2,threads=2)");
  expect_line("/sys/devices/system/cpu/smt/active", "1",
              "SMT active (6.1 needs -cpu max,vendor=GenuineIntel)");
  expect_line("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list", "0-1",
              "CPUs 0 and 1 are siblings");
  expect_line("/sys/devices/system/cpu/cpu2/topology/thread_siblings_list", "2-3",
              "CPUs 2 and 3 are siblings");

  if (prctl(PR_SCHED_CORE, PR_SCHED_CORE_CREATE, 0, PIDTYPE_PID, 0) != 0) {
    printf("kernel_check: PR_SCHED_CORE_CREATE: %s\n", strerror(errno));
    fail("core scheduling (CONFIG_SCHED_CORE and SMT)");
  } else {
    uint64_t cookie = 0;
    if (prctl(PR_SCHED_CORE, PR_SCHED_CORE_GET, 0, PIDTYPE_PID, (unsigned long)&cookie) != 0 ||
        cookie == 0) {
      /* 6.1 reads 0 until its pointer-hash key is ready: random.trust_cpu=on. */
      fail("PR_SCHED_CORE_GET reads back the cookie just created");
    } else {
      printf("kernel_check: core scheduling cookie %#llx\n", (unsigned long long)cookie);
    }
  }

  if (access("/proc/sys/kernel/sched_schedstats", F_OK) != 0) fail("schedstats (CONFIG_SCHEDSTATS)");
  if (access("/proc/self/sched", R_OK) != 0) fail("/proc/<pid>/sched (CONFIG_SCHED_DEBUG)");
  if (access("/dev/vhost-net", F_OK) != 0) fail("/dev/vhost-net (CONFIG_VHOST_NET)");

  if (failures == 0) {
    printf("KERNEL_CHECK: OK\n");
  } else {
    printf("KERNEL_CHECK: FAIL %d finding(s) above\n", failures);
  }
  fflush(stdout);
  sync();
  reboot(RB_POWER_OFF);
  return 0;
}
