// What libvirt_integration_test.cc runs on, apart from the test itself:
// running commands and reading files; CsdTaggingFromMetadata (a csd that
// tags from the Reports made there); LibvirtdProcess (a libvirtd of the
// test's own, set up to run on a bare Debian 12 host); Cpio and
// WriteInitramfs (the domain's tiny guest); EventLog (libvirt's lifecycle
// events); DomainGuard (the domain is destroyed whatever happens).
#ifndef COSCHED_TESTS_DISCOVERY_LIBVIRT_TEST_SUPPORT_H_
#define COSCHED_TESTS_DISCOVERY_LIBVIRT_TEST_SUPPORT_H_

#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/cookie_reconciler.h"
#include "common/status_macros.h"
#include "discovery/libvirt_discovery.h"
#include "discovery/libvirt_status_xml.h"
#include "host/core_sched_prctl.h"
#include "host/pseudo_fs.h"
#include "host/topology.h"
#include "tests/server/state_testing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::discovery::libvirt_testing {

using discovery::DiscoveredThread;
using discovery::DiscoveredVm;
using Clock = std::chrono::steady_clock;
using Kind = discovery::DiscoveredThread::Kind;

inline constexpr char kUri[] = "qemu:///system";

inline double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

inline std::string LastError() {
  const char* message = virGetLastErrorMessage();
  return message ? message : "?";
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline bool WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  return static_cast<bool>(out);
}

inline std::string RunCommand(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  char buffer[512];
  while (fgets(buffer, sizeof buffer, pipe)) output += buffer;
  pclose(pipe);
  return output;
}

inline bool LibvirtdAnswers() {
  virConnectPtr conn = virConnectOpenReadOnly(kUri);
  if (conn == nullptr) return false;
  virConnectClose(conn);
  return true;
}

// A libvirtd started by the test. What a bare Debian 12 host (packages
// libvirt-daemon, libvirt-daemon-driver-qemu, no libvirt-daemon-system)
// lacks, and how it is supplied without changing the host for good:
//  - /etc/libvirt/qemu.conf is missing, and libvirt 9.0 resolves its
//    compiled-in user and group "libvirt-qemu" before it reads qemu.conf,
//    failing when they do not exist. libvirtd runs in a private mount
//    namespace (unshare -m) where /etc/libvirt is a temp copy with our
//    qemu.conf, and /etc/passwd and /etc/group are copies with a
//    libvirt-qemu entry added (only when the host has none).
//  - qemu.conf: QEMU runs as root, with no security driver, no mount
//    namespace of its own, and writes its log itself (stdio_handler =
//    "file"), so virtlogd is not needed.
//  - /var/{log,lib,cache}/libvirt/qemu and /run/libvirt are created.
// Sockets and status files stay in the host's /run/libvirt, so every
// process sees them.
// csd's side of tagging from metadata, in process: the desired state on a
// SQLite store with tag_from_metadata on, to which the test reports the VM
// as discovered, as cs-agent's Report would carry it (reconcile_loop.cc).
class CsdTaggingFromMetadata {
 public:
  explicit CsdTaggingFromMetadata(const std::string& data_dir) : csd_(data_dir) {
    if (csd_.state() == nullptr) return;
    csd_.state()->settings.set_tag_from_metadata(true);
    EXPECT_OK(csd_.RegisterHost(kHost, server::Actor{"test", "admin"}));
  }

  // Reports `vm` and answers csd's GetVM of it afterwards.
  absl::StatusOr<v1::VM> ReportAndGet(const discovery::DiscoveredVm& vm) {
    server::TestState* state = csd_.state();
    if (state == nullptr) return absl::InternalError("no store");
    v1::ReportRequest report;
    report.set_host_id(kHost);
    v1::VMObservation* o = report.add_vms();
    o->set_vm_id(vm.vm_id);
    o->set_uuid(vm.uuid);
    if (vm.metadata) *o->mutable_metadata() = *vm.metadata;
    o->set_metadata_unknown(vm.metadata_unknown);
    RETURN_IF_ERROR(server::testing::Wait<v1::ReportResponse>([&](auto done) {
                      state->reports.ApplyReport(report, std::move(done));
                    }).status());
    v1::GetVMRequest get;
    get.set_vm_id(vm.vm_id);
    return state->vms.GetVm(get);
  }

