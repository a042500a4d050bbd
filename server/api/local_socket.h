// csd's Unix socket for callers on its own host (csctl as root or as a
// member of the socket's group). gRPC 1.51 tells a service nothing about a
// Unix peer, so csd accepts these connections itself on a thread of its
// own, records each peer's kernel credentials (SO_PEERCRED, SO_PEERGROUPS)
// in a LocalPeerTable, and only then hands the connection to the gRPC
// server (grpc::AddInsecureChannelFromFd); the authorizer finds the
// credentials by the call's peer string ("fd:N"). See local_peers.h for why
// the table stays right as descriptors are reused.
#ifndef COSCHED_SERVER_API_LOCAL_SOCKET_H_
#define COSCHED_SERVER_API_LOCAL_SOCKET_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server.h"
#include "server/api/local_peers.h"

namespace cosched::server {

inline constexpr char kDefaultSocketGroup[] = "cosched";
inline constexpr char kDefaultSocketMode[] = "0660";
// csd binds "<path>.<pid>" first and renames it into place, so the path
// leaves room for that in sun_path's 108 bytes.
inline constexpr size_t kMaxSocketPathLength = 90;

struct LocalSocketOptions {
  // Absolute path; empty: no socket.
  std::string path;
  // False for the default path: a socket that cannot be served is logged
  // and csd serves without it. True when the operator named the path: it
  // must work.
  bool required = false;
  // Group of the socket, a name or a gid; empty: kDefaultSocketGroup when
  // the host has that group, else none (the group bits of mode are
  // cleared, leaving the owner and root).
  std::string group;
  // Octal permission bits.
  std::string mode = kDefaultSocketMode;
};

// "0660" -> 0660: 3 or 4 octal digits, at most 0777, owner read and write.
// INVALID_ARGUMENT naming local_socket.mode and the rule.
absl::StatusOr<uint32_t> ParseSocketMode(absl::string_view mode);

// INVALID_ARGUMENT naming local_socket.path, local_socket.mode or
// local_socket.group and the rule: a path that is not absolute or too
// long, a bad mode, a group the host does not have or whose database
// cannot be read.
absl::Status ValidateLocalSocketOptions(const LocalSocketOptions& options);

// Thread-safe. Stop() (or the destructor) stops accepting and removes the
// socket file if it is still this server's; connections already handed to
// gRPC stay with it.
class LocalSocketServer {
 public:
  // Makes the socket (creating its directory, mode 0755, when missing),
  // owned by csd's user and the group, with the mode, and starts accepting
  // for `server`, which must be started and outlive this. A stale socket of
  // a csd that died is replaced. FAILED_PRECONDITION when the path is
  // something other than a socket or another process serves it;
  // UNAVAILABLE naming the path when the socket cannot be made (directory,
  // bind, chown, chmod). `peers` must outlive this.
  static absl::StatusOr<std::unique_ptr<LocalSocketServer>> Start(
      const LocalSocketOptions& options, grpc::Server* server, LocalPeerTable* peers);
  ~LocalSocketServer();

  void Stop();
  const std::string& path() const { return path_; }

 private:
  LocalSocketServer() = default;
  void AcceptLoop();
  // Reads the peer's credentials; false when the kernel gives none.
  static bool ReadCredentials(int fd, LocalCredentials* credentials);

  std::string path_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: Stop() wakes the accept loop through it
  dev_t device_ = 0;
  ino_t inode_ = 0;
  grpc::Server* server_ = nullptr;
  LocalPeerTable* peers_ = nullptr;
  std::thread thread_;
  std::once_flag stop_once_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_API_LOCAL_SOCKET_H_
