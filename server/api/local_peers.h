// Who is on the other end of each connection csd accepted on its Unix
// socket. gRPC 1.51 tells a service nothing about a Unix peer, so csd
// accepts those connections itself (server/api/local_socket.h), reads the
// kernel's credentials of the peer, records them here under the connection's
// descriptor and then hands the descriptor to gRPC, whose peer string for
// such a connection is "fd:<descriptor>". The authorizer looks the caller
// up here by that string.
#ifndef COSCHED_SERVER_API_LOCAL_PEERS_H_
#define COSCHED_SERVER_API_LOCAL_PEERS_H_

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/strings/string_view.h"

namespace cosched::server {

// What the kernel says about a process connected to a Unix socket, as of
// its connect(): SO_PEERCRED and SO_PEERGROUPS.
struct LocalCredentials {
  uint32_t uid = 0;
  uint32_t gid = 0;
  int32_t pid = 0;
  // Supplementary groups.
  std::vector<uint32_t> groups;
};

// The descriptor of a gRPC peer string of a handed-over connection
// ("fd:12" -> 12); nullopt for any other peer ("ipv4:...", "unix:...").
std::optional<int> HandedOverDescriptor(absl::string_view grpc_peer);

// Descriptor -> credentials. Thread-safe.
//
// Entries are overwritten, never erased, and that is sound: a descriptor
// is recorded before gRPC sees it, and gRPC closes it only when the
// connection's transport is destroyed, which no call in progress allows
// (a call holds its transport). So while any call runs on a connection,
// its descriptor cannot be reused and its entry cannot change; once the
// connection is gone, the next connection given that number overwrites the
// entry before it is handed over. A stale entry is never read: only
// handed-over connections have "fd:" peers. The table holds at most one
// entry per descriptor number the process ever used (bounded by
// RLIMIT_NOFILE).
class LocalPeerTable {
 public:
  void Record(int fd, LocalCredentials credentials);
  // The credentials of the connection whose gRPC peer string is
  // `grpc_peer`; nullopt when it is not a handed-over connection csd knows.
  std::optional<LocalCredentials> Find(absl::string_view grpc_peer) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<int, LocalCredentials> by_fd_;  // guarded by mu_
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_API_LOCAL_PEERS_H_
