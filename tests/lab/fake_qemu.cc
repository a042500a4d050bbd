// A stand-in for a QEMU/KVM process, for the lab. Built as
// `qemu-system-x86_64`, so that its comm is `qemu-system-x86` and its command
// line looks like QEMU's to a procfs scanner.
//
//   qemu-system-x86_64 -name guest=vm-1[,...] | -name vm-1   [-uuid UUID]
//       -smp N[,...]            N vCPU threads "CPU n/KVM" (default 1)
//       [--duty PCT]            vCPUs busy PCT% of every 10 ms (default 100: spin)
//       [--cpus LIST]           affinity of the whole process (e.g. 0-3)
//       [--vcpu-cpus LIST]      vCPU n pinned to the n-th CPU of LIST (like vcpupin)
//       [--vhost-net N]         N real vhost-net workers (/dev/vhost-net)
//                               instead of the stand-in thread
//       [-pidfile FILE]         written once every thread exists and is named
//       [--as-uid N]            runs as user N (real, effective and saved uid
//                               and gid), set before anything else: a
//                               process another user started
//       [-m X -machine X -accel X -cpu X -display X -nodefaults -S ...] ignored
//
// Threads: the main thread (comm qemu-system-x86), the vCPUs, "IO iothread0"
// (wakes every 20 ms) and "vhost-<pid>" (wakes every 5 ms: the in-process
// vhost worker of Linux >= 6.4). All are created by the main thread.
//
// --vhost-net N opens /dev/vhost-net N times and issues VHOST_SET_OWNER on
// each from the main thread, so the kernel makes N real vhost workers named
// "vhost-<pid>": threads of this process that inherit the main thread's
// cookie on Linux >= 6.4, kernel threads (children of kthreadd, cookie 0)
// before. They replace the stand-in "vhost-<pid>" thread. SIGUSR2 adds one
// more, from the main thread too (a NIC added later); it works without
// --vhost-net as well. The pidfile is written after the first N exist.
//
// SIGUSR1 adds one vCPU thread "CPU k/KVM" (hotplug stand-in). The main thread
// creates it, so it inherits the main thread's cookie: when the whole thread
// group was tagged it starts tagged (gap 0); when only vCPU threads were
// tagged (scope vcpus) it starts with the main thread's cookie, normally none.
// SIGTERM, SIGINT, SIGHUP: clean exit (threads joined, status 0).
// Prints nothing except on error.
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sibling_share.h"  // ParseCpuList

namespace {

// VHOST_SET_OWNER from <linux/vhost.h>, written out: that header pulls in
// <linux/virtio_ring.h>, whose inline functions are C that C++ rejects.
constexpr unsigned long kVhostSetOwner = _IO(0xAF, 0x01);

struct Options {
  std::string name;
  std::string uuid;
  int vcpus = 1;
  int duty_pct = 100;
  std::vector<int> cpus;
  std::vector<int> vcpu_cpus;
  int vhost_net = 0;
  std::string pidfile;
  int as_uid = 0;
};

std::atomic<bool> g_stop{false};

[[noreturn]] void Die(const std::string& msg) {
  fprintf(stderr, "qemu-system-x86_64 (fake): %s\n", msg.c_str());
  exit(1);
}

void SleepNs(long ns) {
  timespec ts{ns / 1'000'000'000L, ns % 1'000'000'000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

void SetName(const std::string& name) { prctl(PR_SET_NAME, name.c_str(), 0, 0, 0); }

bool SetAffinity(pid_t tid, const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return sched_setaffinity(tid, sizeof set, &set) == 0;
}

Options Parse(int argc, char** argv) {
  static const std::set<std::string> kIgnoredWithValue = {
      "-m", "-machine", "-M", "-accel", "-cpu", "-display", "-monitor", "-qmp",
      "-chardev", "-device", "-object", "-mon", "-serial", "-vga", "-boot"};
  static const std::set<std::string> kIgnoredFlags = {"-nodefaults", "-enable-kvm", "-S",
                                                      "-no-user-config", "-nographic"};
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Die("option " + a + " needs a value");
      return argv[++i];
    };
    auto cpu_list = [&](const std::string& text) {
      auto list = cosched::lab::ParseCpuList(text);
      if (!list || list->empty()) Die("bad CPU list '" + text + "'");
      return *list;
    };
    if (a == "-name") {
      std::string v = value();
      // "guest=NAME,debug-threads=on" or "NAME[,...]".
      std::string first = v.substr(0, v.find(','));
      o.name = first.starts_with("guest=") ? first.substr(6) : first;
      if (o.name.empty()) Die("empty -name");
    } else if (a == "-uuid") {
      o.uuid = value();
    } else if (a == "-smp") {
      std::string v = value();
      std::string first = v.substr(0, v.find(','));
      if (first.starts_with("cpus=")) first = first.substr(5);
      o.vcpus = atoi(first.c_str());
      if (o.vcpus < 1 || o.vcpus > 256) Die("bad -smp '" + v + "'");
    } else if (a == "--duty") {
      o.duty_pct = atoi(value().c_str());
      if (o.duty_pct < 1 || o.duty_pct > 100) Die("--duty takes 1..100");
    } else if (a == "--cpus") {
      o.cpus = cpu_list(value());
    } else if (a == "--vcpu-cpus") {
      o.vcpu_cpus = cpu_list(value());
    } else if (a == "--vhost-net") {
      o.vhost_net = atoi(value().c_str());
      if (o.vhost_net < 1 || o.vhost_net > 64) Die("--vhost-net takes 1..64");
    } else if (a == "-pidfile") {
      o.pidfile = value();
    } else if (a == "--as-uid") {
      o.as_uid = atoi(value().c_str());
      if (o.as_uid < 1) Die("--as-uid takes a uid above 0");
    } else if (kIgnoredWithValue.count(a)) {
      value();
    } else if (!kIgnoredFlags.count(a)) {
      Die("unknown option '" + a + "'");
    }
  }
  if (o.name.empty() && o.uuid.empty()) Die("needs -name or -uuid");
  return o;
}

// Wakes every `period_ns` and does a little work, like an I/O or vhost worker.
void WorkerLoop(long period_ns) {
  volatile uint64_t sink = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    for (int i = 0; i < 2000; ++i) sink = sink + i;
    SleepNs(period_ns);
  }
}

