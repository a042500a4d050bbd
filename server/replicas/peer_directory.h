// The other csd replicas on the etcd prefix, as one replica reaches them
// (issue #16): the list registered under <prefix>/replicas/ (read again at
// most every list_for; the last one stands while etcd cannot be read) and
// one gRPC channel per address, dialled with csd's own TLS identity. What
// GetStats gathers (server/replicas/peer_stats.h) and the stats forwarded to the
// leader (server/replicas/stats_forwarder.h) both go through it.
#ifndef COSCHED_SERVER_REPLICAS_PEER_DIRECTORY_H_
#define COSCHED_SERVER_REPLICAS_PEER_DIRECTORY_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosched/store/etcd_records.pb.h"
#include "cosched/v1/config.pb.h"
#include "grpcpp/channel.h"

namespace cosched::server {

struct PeerDirectoryOptions {
  // This replica's name.
  std::string self;
  // How peers are dialled: csd's own TLS settings, its certificate as the
  // client's (so it needs the clientAuth usage, and a role binding on the
  // peers), or plaintext on loopback or with `insecure`.
  v1::TlsConfig tls;
  bool insecure = false;
  // How long a list of the replicas is used before it is read again.
  absl::Duration list_for = absl::Seconds(5);
};

// Thread-safe.
class PeerDirectory {
 public:
  // Lists the replicas registered on the store (EtcdReplicas::List).
  using Lister = std::function<absl::StatusOr<std::vector<store::EtcdReplica>>()>;

  PeerDirectory(Lister lister, PeerDirectoryOptions options);

  const PeerDirectoryOptions& options() const { return options_; }

  // The replicas registered (this one included), from a list at most
  // list_for old, or the last one when etcd cannot be read (logged); the
  // error when none was ever read. `fresh` reads the list now.
  absl::StatusOr<std::vector<store::EtcdReplica>> Replicas(bool fresh = false);
  // The address `leader` registered, from the list or, when the list does
  // not name it yet (a leader newer than the list), from one read now;
  // FAILED_PRECONDITION when it registered none, UNAVAILABLE when it is not
  // registered.
  absl::StatusOr<std::string> LeaderAddress(const std::string& leader);
  // The channel to `address`, made once; channels to addresses no longer
  // registered are let go when the list is read again.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ChannelTo(const std::string& address);

 private:
  const Lister lister_;
  const PeerDirectoryOptions options_;
  std::mutex mu_;
  std::vector<store::EtcdReplica> replicas_;                        // guarded by mu_
  absl::Time listed_at_ = absl::InfinitePast();                     // guarded by mu_
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;  // guarded by mu_
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_REPLICAS_PEER_DIRECTORY_H_
