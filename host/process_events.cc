#include "host/process_events.h"

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/log_every.h"
#include "glog/logging.h"

namespace cosched::host {

void ParseProcConnectorDatagram(const char* data, size_t length,
                                const ProcessEventListener& listener) {
  size_t remaining = length;
  for (auto* nl = reinterpret_cast<const nlmsghdr*>(data);
       NLMSG_OK(nl, remaining); nl = NLMSG_NEXT(nl, remaining)) {
    if (nl->nlmsg_type == NLMSG_ERROR || nl->nlmsg_type == NLMSG_NOOP) continue;
    if (nl->nlmsg_len < NLMSG_LENGTH(sizeof(cn_msg))) continue;
    const auto* cn = reinterpret_cast<const cn_msg*>(NLMSG_DATA(nl));
    if (cn->id.idx != CN_IDX_PROC || cn->id.val != CN_VAL_PROC) continue;
    if (cn->len < sizeof(proc_event) ||
        nl->nlmsg_len < NLMSG_LENGTH(sizeof(cn_msg) + sizeof(proc_event))) {
      continue;
    }
    proc_event ev;
    std::memcpy(&ev, cn->data, sizeof(ev));
    ProcessEvent out;
    switch (ev.what) {
      case proc_event::PROC_EVENT_FORK:
        out.kind = ProcessEventKind::kFork;
        out.tgid = ev.event_data.fork.child_tgid;
        out.tid = ev.event_data.fork.child_pid;
        out.parent_tgid = ev.event_data.fork.parent_tgid;
        break;
      case proc_event::PROC_EVENT_EXEC:
        out.kind = ProcessEventKind::kExec;
        out.tgid = ev.event_data.exec.process_tgid;
        out.tid = ev.event_data.exec.process_pid;
        break;
      case proc_event::PROC_EVENT_EXIT:
        out.kind = ProcessEventKind::kExit;
        out.tgid = ev.event_data.exit.process_tgid;
        out.tid = ev.event_data.exit.process_pid;
        break;
      case proc_event::PROC_EVENT_COMM: {
        out.kind = ProcessEventKind::kComm;
        out.tgid = ev.event_data.comm.process_tgid;
        out.tid = ev.event_data.comm.process_pid;
        const char* name = ev.event_data.comm.comm;
        out.comm.assign(name, strnlen(name, sizeof(ev.event_data.comm.comm)));
        break;
      }
      default:
        continue;
    }
    listener(out);
  }
}

ProcConnectorEvents::ProcConnectorEvents(ProcessEventStageFactory make_stage)
    : make_stage_(std::move(make_stage)) {}
ProcConnectorEvents::~ProcConnectorEvents() { Stop(); }

std::optional<bool> InInitialPidNamespace(std::string_view ns_link) {
  // include/linux/proc_ns.h: PROC_PID_INIT_INO = 0xEFFFFFFC.
  constexpr uint64_t kInitialPidNamespaceInode = 0xEFFFFFFCu;
  absl::string_view link(ns_link.data(), ns_link.size());
  uint64_t inode = 0;
  if (!absl::ConsumePrefix(&link, "pid:[") || !absl::ConsumeSuffix(&link, "]") ||
      !absl::SimpleAtoi(link, &inode)) {
    return std::nullopt;
  }
  return inode == kInitialPidNamespaceInode;
}

absl::Status ProcConnectorEvents::Start(ProcessEventListener listener) {
  // Subscribing would succeed and nothing would ever arrive: say so.
  char link[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
  if (n > 0 && InInitialPidNamespace(std::string_view(link, n)) == false) {
    return absl::UnavailableError(absl::StrCat(
        "netlink proc connector: this agent runs in a PID namespace other than the initial "
        "one (", absl::string_view(link, n), "), and the kernel sends process events only there"));
  }
  socket_ = socket(PF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_CONNECTOR);
  if (socket_ < 0) {
    return absl::UnavailableError(absl::StrCat(
        "netlink proc connector unavailable: socket: ", std::strerror(errno)));
  }
  sockaddr_nl address{};
  address.nl_family = AF_NETLINK;
  address.nl_groups = CN_IDX_PROC;
  if (bind(socket_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    int err = errno;
    close(socket_);
    socket_ = -1;
    return absl::UnavailableError(absl::StrCat(
        "netlink proc connector unavailable: bind: ", std::strerror(err),
        err == EPERM ? " (needs CAP_NET_ADMIN)" : ""));
  }
  // Room for a burst of a storm's events (each of a process's fork, exec
  // and exit takes about 1 KiB of buffer) while this thread is off a CPU:
  // every overrun costs a full rescan. FORCE goes past net.core.rmem_max
  // with the CAP_NET_ADMIN the connector needs anyway; without it the
  // default stays, which is only more rescans.
  const int buffer_bytes = 4 << 20;
  if (setsockopt(socket_, SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes, sizeof(buffer_bytes)) != 0) {
    (void)setsockopt(socket_, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
  alignas(nlmsghdr) char request[NLMSG_SPACE(sizeof(cn_msg) + sizeof(int))] = {};
  auto* nl = reinterpret_cast<nlmsghdr*>(request);
  nl->nlmsg_len = NLMSG_LENGTH(sizeof(cn_msg) + sizeof(int));
  nl->nlmsg_type = NLMSG_DONE;
  auto* cn = reinterpret_cast<cn_msg*>(NLMSG_DATA(nl));
  cn->id.idx = CN_IDX_PROC;
  cn->id.val = CN_VAL_PROC;
  cn->len = sizeof(int);
  const int op = PROC_CN_MCAST_LISTEN;
  std::memcpy(cn->data, &op, sizeof(op));
  if (send(socket_, request, nl->nlmsg_len, 0) < 0) {
    int err = errno;
    close(socket_);
    socket_ = -1;
    return absl::UnavailableError(absl::StrCat(
        "netlink proc connector: cannot subscribe: ", std::strerror(err)));
  }
  wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this, listener = std::move(listener)] { Run(listener); });
  return absl::OkStatus();
}

void ProcConnectorEvents::Stop() {
  if (wake_ >= 0) {
    uint64_t one = 1;
    (void)!write(wake_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  if (socket_ >= 0) close(socket_);
  if (wake_ >= 0) close(wake_);
  socket_ = wake_ = -1;
}

void ProcConnectorEvents::Run(ProcessEventListener listener) {
  // One proc connector event is under 100 bytes: 2 KiB holds a datagram
  // with room to spare, and a longer one is cut off, which the parser
  // skips safely.
  constexpr int kDatagrams = 64;
  constexpr size_t kDatagramBytes = 2048;
  std::vector<char> buffer(kDatagrams * kDatagramBytes);
  std::vector<iovec> iov(kDatagrams);
  std::vector<mmsghdr> messages(kDatagrams);
  using Clock = ProcessEventStage::Clock;
  const std::unique_ptr<ProcessEventStage> stage = make_stage_ ? make_stage_(listener) : nullptr;
  std::optional<Clock::time_point> next_exec;
  auto now = Clock::now();
  const ProcessEventListener add = stage ? ProcessEventListener([&stage, &now](const ProcessEvent& event) {
    stage->Add(event, now);
  })
                                         : listener;
  pollfd fds[2] = {{socket_, POLLIN, 0}, {wake_, POLLIN, 0}};
  auto until = [](Clock::time_point when) {
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(
        when - Clock::now());
    return static_cast<int>(std::max<int64_t>(0, wait.count()));
  };
  while (true) {
    if (poll(fds, 2, next_exec ? until(*next_exec) : -1) < 0) {
      if (errno == EINTR) continue;
      LOG(ERROR) << "proc connector poll failed: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents) return;
    bool received = false;
    // A bounded number of calls, so that Stop is still seen in a storm. An
    // overrun shows as POLLERR alone, which the receive reports (ENOBUFS)
    // and clears.
    for (int call = 0; call < 64 && fds[0].revents != 0; ++call) {
      for (int i = 0; i < kDatagrams; ++i) {
        iov[i] = {buffer.data() + i * kDatagramBytes, kDatagramBytes};
        messages[i] = {};
        messages[i].msg_hdr.msg_iov = &iov[i];
        messages[i].msg_hdr.msg_iovlen = 1;
      }
      const int n = recvmmsg(socket_, messages.data(), kDatagrams, MSG_DONTWAIT, nullptr);
      if (n < 0) {
        if (errno == ENOBUFS) {
          COSCHED_LOG_EVERY_T(WARNING, 60) << "proc connector dropped events; rescanning";
          ProcessEvent lost;
          lost.kind = ProcessEventKind::kLost;
          listener(lost);
          continue;
        }
        if (errno != EAGAIN && errno != EINTR) {
          LOG(ERROR) << "proc connector recv failed: " << std::strerror(errno);
          return;
        }
        break;
      }
      received = true;
      now = Clock::now();
      for (int i = 0; i < n; ++i) {
        ParseProcConnectorDatagram(static_cast<const char*>(iov[i].iov_base),
                                   std::min<size_t>(messages[i].msg_len, kDatagramBytes), add);
      }
      if (n < kDatagrams) break;
    }
    if (stage) next_exec = stage->Flush(Clock::now());
    // Events keep coming: let the next ones gather (Stop still ends the
    // wait).
    if (received && poll(&fds[1], 1, static_cast<int>(kBatchInterval.count())) > 0) return;
  }
}

}  // namespace cosched::host
