// Who is calling csd and what they may do. An agent is the host named in its
// certificate's SPIFFE id (spiffe://<trust-domain>/host/<host-id>) and may
// act only for that host. A ControlPlane caller has a role (viewer <
// operator < admin) mapped from its certificate's URI SAN or common name, or
// from a bearer token, or, on csd's Unix socket, from the caller's uid and
// groups as the kernel gives them (root is admin and may act for any host).
// Plaintext TCP callers (loopback, or anywhere when csd runs with
// `insecure`) may be any process: they get `plaintext_role` (viewer by
// default) and act for hosts only with `plaintext_agents`.
#ifndef COSCHED_SERVER_API_AUTHZ_H_
#define COSCHED_SERVER_API_AUTHZ_H_

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/config.pb.h"
#include "grpcpp/server_context.h"
#include "server/api/local_peers.h"

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
  // gRPC's peer string, e.g. "ipv4:127.0.0.1:41000", or "fd:12" for a
  // connection accepted on csd's Unix socket.
  std::string address;
  // For an "fd:" peer: the credentials its connection was accepted with.
  std::optional<LocalCredentials> local;
  // From "authorization: Bearer <token>" metadata.
  std::optional<std::string> bearer_token;
};

// The caller as authorization sees it.
struct Caller {
  // For audit records and logs: the SPIFFE id, "cn:<common name>",
  // "token:<name>", "uid:<uid>" (the Unix socket) or
  // "plaintext:<peer address>".
  std::string who;
  Role role = Role::kNone;
  // From a host SPIFFE id of the trust domain; empty for other callers.
  std::string host_id;
  // Trusted for every host: root on the Unix socket, and plaintext callers
  // when plaintext_agents is set.
  bool any_host = false;
};

struct AuthzOptions {
  std::string trust_domain = "cosched";
  // Role of plaintext TCP callers, and of Unix socket callers no binding
  // names; "none" refuses plaintext callers (UNAUTHENTICATED).
  std::string plaintext_role = "viewer";
  // Plaintext TCP callers may act for any host (as agents).
  bool plaintext_agents = false;
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

// Thread-safe. Its rules change only by Replace (a reload of csd.yaml).
class Authorizer {
 public:
  // INVALID_ARGUMENT naming the config key for an unknown role, a token hash
  // that is not 64 lower-case hex digits, an empty or malformed trust
  // domain, an identity or token bound twice, or a unix user or group the
  // host does not know. `local_peers` (may be null: no Unix socket) must
  // outlive the authorizer.
  static absl::StatusOr<Authorizer> Create(const AuthzOptions& options,
                                           const LocalPeerTable* local_peers = nullptr);

  // Takes `next`'s identities, roles and tokens (a reload of csd.yaml):
  // every call identified after it is judged by them. Thread-safe.
  void Replace(const Authorizer& next);

  // UNAUTHENTICATED for an unknown bearer token, a token sent in plaintext
  // from off loopback, a plaintext caller when plaintext_role is none and
  // plaintext_agents is off, or an "fd:" peer without credentials.
  absl::StatusOr<Caller> Identify(const Peer& peer) const;

  // PERMISSION_DENIED (naming the caller, its role and the role needed)
  // unless the caller may call ControlPlane `method`.
  static absl::Status AllowControlPlane(const Caller& caller,
                                        absl::string_view method);
  // PERMISSION_DENIED (naming both ids) unless the caller is host `host_id`
  // or trusted for every host (any_host).
  static absl::Status AllowHost(const Caller& caller,
                                absl::string_view host_id);

  // Identify and AllowControlPlane / AllowHost on a gRPC call.
  absl::StatusOr<Caller> ForControlPlane(const grpc::ServerContextBase& context,
                                         absl::string_view method) const;
  absl::StatusOr<Caller> ForHost(const grpc::ServerContextBase& context,
                                 absl::string_view host_id) const;

 private:
  // Who gets which role: what a reload replaces, whole.
  struct Rules {
    std::string host_prefix;  // "spiffe://<trust-domain>/host/"
    Role plaintext_role = Role::kViewer;
    bool plaintext_agents = false;
    std::map<std::string, Role> by_spiffe_id;
    std::map<std::string, Role> by_common_name;
    std::map<uint32_t, Role> by_uid;
    std::map<uint32_t, Role> by_gid;
    struct Token {
      Role role;
      std::string name;
    };
    std::map<std::string, Token> by_token_sha256;
  };

  Authorizer() = default;

  std::shared_ptr<const Rules> rules() const;
  // Identify for a caller on the Unix socket (credentials recorded).
  Caller IdentifyLocal(const Rules& rules, const LocalCredentials& credentials) const;
  // The peer of a call, with its recorded credentials when local.
  Peer PeerOf(const grpc::ServerContextBase& context) const;

  const LocalPeerTable* local_peers_ = nullptr;
  // Guards rules_, which a reload swaps while calls read it; on the heap so
  // that Create can return the authorizer by value.
  std::unique_ptr<std::mutex> mu_ = std::make_unique<std::mutex>();
  std::shared_ptr<const Rules> rules_;
};

// The peer of a gRPC call: its verified certificate's identities, address
// and bearer token (not its Unix socket credentials: the Authorizer adds
// those).
Peer PeerFromContext(const grpc::ServerContextBase& context);

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(absl::string_view data);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_API_AUTHZ_H_
