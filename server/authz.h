// Who is calling csd and what they may do. An agent is the host named in its
// certificate's SPIFFE id (spiffe://<trust-domain>/host/<host-id>) and may
// act only for that host. A ControlPlane caller has a role (viewer <
// operator < admin) mapped from its certificate's URI SAN or common name, or
// from a bearer token. Plaintext callers (loopback, or anywhere when csd runs
// with `insecure`) get `plaintext_role` and may act for any host.
#ifndef COSCHED_SERVER_AUTHZ_H_
#define COSCHED_SERVER_AUTHZ_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/config.pb.h"
#include "grpcpp/server_context.h"

namespace cosched::server {

enum class Role { kNone = 0, kViewer = 1, kOperator = 2, kAdmin = 3 };

// "none", "viewer", "operator", "admin".
absl::string_view RoleName(Role role);
// INVALID_ARGUMENT naming `field` for anything but the four names.
absl::StatusOr<Role> ParseRole(absl::string_view field, absl::string_view name);

// What the transport says about a caller.
struct Peer {
  // A client certificate was presented and verified (mTLS).
  bool verified_certificate = false;
  std::vector<std::string> uri_sans;
  std::string common_name;
  // gRPC's peer string, e.g. "ipv4:127.0.0.1:41000".
  std::string address;
  // From "authorization: Bearer <token>" metadata.
  std::optional<std::string> bearer_token;
};

// The caller as authorization sees it.
struct Caller {
  // For audit records and logs: the SPIFFE id, "cn:<common name>",
  // "token:<name>" or "plaintext:<peer address>".
  std::string who;
  Role role = Role::kNone;
  // From a host SPIFFE id of the trust domain; empty for other callers.
  std::string host_id;
  // Plaintext callers are trusted for every host.
  bool any_host = false;
};

struct AuthzOptions {
  std::string trust_domain = "cosched";
  // Role of plaintext callers; "none" refuses them (UNAUTHENTICATED).
  std::string plaintext_role = "admin";
  std::vector<v1::RoleBinding> roles;
  std::vector<v1::TokenBinding> tokens;
};

// Fills options from csd's config; unset fields keep the defaults.
AuthzOptions AuthzOptionsFromConfig(const v1::CsdConfig& config);

// The role a ControlPlane method needs: viewer for reads (ExplainVM
// included), operator for TagVM/UntagVM and Place (a what-if, but it ranks
// the whole fleet: it is for those who place VMs), admin for SetTenantPolicy and any method not listed
// (a new method is closed until it is classified here).
Role RequiredRole(absl::string_view method);

// Immutable after Create; thread-safe.
class Authorizer {
 public:
  // INVALID_ARGUMENT naming the config key for an unknown role, a token hash
  // that is not 64 lower-case hex digits, an empty or malformed trust
  // domain, or an identity or token bound twice.
  static absl::StatusOr<Authorizer> Create(const AuthzOptions& options);

  // UNAUTHENTICATED for an unknown bearer token, a token sent in plaintext
  // from off loopback, or a plaintext caller when plaintext_role is none.
  absl::StatusOr<Caller> Identify(const Peer& peer) const;

  // PERMISSION_DENIED (naming the caller, its role and the role needed)
  // unless the caller may call ControlPlane `method`.
  static absl::Status AllowControlPlane(const Caller& caller,
                                        absl::string_view method);
  // PERMISSION_DENIED (naming both ids) unless the caller is host `host_id`
  // or a plaintext caller.
  static absl::Status AllowHost(const Caller& caller,
                                absl::string_view host_id);

  // Identify and AllowControlPlane / AllowHost on a gRPC call.
  absl::StatusOr<Caller> ForControlPlane(const grpc::ServerContextBase& context,
                                         absl::string_view method) const;
  absl::StatusOr<Caller> ForHost(const grpc::ServerContextBase& context,
                                 absl::string_view host_id) const;

 private:
  Authorizer() = default;

  std::string host_prefix_;  // "spiffe://<trust-domain>/host/"
  Role plaintext_role_ = Role::kAdmin;
  std::map<std::string, Role> by_spiffe_id_;
  std::map<std::string, Role> by_common_name_;
  struct Token {
    Role role;
    std::string name;
  };
  std::map<std::string, Token> by_token_sha256_;
};

// The peer of a gRPC call: its verified certificate's identities, address
// and bearer token.
Peer PeerFromContext(const grpc::ServerContextBase& context);

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(absl::string_view data);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_AUTHZ_H_
