#include "server/replicas/peer_directory.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "glog/logging.h"
#include "grpcpp/create_channel.h"

namespace cosched::server {

PeerDirectory::PeerDirectory(Lister lister, PeerDirectoryOptions options)
    : lister_(std::move(lister)), options_(std::move(options)) {}

absl::StatusOr<std::vector<store::EtcdReplica>> PeerDirectory::Replicas(bool fresh) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fresh && absl::Now() - listed_at_ < options_.list_for) return replicas_;
  }
  absl::StatusOr<std::vector<store::EtcdReplica>> listed = lister_();
  std::lock_guard<std::mutex> lock(mu_);
  if (!listed.ok()) {
    // etcd away: the replicas last listed are the best there is (they
    // answer from memory too); none listed yet is the error.
    if (listed_at_ == absl::InfinitePast()) return listed.status();
    LOG_EVERY_N(WARNING, 100) << "the csd replicas registered in etcd could not be listed "
                                 "again; using those listed "
                              << absl::FormatDuration(absl::Now() - listed_at_)
                              << " ago: " << listed.status();
    return replicas_;
  }
  replicas_ = std::move(*listed);
  listed_at_ = absl::Now();
  for (auto it = channels_.begin(); it != channels_.end();) {
    const bool listed_now = std::any_of(replicas_.begin(), replicas_.end(), [&](const auto& r) {
      return r.address() == it->first;
    });
    it = listed_now ? std::next(it) : channels_.erase(it);
  }
  return replicas_;
}

absl::StatusOr<std::string> PeerDirectory::LeaderAddress(const std::string& leader) {
  for (bool fresh : {false, true}) {
    ASSIGN_OR_RETURN(std::vector<store::EtcdReplica> replicas, Replicas(fresh));
    for (const store::EtcdReplica& replica : replicas) {
      if (replica.name() != leader) continue;
      if (replica.address().empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the leader ", leader, " registered no address (store.etcd.advertise_address)"));
      }
      return replica.address();
    }
    // A leader newer than the list: read it again, once.
  }
  return absl::UnavailableError(absl::StrCat("the leader ", leader, " is not registered"));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> PeerDirectory::ChannelTo(
    const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(address, options_.tls, options_.insecure);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(address, *credentials);
  channels_[address] = channel;
  return channel;
}

}  // namespace cosched::server