  static constexpr char kHost[] = "build-host";

 private:
  server::testing::SqliteTestState csd_;
};

class LibvirtdProcess {
 public:
  // Empty on success, else why not.
  std::string Start() {
    if (dir_.path().empty()) return "cannot create a temp dir";
    std::error_code ec;
    for (const char* d : {"/var/log/libvirt/qemu", "/var/lib/libvirt/qemu",
                          "/var/cache/libvirt/qemu", "/run/libvirt"}) {
      std::filesystem::create_directories(d, ec);
    }
    std::string etc = dir_.Sub("etc-libvirt");
    std::filesystem::create_directories(etc);
    for (const auto& entry : std::filesystem::directory_iterator("/etc/libvirt", ec)) {
      if (entry.is_regular_file()) {
        std::filesystem::copy_file(entry.path(), etc + "/" + entry.path().filename().string(),
                                   std::filesystem::copy_options::overwrite_existing, ec);
      }
    }
    WriteFile(etc + "/qemu.conf",
              "user = \"root\"\n"
              "group = \"root\"\n"
              "dynamic_ownership = 0\n"
              "remember_owner = 0\n"
              "namespaces = [ ]\n"
              "security_driver = \"none\"\n"
              "stdio_handler = \"file\"\n");
    WriteFile(etc + "/libvirtd.conf",
              absl::StrCat("log_filters = \"1:qemu.qemu_process 3:*\"\nlog_outputs = \"1:file:", log_path(), "\"\n"));
    std::string script = absl::StrCat("set -e\nmount --bind ", etc, " /etc/libvirt\n");
    if (getpwnam("libvirt-qemu") == nullptr) {
      WriteFile(dir_.Sub("passwd"),
                ReadFile("/etc/passwd") +
                    "libvirt-qemu:x:64055:64055:Libvirt Qemu:/var/lib/libvirt:/usr/sbin/nologin\n");
      absl::StrAppend(&script, "mount --bind ", dir_.Sub("passwd"), " /etc/passwd\n");
    }
    if (getgrnam("libvirt-qemu") == nullptr) {
      WriteFile(dir_.Sub("group"), ReadFile("/etc/group") + "libvirt-qemu:x:64055:\n");
      absl::StrAppend(&script, "mount --bind ", dir_.Sub("group"), " /etc/group\n");
    }
    absl::StrAppend(&script, "exec libvirtd -d -p ", pid_path(), "\n");
    WriteFile(dir_.Sub("start.sh"), script);
    std::string output =
        RunCommand(absl::StrCat("unshare --mount --propagation private sh ", dir_.Sub("start.sh")));
    auto start = Clock::now();
    while (MsSince(start) < 30000) {
      if (LibvirtdAnswers()) {
        pid_ = std::atoi(ReadFile(pid_path()).c_str());
        std::cout << "started libvirtd (pid " << pid_ << ") in " << MsSince(start) << " ms\n";
        return "";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return absl::StrCat("libvirtd did not answer within 30 s. unshare/libvirtd said: ", output,
                        "\nlibvirtd log:\n", ReadFile(log_path()));
  }

  // SIGTERM, and waits until it has exited.
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    auto start = Clock::now();
    while (kill(pid_, 0) == 0 && MsSince(start) < 15000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (kill(pid_, 0) == 0) kill(pid_, SIGKILL);
    pid_ = 0;
  }

  ~LibvirtdProcess() { Stop(); }

  bool running() const { return pid_ > 0; }
  std::string log_path() const { return dir_.Sub("libvirtd.log"); }
  std::string pid_path() const { return dir_.Sub("libvirtd.pid"); }

 private:
  testing::TempDir dir_;
  int pid_ = 0;
};

// A newc cpio archive (what the kernel unpacks as initramfs).
class Cpio {
 public:
  void Dir(const std::string& name) { Add(name, 040755, ""); }
  void File(const std::string& name, const std::string& content, int mode = 0100755) {
    Add(name, mode, content);
  }
  void Symlink(const std::string& name, const std::string& target) { Add(name, 0120777, target); }
  std::string Finish() {
    Add("TRAILER!!!", 0, "");
    return std::move(out_);
  }

 private:
  void Add(const std::string& name, int mode, const std::string& data) {
    char header[111];
    snprintf(header, sizeof header,
             "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X", ++ino_, mode, 0, 0,
             1, 0, static_cast<unsigned>(data.size()), 0, 0, 0, 0,
             static_cast<unsigned>(name.size() + 1), 0);
    out_.append(header, 110);
    out_.append(name);
    out_.push_back('\0');
    Pad();
    out_.append(data);
    Pad();
  }
  void Pad() {
    while (out_.size() % 4) out_.push_back('\0');
  }
  std::string out_;
  unsigned ino_ = 0;
};

// An initramfs whose /init (busybox sh) says it is up and sleeps.
inline bool WriteInitramfs(const std::string& path) {
  std::string busybox = ReadFile("/bin/busybox");
  if (busybox.empty()) return false;
  Cpio cpio;
  cpio.Dir("bin");
  cpio.Dir("dev");
  cpio.File("bin/busybox", busybox);
  cpio.Symlink("bin/sh", "busybox");
  cpio.File("init",
            "#!/bin/sh\n"
            "/bin/busybox mount -t devtmpfs dev /dev\n"
            "echo COSCHED-GUEST-UP > /dev/ttyS0\n"
            "exec /bin/busybox sleep 1000000\n");
  return WriteFile(path, cpio.Finish());
}

// Events seen by the listener.
class EventLog {
 public:
  void Add(const DomainEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back({e, Clock::now()});
    cv_.notify_all();
  }
  // When `name` had an event of `kind`, or nullopt after `timeout_ms`.
  std::optional<Clock::time_point> Wait(const std::string& name, DomainEvent::Kind kind,
                                        int timeout_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<Clock::time_point> at;
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
      for (const auto& [e, t] : events_) {
        if (e.name == name && e.kind == kind) at = t;
      }
      return at.has_value();
    });
    return at;
  }
  std::string Summary() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> parts;
    for (const auto& [e, t] : events_) {
      parts.push_back(absl::StrCat(e.name, ":", DomainEventKindName(e.kind), "/", e.detail));
    }
    return absl::StrJoin(parts, " ");
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<DomainEvent, Clock::time_point>> events_;
};

