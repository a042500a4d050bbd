// gRPC transport shared by csd, cs-agent and csctl: credentials from
// TlsConfig with the "plaintext only on loopback unless --insecure" rule, and
// status conversion between absl and gRPC (the code sets are the same).
#ifndef COSCHED_COMMON_TRANSPORT_H_
#define COSCHED_COMMON_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cosched/v1/config.pb.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/status.h"

namespace cosched {

// csd's Unix socket for callers on its host (csd.yaml local_socket.path).
inline constexpr char kDefaultLocalSocket[] = "/run/cosched/csd.sock";

// True for a gRPC target on a Unix socket: "unix:PATH" or "unix:///PATH".
bool IsUnixTarget(absl::string_view target);

// True for numeric 127.0.0.0/8 and ::1 addresses and for localhost, with
// or without a port (a name such as 127.example.com is not loopback).
bool IsLoopbackAddress(absl::string_view host_port);

// OK for host:port or [IPv6]:port with a port of 0-65535; else
// INVALID_ARGUMENT naming `field` and the rule.
absl::Status ValidateListenAddress(absl::string_view field, absl::string_view listen);

// The most csd addresses a server list may hold.
inline constexpr int kMaxServerAddresses = 16;

// The gRPC targets of a comma-separated list of csd replicas
// ("csd-a:7443,csd-b:7443"; one address is a list of one), trimmed, in
// order. INVALID_ARGUMENT naming `field` for an empty list or entry, a
// repeated entry, or more than kMaxServerAddresses. A DNS name with several
// addresses needs no list: gRPC's resolver tries each of them.
absl::StatusOr<std::vector<std::string>> ParseServerList(absl::string_view field,
                                                         absl::string_view list);

inline constexpr unsigned int kDefaultTlsRefreshSeconds = 60;

// TLS when tls.cert_file is set: tls.ca_file is then required, and client
// certificates are required and verified against it. The three files are
// re-read every tls.refresh_interval_s, so renewed certificates are served
// without a restart. Else plaintext on loopback, or anywhere with
// `insecure`. FAILED_PRECONDITION for plaintext on another address, a
// key or CA without a certificate (never a silent fall back to plaintext),
// a missing CA or an unreadable file; INVALID_ARGUMENT for a bad interval.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    absl::string_view listen, const v1::TlsConfig& tls, bool insecure);

// TLS when tls.ca_file is set (with a client certificate when cert_file and
// key_file are set, re-read like the server's); else plaintext under the
// same rule as above, where a Unix socket target counts as loopback. FAILED_PRECONDITION for a certificate or key without
// a CA, or one of the two without the other.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(absl::string_view target, const v1::TlsConfig& tls,
                       bool insecure);

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace cosched

#endif  // COSCHED_COMMON_TRANSPORT_H_
