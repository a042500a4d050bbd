#include "agent/process_events.h"

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace cosched::agent {

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
      default:
        continue;
    }
    listener(out);
  }
}

ProcConnectorEvents::~ProcConnectorEvents() { Stop(); }

absl::Status ProcConnectorEvents::Start(ProcessEventListener listener) {
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
  std::vector<char> buffer(64 * 1024);
  pollfd fds[2] = {{socket_, POLLIN, 0}, {wake_, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG(ERROR) << "proc connector poll failed: " << std::strerror(errno);
      return;
    }
    if (fds[1].revents) return;
    ssize_t n = recv(socket_, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == ENOBUFS) {
        LOG_EVERY_T(WARNING, 60) << "proc connector dropped events; rescanning";
        listener(ProcessEvent{ProcessEventKind::kLost, 0, 0, 0});
      } else if (errno != EAGAIN && errno != EINTR) {
        LOG(ERROR) << "proc connector recv failed: " << std::strerror(errno);
        return;
      }
      continue;
    }
    ParseProcConnectorDatagram(buffer.data(), static_cast<size_t>(n), listener);
  }
}

}  // namespace cosched::agent
