#include "server/replicas/peer_status.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "server/replicas/peer_calls.h"

namespace cosched::server {

void PeerStatus::Gather(v1::ReplicaStatus self, std::function<void(v1::GetStatusResponse)> done) {
  v1::GetStatusRequest local_only;
  local_only.set_local_only(true);
  AskPeers<v1::GetStatusRequest, v1::GetStatusResponse>(
      peers_, local_only, timeout_,
      [](auto* async, grpc::ClientContext* context, const v1::GetStatusRequest* request,
         v1::GetStatusResponse* response, std::function<void(grpc::Status)> callback) {
        async->GetStatus(context, request, response, std::move(callback));
      },
      [self = std::move(self),
       done = std::move(done)](std::vector<PeerAnswer<v1::GetStatusResponse>> answers) {
        std::vector<v1::ReplicaStatus> others;
        for (PeerAnswer<v1::GetStatusResponse>& a : answers) {
          v1::ReplicaStatus status;
          if (a.answer.ok() && a.answer->replicas_size() > 0) {
            status = a.answer->replicas(0);
          } else {
            status.set_unreachable(a.answer.ok() ? "it answered with no status"
                                                 : std::string(a.answer.status().message()));
          }
          // What etcd says of it, whatever it says of itself: the name
          // and address it is reached at.
          status.set_name(a.replica);
          status.set_address(a.address);
          others.push_back(std::move(status));
        }
        std::sort(others.begin(), others.end(),
                  [](const v1::ReplicaStatus& a, const v1::ReplicaStatus& b) {
                    return a.name() < b.name();
                  });
        v1::GetStatusResponse response;
        *response.add_replicas() = self;
        for (v1::ReplicaStatus& s : others) *response.add_replicas() = std::move(s);
        done(std::move(response));
      });
}

}  // namespace cosched::server