void VcpuLoop(int duty_pct) {
  constexpr int64_t kPeriodNs = 10'000'000;
  volatile uint64_t sink = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    int64_t busy_until = NowNs() + kPeriodNs * duty_pct / 100;
    while (NowNs() < busy_until && !g_stop.load(std::memory_order_relaxed))
      for (int i = 0; i < 1000; ++i) sink = sink + i;
    if (duty_pct < 100) SleepNs(kPeriodNs * (100 - duty_pct) / 100);
  }
}

class FakeQemu {
 public:
  explicit FakeQemu(Options o) : o_(std::move(o)) {}

  int Run() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&set, s);
    // Blocked before any thread exists, so only sigwaitinfo below sees them.
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    if (!o_.cpus.empty() && !SetAffinity(0, o_.cpus)) Die(std::string("--cpus: ") + strerror(errno));

    std::string vhost_name = "vhost-" + std::to_string(getpid());
    for (int i = 0; i < o_.vcpus; ++i) AddVcpu();
    Start("IO iothread0", {}, [] { WorkerLoop(20'000'000); });
    if (o_.vhost_net > 0) {
      for (int i = 0; i < o_.vhost_net; ++i) AddVhostNet(/*fatal=*/true);
    } else {
      Start(vhost_name, {}, [] { WorkerLoop(5'000'000); });
    }
    WaitNamed();
    if (!o_.pidfile.empty()) {
      std::ofstream f(o_.pidfile);
      f << getpid() << "\n";
      if (!f) Die("cannot write -pidfile " + o_.pidfile);
    }

    for (;;) {
      siginfo_t info;
      int sig = sigwaitinfo(&set, &info);
      if (sig < 0) continue;
      if (sig == SIGUSR1) {
        AddVcpu();
        WaitNamed();
      } else if (sig == SIGUSR2) {
        AddVhostNet(/*fatal=*/false);
      } else {
        break;
      }
    }
    g_stop = true;
    for (auto& t : threads_) t.join();
    if (!o_.pidfile.empty()) unlink(o_.pidfile.c_str());
    for (int fd : vhost_fds_) close(fd);  // each worker stops with its device
    return 0;
  }

 private:
  void AddVcpu() {
    int k = next_vcpu_++;
    std::vector<int> pin;
    if (!o_.vcpu_cpus.empty()) pin.push_back(o_.vcpu_cpus[k % o_.vcpu_cpus.size()]);
    int duty = o_.duty_pct;
    Start("CPU " + std::to_string(k) + "/KVM", pin, [duty] { VcpuLoop(duty); });
  }

  // Starts a thread that names (and pins) itself, then runs `body`.
  template <typename F>
  void Start(std::string name, std::vector<int> pin, F body) {
    ++expected_named_;
    threads_.emplace_back([this, name = std::move(name), pin = std::move(pin), body] {
      SetName(name);
      if (!pin.empty() && !SetAffinity(0, pin)) Die("cannot pin " + name + ": " + strerror(errno));
      named_.fetch_add(1);
      named_.notify_all();
      body();
    });
  }

  void WaitNamed() {
    for (int n = named_.load(); n < expected_named_; n = named_.load()) named_.wait(n);
  }

  // One real vhost worker: the kernel creates it inside VHOST_SET_OWNER,
  // named after the calling thread's tid (this main thread: the pid). At
  // start a failure is fatal (the scenario asked for real workers); on
  // SIGUSR2 it is printed and the process goes on, so a test sees no new
  // worker rather than a dead VM.
  void AddVhostNet(bool fatal) {
    int fd = open("/dev/vhost-net", O_RDWR | O_CLOEXEC);
    std::string error;
    if (fd < 0) {
      error = std::string("open /dev/vhost-net: ") + strerror(errno);
    } else if (ioctl(fd, kVhostSetOwner) != 0) {
      error = std::string("VHOST_SET_OWNER: ") + strerror(errno);
      close(fd);
    } else {
      vhost_fds_.push_back(fd);
      return;
    }
    if (fatal) Die(error);
    fprintf(stderr, "qemu-system-x86_64 (fake): %s\n", error.c_str());
  }

  Options o_;
  std::vector<std::thread> threads_;
  std::atomic<int> named_{0};
  int expected_named_ = 0;
  int next_vcpu_ = 0;
  std::vector<int> vhost_fds_;
};

}  // namespace

int main(int argc, char** argv) {
  Options options = Parse(argc, argv);
  if (options.as_uid > 0) {
    const auto id = static_cast<unsigned>(options.as_uid);
    if (setgroups(0, nullptr) != 0 || setresgid(id, id, id) != 0 || setresuid(id, id, id) != 0) {
      Die(std::string("cannot become uid ") + std::to_string(id) + ": " + strerror(errno));
    }
  }
  return FakeQemu(options).Run();
}
