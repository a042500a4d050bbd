#include "server/api/local_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log_every.h"
#include "common/thread_name.h"
#include "glog/logging.h"
#include "grpcpp/server_posix.h"
#include "server/api/unix_accounts.h"

namespace cosched::server {
namespace {

std::string Errno(int err) { return std::strerror(err); }

sockaddr_un UnixAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // Validated: the path and the ".<pid>" beside it fit.
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  return address;
}

// True when a process accepts connections on `path`.
bool IsServed(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un address = UnixAddress(path);
  bool served = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return served;
}

// The gid to give the socket; nullopt for none. Only the default group may
// be missing: a group the operator named was checked to exist.
absl::StatusOr<std::optional<uint32_t>> SocketGroup(const LocalSocketOptions& options) {
  if (!options.group.empty()) {
    absl::StatusOr<uint32_t> gid = ResolveUnixGroup("local_socket.group", options.group);
    if (!gid.ok()) return gid.status();
    return std::optional<uint32_t>(*gid);
  }
  absl::StatusOr<uint32_t> gid = LookUpGroupName("local_socket.group", kDefaultSocketGroup);
  if (gid.ok()) return std::optional<uint32_t>(*gid);
  LOG(WARNING) << "local socket " << options.path << ": no group '" << kDefaultSocketGroup
               << "' (" << gid.status().message()
               << "): only its owner and root may connect; create the group "
                  "or set local_socket.group";
  return std::optional<uint32_t>();
}

}  // namespace

absl::StatusOr<uint32_t> ParseSocketMode(absl::string_view mode) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local_socket.mode '", mode, "' must be 3 or 4 octal digits such as 0660 (default), at "
        "most 0777, giving the owner read and write: ", why));
  };
  if (mode.size() < 3 || mode.size() > 4) return bad("wrong length");
  uint32_t bits = 0;
  for (char c : mode) {
    if (c < '0' || c > '7') return bad(absl::StrCat("'", std::string(1, c), "' is not octal"));
    bits = bits * 8 + static_cast<uint32_t>(c - '0');
  }
  if (bits > 0777) return bad("setuid, setgid and sticky bits have no meaning on a socket");
  if ((bits & 0600) != 0600) return bad("the owner (csd) lacks read or write");
  return bits;
}

