#include "server/api/local_peers.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

namespace cosched::server {

std::optional<int> HandedOverDescriptor(absl::string_view grpc_peer) {
  if (!absl::ConsumePrefix(&grpc_peer, "fd:")) return std::nullopt;
  int fd = -1;
  if (grpc_peer.empty() || !absl::SimpleAtoi(grpc_peer, &fd) || fd < 0) return std::nullopt;
  return fd;
}

void LocalPeerTable::Record(int fd, LocalCredentials credentials) {
  std::lock_guard<std::mutex> lock(mu_);
  by_fd_[fd] = std::move(credentials);
}

std::optional<LocalCredentials> LocalPeerTable::Find(absl::string_view grpc_peer) const {
  std::optional<int> fd = HandedOverDescriptor(grpc_peer);
  if (!fd.has_value()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_fd_.find(*fd);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second;
}

}  // namespace cosched::server