inline const discovery::DiscoveredVm* FindByName(const std::vector<discovery::DiscoveredVm>& vms, const std::string& name) {
  for (const discovery::DiscoveredVm& vm : vms) {
    if (vm.vm_id == name) return &vm;
  }
  return nullptr;
}

// Polls `discover` until it lists `name` with `vcpus` vCPU threads.
template <typename F>
inline std::optional<discovery::DiscoveredVm> WaitForVm(F discover, const std::string& name, size_t vcpus,
                                      int timeout_ms) {
  auto start = Clock::now();
  do {
    absl::StatusOr<std::vector<discovery::DiscoveredVm>> vms = discover();
    if (vms.ok()) {
      if (const discovery::DiscoveredVm* vm = FindByName(*vms, name)) {
        size_t n = 0;
        for (const discovery::DiscoveredThread& t : vm->threads) n += t.kind == Kind::kVcpu;
        if (n == vcpus) return *vm;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (MsSince(start) < timeout_ms);
  return std::nullopt;
}

// Destroys and undefines the domain at the end, whatever happened.
class DomainGuard {
 public:
  explicit DomainGuard(std::string name) : name_(std::move(name)) {}
  ~DomainGuard() {
    virConnectPtr conn = virConnectOpen(kUri);
    if (conn == nullptr) {
      std::cerr << "cleanup: cannot connect to remove domain " << name_ << ": " << LastError()
                << "\n";
      return;
    }
    if (virDomainPtr dom = virDomainLookupByName(conn, name_.c_str())) {
      if (virDomainIsActive(dom) == 1) virDomainDestroy(dom);
      virDomainUndefine(dom);
      virDomainFree(dom);
    }
    virConnectClose(conn);
  }

 private:
  std::string name_;
};

}  // namespace cosched::discovery::libvirt_testing

#endif  // COSCHED_TESTS_DISCOVERY_LIBVIRT_TEST_SUPPORT_H_
