// What a csd replica on etcd can check of its own certificate at start:
// it presents tls.cert_file when it dials the other replicas (Stats
// forwarding to the leader, GetStats, explain and plan on the leader), so
// the certificate must allow client authentication, and the identity it
// carries must have the operator role (ForwardStats) under csd.yaml's
// roles, which the replicas share (issue #37 item 3).
#ifndef COSCHED_SERVER_API_REPLICA_IDENTITY_H_
#define COSCHED_SERVER_API_REPLICA_IDENTITY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cosched/v1/config.pb.h"
#include "server/api/authz.h"

namespace cosched::server {

// The first certificate of a PEM file, as a peer would see it.
struct CertificateIdentity {
  std::vector<std::string> uri_sans;
  std::string common_name;
  // No extended key usage (any use), or one that lists clientAuth or
  // anyExtendedKeyUsage.
  bool client_auth = false;
};

// NOT_FOUND / INVALID_ARGUMENT naming `path` when it cannot be read or
// holds no certificate.
absl::StatusOr<CertificateIdentity> ReadCertificateIdentity(const std::string& path);

// OK without tls.cert_file (plaintext on loopback). FAILED_PRECONDITION
// naming tls.cert_file when its certificate does not allow client
// authentication, or naming `roles` when the identity it carries gets less
// than operator under `authz`.
absl::Status CheckReplicaIdentity(const v1::TlsConfig& tls, const AuthzOptions& authz);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_API_REPLICA_IDENTITY_H_
