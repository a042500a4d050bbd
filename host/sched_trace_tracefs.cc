// SchedTrace over the kernel's tracefs.
//
// The clock is `mono`: like `global` it is consistent across CPUs (which
// the per-core merge needs, docs/architecture.md), and unlike `global` it is
// CLOCK_MONOTONIC, which userspace reads too. So "now" in the trace's own
// clock (the watermark up to which every buffer is complete) is one
// clock_gettime, and windows map to wall-clock time by one offset.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "host/sched_trace.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace cosched::host {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::Status WriteControl(const std::string& path, absl::string_view value) {
  int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  ssize_t n;
  do {
    n = write(fd, value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  close(fd);
  if (n < 0) return ErrnoStatus(err, absl::StrCat("cannot write \"", value, "\" to"), path);
  return absl::OkStatus();
}

int64_t ClockNs(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class TracefsSchedTrace : public SchedTrace {
 public:
  TracefsSchedTrace(std::string root, std::string instance, std::string procfs_root)
      : root_(std::move(root)), instance_name_(std::move(instance)),
        procfs_root_(std::move(procfs_root)) {}
  ~TracefsSchedTrace() override { Stop(); }

  absl::StatusOr<SchedTraceFormat> Start(const SchedTraceOptions& options) override {
    if (!instance_.empty()) return absl::FailedPreconditionError("trace already started");
    ASSIGN_OR_RETURN(std::string tracefs, FindTracefs());
    SchedTraceFormat format;
    ASSIGN_OR_RETURN(format.sched_switch_format,
                     ReadFileToString(tracefs + "/events/sched/sched_switch/format"));
    ASSIGN_OR_RETURN(format.header_page, ReadFileToString(tracefs + "/events/header_page"));
    RETURN_IF_ERROR(MakeInstance(tracefs));
    absl::Status configured = Configure(options, &format);
    if (!configured.ok()) {
      Stop();
      return configured;
    }
    return format;
  }

  absl::StatusOr<size_t> ReadPage(int cpu, std::span<uint8_t> page) override {
    if (cpu < 0 || static_cast<size_t>(cpu) >= fds_.size())
      return absl::InvalidArgumentError(absl::StrCat("no trace buffer of cpu ", cpu));
    if (fds_[cpu] < 0) return 0;  // an impossible CPU's buffer: never written
    while (true) {
      ssize_t n = read(fds_[cpu], page.data(), page.size());
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return 0;
      return ErrnoStatus(errno, "cannot read",
                         absl::StrCat(instance_, "/per_cpu/cpu", cpu, "/trace_pipe_raw"));
    }
  }

  int64_t NowNs() const override { return ClockNs(CLOCK_MONOTONIC); }
  int64_t UnixOffsetNs() const override {
    return ClockNs(CLOCK_REALTIME) - ClockNs(CLOCK_MONOTONIC);
  }

  void Stop() override {
    for (int fd : fds_)
      if (fd >= 0) close(fd);
    fds_.clear();
    if (instance_.empty()) return;
    // Removing the instance frees its buffers and turns its events off.
    if (rmdir(instance_.c_str()) != 0)
      LOG(WARNING) << ErrnoStatus(errno, "cannot remove trace instance", instance_);
    instance_.clear();
  }

  absl::Status EnableSchedstats() override {
    return WriteControl(procfs_root_ + "/sys/kernel/sched_schedstats", "1");
  }

 private:
  // Where tracefs is: `root_` (mounted there when it is not yet), else the
  // old place under debugfs.
  absl::StatusOr<std::string> FindTracefs() {
    if (IsDirectory(root_ + "/instances")) return root_;
    std::string mount_error = "does not exist";
    if (IsDirectory(root_)) {
      if (mount("tracefs", root_.c_str(), "tracefs", 0, nullptr) == 0) {
        LOG(INFO) << "mounted tracefs on " << root_;
        if (IsDirectory(root_ + "/instances")) return root_;
        mount_error = "has no instances/ after mounting tracefs";
      } else {
        const int err = errno;
        mount_error = absl::StrCat("is not tracefs, and mounting it failed: ", strerror(err));
        if (err == EPERM || err == EACCES)
          return absl::PermissionDeniedError(absl::StrCat(root_, " ", mount_error));
      }
    }
    const std::string debugfs = "/sys/kernel/debug/tracing";
    if (IsDirectory(debugfs + "/instances")) return debugfs;
    return absl::NotFoundError(absl::StrCat("no tracefs: ", root_, " ", mount_error, ", and ",
                                            debugfs, " has no instances/"));
  }

  absl::Status MakeInstance(const std::string& tracefs) {
    const std::string path = absl::StrCat(tracefs, "/instances/", instance_name_);
    if (mkdir(path.c_str(), 0700) != 0) {
      if (errno != EEXIST) return ErrnoStatus(errno, "cannot create trace instance", path);
      // Left by an agent that died: its readers are gone, so it can go. A
      // live one keeps its buffers open and rmdir says EBUSY.
      if (rmdir(path.c_str()) != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "trace instance ", path, " exists and cannot be removed (", strerror(errno),
            "): is another cs-agent running?"));
      }
      if (mkdir(path.c_str(), 0700) != 0)
        return ErrnoStatus(errno, "cannot create trace instance", path);
    }
    instance_ = path;
    return absl::OkStatus();
  }

  absl::Status Configure(const SchedTraceOptions& options, SchedTraceFormat* format) {
    if (options.buffer_size_kb <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat("buffer_size_kb must be positive, got ", options.buffer_size_kb));
    if (options.subbuf_size_kb < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("subbuf_size_kb must not be negative, got ", options.subbuf_size_kb));
    // Before the buffer's size, which the kernel rounds to whole sub-buffers.
    const std::string subbuf_path = instance_ + "/buffer_subbuf_size_kb";
    if (options.subbuf_size_kb > 0) {
      if (access(subbuf_path.c_str(), F_OK) == 0) {
        // A tuning, not a need: a kernel that refuses it (seen: EPERM on
        // 6.18) keeps its own size, which is read back below.
        absl::Status sized = WriteControl(subbuf_path, absl::StrCat(options.subbuf_size_kb));
        LOG_IF(WARNING, !sized.ok())
            << "ring-buffer sub-buffers of " << options.subbuf_size_kb
            << " KiB refused, the kernel's size is kept: " << sized.message();
      } else {
        LOG(INFO) << "this kernel cannot size ring-buffer sub-buffers (no " << subbuf_path
                  << "); they stay one page";
      }
    }
    RETURN_IF_ERROR(WriteControl(instance_ + "/buffer_size_kb",
                                 absl::StrCat(options.buffer_size_kb)));
    RETURN_IF_ERROR(WriteControl(instance_ + "/trace_clock", "mono"));
    RETURN_IF_ERROR(WriteControl(instance_ + "/events/sched/sched_switch/enable", "1"));
    RETURN_IF_ERROR(WriteControl(instance_ + "/tracing_on", "1"));

    format->page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    // Kernels since 6.8 can make sub-buffers larger than a page; a read of
    // trace_pipe_raw returns one sub-buffer.
    absl::StatusOr<std::string> subbuf = ReadFileToString(subbuf_path);
    size_t kb = 0;
    if (subbuf.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*subbuf), &kb) && kb > 0)
      format->page_size = kb * 1024;

    // per_cpu/ lists every possible CPU.
    int num_cpus = 0;
    while (IsDirectory(absl::StrCat(instance_, "/per_cpu/cpu", num_cpus))) ++num_cpus;
    if (num_cpus == 0)
      return absl::NotFoundError(absl::StrCat(instance_, "/per_cpu has no cpu0"));
    format->num_cpus = num_cpus;
    fds_.assign(num_cpus, -1);
    for (int cpu = 0; cpu < num_cpus; ++cpu) {
      const std::string pipe = absl::StrCat(instance_, "/per_cpu/cpu", cpu, "/trace_pipe_raw");
      fds_[cpu] = open(pipe.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      if (fds_[cpu] < 0) return ErrnoStatus(errno, "cannot open", pipe);
    }
    return absl::OkStatus();
  }

  const std::string root_;
  const std::string instance_name_;
  const std::string procfs_root_;
  std::string instance_;  // its path while started
  std::vector<int> fds_;  // per CPU
};

}  // namespace

std::unique_ptr<SchedTrace> MakeTracefsSchedTrace(std::string tracefs_root,
                                                  std::string instance_name,
                                                  std::string procfs_root) {
  return std::make_unique<TracefsSchedTrace>(std::move(tracefs_root), std::move(instance_name),
                                             std::move(procfs_root));
}

}  // namespace cosched::host