absl::Status ValidateLocalSocketOptions(const LocalSocketOptions& options) {
  // Mode and group are checked without a path too: a bad value is refused
  // even while the socket is off.
  const std::string& path = options.path;
  if (!path.empty() && (path[0] != '/' || path.back() == '/' ||
                        absl::StrContains(path, std::string(1, '\0')))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local_socket.path '", path,
        "' must be an absolute file path such as /run/cosched/csd.sock, or off"));
  }
  if (path.size() > kMaxSocketPathLength) {
    return absl::InvalidArgumentError(absl::StrCat("local_socket.path '", path, "' is ",
                                                   path.size(), " bytes: at most ",
                                                   kMaxSocketPathLength, " fit a Unix socket"));
  }
  absl::StatusOr<uint32_t> mode = ParseSocketMode(options.mode);
  if (!mode.ok()) return mode.status();
  if (!options.group.empty()) {
    absl::StatusOr<uint32_t> gid = ResolveUnixGroup("local_socket.group", options.group);
    if (!gid.ok()) return gid.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LocalSocketServer>> LocalSocketServer::Start(
    const LocalSocketOptions& options, grpc::Server* server, LocalPeerTable* peers) {
  if (absl::Status valid = ValidateLocalSocketOptions(options); !valid.ok()) return valid;
  const std::string& path = options.path;
  auto fail = [&](absl::string_view what, int err) {
    return absl::UnavailableError(absl::StrCat("local_socket.path '", path, "': ", what, ": ",
                                               Errno(err)));
  };
  absl::StatusOr<uint32_t> mode = ParseSocketMode(options.mode);
  if (!mode.ok()) return mode.status();
  absl::StatusOr<std::optional<uint32_t>> gid = SocketGroup(options);
  if (!gid.ok()) return gid.status();

  const std::string dir = path.substr(0, std::max<size_t>(path.rfind('/'), 1));
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return fail(absl::StrCat("cannot create its directory ", dir), errno);
  }
  struct stat existing {};
  if (lstat(path.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "local_socket.path '", path, "' exists and is not a socket: csd replaces only a "
          "socket (of a csd that stopped); remove it or choose another path"));
    }
    if (IsServed(path)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "local_socket.path '", path, "' is served by another process (another csd?)"));
    }
  }

  std::unique_ptr<LocalSocketServer> local(new LocalSocketServer());
  local->path_ = path;
  local->server_ = server;
  local->peers_ = peers;
  local->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (local->listen_fd_ < 0) return fail("socket", errno);
  // Made under a name of its own and renamed into place: the path is never
  // there with the wrong owner or mode, and a stale socket is replaced in
  // one step.
  const std::string fresh = absl::StrCat(path, ".", getpid());
  unlink(fresh.c_str());
  sockaddr_un address = UnixAddress(fresh);
  if (bind(local->listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return fail("bind", errno);
  }
  uint32_t bits = *mode;
  if (gid->has_value() && chown(fresh.c_str(), static_cast<uid_t>(-1), **gid) != 0) {
    const int err = errno;
    if (!options.group.empty()) {
      unlink(fresh.c_str());
      return fail(absl::StrCat("cannot give it group ", options.group,
                               " (csd must be root or a member of the group)"),
                  err);
    }
    LOG(WARNING) << "local socket " << path << ": cannot give it group " << kDefaultSocketGroup
                 << " (" << Errno(err) << "): only its owner and root may connect";
    gid->reset();
  }
  if (!gid->has_value()) bits &= ~0070u;
  if (chmod(fresh.c_str(), bits) != 0 || listen(local->listen_fd_, 128) != 0 ||
      rename(fresh.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(fresh.c_str());
    return fail("cannot set its mode, listen or rename it into place", err);
  }
  struct stat made {};
  if (stat(path.c_str(), &made) == 0) {
    local->device_ = made.st_dev;
    local->inode_ = made.st_ino;
  }
  local->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (local->wake_fd_ < 0) return fail("eventfd", errno);
  local->thread_ = NamedThread("cs-local", [raw = local.get()] { raw->AcceptLoop(); });
  LOG(INFO) << "csd serving local callers on unix:" << path << " (mode 0" << std::oct << bits
            << std::dec << (gid->has_value() ? absl::StrCat(", gid ", **gid) : ", no group")
            << ")";
  return local;
}

bool LocalSocketServer::ReadCredentials(int fd, LocalCredentials* credentials) {
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0 || length != sizeof(cred)) {
    return false;
  }
  credentials->uid = cred.uid;
  credentials->gid = cred.gid;
  credentials->pid = cred.pid;
  // SO_PEERGROUPS (Linux 4.13): ERANGE tells the size it needs. Without it
  // only the primary group counts, which fails closed (fewer roles).
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 3; ++attempt) {
    socklen_t size = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &size) == 0) {
      groups.resize(size / sizeof(gid_t));
      credentials->groups.assign(groups.begin(), groups.end());
      return true;
    }
    if (errno != ERANGE) break;
    groups.resize(size / sizeof(gid_t) + 1);
  }
  COSCHED_LOG_EVERY_T(WARNING, 60) << "local socket: no supplementary groups of pid " << cred.pid
                           << ": " << Errno(errno) << "; only its primary group counts";
  return true;
}

void LocalSocketServer::AcceptLoop() {
  // Out of descriptors or memory: wait a little instead of spinning, but
  // wake for Stop(). False when stopped.
  auto pause = [this] {
    pollfd wake = {wake_fd_, POLLIN, 0};
    return poll(&wake, 1, 100) <= 0;
  };
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      COSCHED_LOG_EVERY_T(ERROR, 10) << "local socket " << path_ << ": poll: " << Errno(errno);
      if (!pause()) return;
      continue;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED) continue;
      COSCHED_LOG_EVERY_T(ERROR, 10) << "local socket " << path_ << ": accept: " << Errno(err);
      if (!pause()) return;
      continue;
    }
    LocalCredentials credentials;
    if (!ReadCredentials(fd, &credentials)) {
      COSCHED_LOG_EVERY_T(WARNING, 10) << "local socket " << path_
                               << ": connection without credentials refused: " << Errno(errno);
      close(fd);
      continue;
    }
    // Recorded before gRPC can read a byte of the connection.
    peers_->Record(fd, std::move(credentials));
    grpc::AddInsecureChannelFromFd(server_, fd);
  }
}

void LocalSocketServer::Stop() {
  std::call_once(stop_once_, [this] {
    if (thread_.joinable()) {
      uint64_t one = 1;
      if (write(wake_fd_, &one, sizeof(one)) != sizeof(one)) {
        LOG(ERROR) << "local socket " << path_ << ": cannot wake the accept loop: "
                   << Errno(errno);
      }
      thread_.join();
    }
    // Only our own socket: a csd started since may have replaced it.
    struct stat now {};
    if (lstat(path_.c_str(), &now) == 0 && now.st_dev == device_ && now.st_ino == inode_) {
      unlink(path_.c_str());
    }
    if (listen_fd_ >= 0) close(listen_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
    listen_fd_ = wake_fd_ = -1;
  });
}

LocalSocketServer::~LocalSocketServer() { Stop(); }

}  // namespace cosched::server
