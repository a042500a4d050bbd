#include "server/api/authz.h"

#include <openssl/sha.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/transport.h"
#include "server/api/unix_accounts.h"

namespace cosched::server {
namespace {

constexpr absl::string_view kBearerPrefix = "Bearer ";

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isdigit(c) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

// Letters, digits, '.', '-' and '_': a DNS-like SPIFFE trust domain.
bool IsTrustDomain(absl::string_view s) {
  if (s.empty() || s.size() > 255) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != '_') {
      return false;
    }
  }
  return true;
}

// gRPC peer strings: "ipv4:127.0.0.1:5", "ipv6:[::1]:5" (brackets may be
// percent-encoded), "unix:/path". A Unix socket is as local as loopback.
bool IsLoopbackPeer(absl::string_view peer) {
  if (absl::StartsWith(peer, "unix:")) return true;
  for (absl::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&peer, scheme)) {
      return IsLoopbackAddress(absl::StrReplaceAll(
          peer, {{"%5B", "["}, {"%5D", "]"}, {"%5b", "["}, {"%5d", "]"}}));
    }
  }
  return false;
}

template <typename Key>
absl::Status Bind(std::map<Key, Role>& map, const Key& key, Role role,
                  absl::string_view field) {
  auto [it, inserted] = map.emplace(key, role);
  if (!inserted) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " '", key, "' is bound twice (roles ",
                     RoleName(it->second), " and ", RoleName(role), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kViewer: return "viewer";
    case Role::kOperator: return "operator";
    case Role::kAdmin: return "admin";
    case Role::kNone: break;
  }
  return "none";
}

absl::StatusOr<Role> ParseRole(absl::string_view field, absl::string_view name) {
  for (Role role : {Role::kNone, Role::kViewer, Role::kOperator, Role::kAdmin}) {
    if (name == RoleName(role)) return role;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, " '", name, "' is not a role: use viewer, operator, admin or none"));
}

AuthzOptions AuthzOptionsFromConfig(const v1::CsdConfig& config) {
  AuthzOptions options;
  if (!config.trust_domain().empty()) options.trust_domain = config.trust_domain();
  if (!config.plaintext_role().empty()) {
    options.plaintext_role = config.plaintext_role();
  }
  options.plaintext_agents = config.plaintext_agents();
  options.roles.assign(config.roles().begin(), config.roles().end());
  options.tokens.assign(config.tokens().begin(), config.tokens().end());
  return options;
}

Role RequiredRole(absl::string_view method) {
  static const auto* const kRoles = new std::map<std::string, Role, std::less<>>{
      {"GetVM", Role::kViewer},
      {"ListVMs", Role::kViewer},
      {"GetTenantPolicy", Role::kViewer},
      {"ListTenantPolicies", Role::kViewer},
      {"ListHosts", Role::kViewer},
      {"GetHost", Role::kViewer},
      {"GetStats", Role::kViewer},
      {"ListAuditRecords", Role::kViewer},
      {"ExplainVM", Role::kViewer},
      {"Plan", Role::kViewer},
      {"GetRollout", Role::kViewer},
      {"GetStatus", Role::kViewer},
      {"TagVM", Role::kOperator},
      {"UntagVM", Role::kOperator},
      {"Place", Role::kOperator},
      {"DrainHost", Role::kOperator},
      {"UndrainHost", Role::kOperator},
      {"RemoveHost", Role::kOperator},
      // Replica.ForwardStats: another replica's agents' load, which the
      // leader's engine plans from (as TagVM, it moves VMs between groups
      // within their tenants' bounds).
      {"ForwardStats", Role::kOperator},
      {"SetTenantPolicy", Role::kAdmin},
      // Enforcement on or off across the fleet is the admin's call.
      {"StartRollout", Role::kAdmin},
      {"PauseRollout", Role::kAdmin},
      {"ResumeRollout", Role::kAdmin},
      {"AbortRollout", Role::kAdmin},
      {"SetNewHosts", Role::kAdmin},
      {"SetHostEnforcement", Role::kAdmin},
  };
  auto it = kRoles->find(method);
  return it == kRoles->end() ? Role::kAdmin : it->second;
}

absl::StatusOr<Authorizer> Authorizer::Create(const AuthzOptions& options,
                                              const LocalPeerTable* local_peers) {
  Authorizer authz;
  authz.local_peers_ = local_peers;
  auto rules = std::make_shared<Rules>();
  rules->plaintext_agents = options.plaintext_agents;
  if (!IsTrustDomain(options.trust_domain)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trust_domain '", options.trust_domain,
        "' must be 1-255 characters of letters, digits, '.', '-' and '_'"));
  }
  rules->host_prefix = absl::StrCat("spiffe://", options.trust_domain, "/host/");
  auto plaintext = ParseRole("plaintext_role", options.plaintext_role);
  if (!plaintext.ok()) return plaintext.status();
  rules->plaintext_role = *plaintext;
  for (size_t i = 0; i < options.roles.size(); ++i) {
    const v1::RoleBinding& binding = options.roles[i];
    std::string field = absl::StrCat("roles[", i, "]");
    auto role = ParseRole(absl::StrCat(field, ".role"), binding.role());
    if (!role.ok()) return role.status();
    for (const std::string& id : binding.spiffe_ids()) {
      if (!absl::StartsWith(id, "spiffe://")) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".spiffe_ids entry '", id, "' must start with spiffe://"));
      }
      absl::Status s = Bind(rules->by_spiffe_id, id, *role, "spiffe id");
      if (!s.ok()) return s;
    }
    for (const std::string& cn : binding.common_names()) {
      if (cn.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".common_names has an empty entry"));
      }
      absl::Status s = Bind(rules->by_common_name, cn, *role, "common name");
      if (!s.ok()) return s;
    }
    for (int j = 0; j < binding.unix_users_size(); ++j) {
      const std::string entry = absl::StrCat(field, ".unix_users[", j, "]");
      auto uid = ResolveUnixUser(entry, binding.unix_users(j));
      if (!uid.ok()) return uid.status();
      absl::Status s = Bind(rules->by_uid, *uid, *role, absl::StrCat(entry, ": uid"));
      if (!s.ok()) return s;
    }
    for (int j = 0; j < binding.unix_groups_size(); ++j) {
      const std::string entry = absl::StrCat(field, ".unix_groups[", j, "]");
      auto gid = ResolveUnixGroup(entry, binding.unix_groups(j));
      if (!gid.ok()) return gid.status();
      absl::Status s = Bind(rules->by_gid, *gid, *role, absl::StrCat(entry, ": gid"));
      if (!s.ok()) return s;
    }
  }
  for (size_t i = 0; i < options.tokens.size(); ++i) {
    const v1::TokenBinding& binding = options.tokens[i];
    std::string field = absl::StrCat("tokens[", i, "]");
    auto role = ParseRole(absl::StrCat(field, ".role"), binding.role());
    if (!role.ok()) return role.status();
    if (binding.sha256().size() != 64 || !IsLowerHex(binding.sha256())) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".sha256 must be 64 lower-case hex digits (the output of "
                 "`printf %s TOKEN | sha256sum`)"));
    }
    std::string name = binding.name().empty() ? binding.sha256().substr(0, 12)
                                              : binding.name();
    if (!rules->by_token_sha256.emplace(binding.sha256(), Rules::Token{*role, name})
             .second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".sha256 is the same as an earlier token's"));
    }
  }
  authz.rules_ = std::move(rules);
  return authz;
}

std::shared_ptr<const Authorizer::Rules> Authorizer::rules() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return rules_;
}

void Authorizer::Replace(const Authorizer& next) {
  std::shared_ptr<const Rules> rules = next.rules();
  std::lock_guard<std::mutex> lock(*mu_);
  rules_ = std::move(rules);
}

absl::StatusOr<Caller> Authorizer::Identify(const Peer& peer) const {
  // One set of rules for the whole call, whatever a reload does meanwhile.
  const std::shared_ptr<const Rules> rules_now = rules();
  const Rules& rules = *rules_now;
  // Only csd's own acceptor hands connections over, so an "fd:" peer is on
  // the Unix socket.
  const bool handed_over = HandedOverDescriptor(peer.address).has_value();
  const bool local = handed_over || IsLoopbackPeer(peer.address);
  if (peer.bearer_token.has_value()) {
    // Over plaintext a token could be read on the way; refuse it so that a
    // misconfigured client learns before it is stolen a second time.
    if (!peer.verified_certificate && !local) {
      return absl::UnauthenticatedError(
          "bearer tokens are accepted only over TLS or from loopback");
    }
    auto it = rules.by_token_sha256.find(Sha256Hex(*peer.bearer_token));
    if (it == rules.by_token_sha256.end()) {
      return absl::UnauthenticatedError("the bearer token is not known to csd");
    }
    Caller caller;
    caller.who = absl::StrCat("token:", it->second.name);
    caller.role = it->second.role;
    return caller;
  }
  if (handed_over) {
    // Fail closed: a connection whose credentials csd did not record.
    if (!peer.local.has_value()) {
      return absl::UnauthenticatedError(absl::StrCat(
          "the Unix socket connection ", peer.address, " has no recorded credentials"));
    }
    return IdentifyLocal(rules, *peer.local);
  }
  if (!peer.verified_certificate) {
    if (rules.plaintext_role == Role::kNone && !rules.plaintext_agents) {
      return absl::UnauthenticatedError(
          "no credential: present a client certificate or a bearer token "
          "(plaintext_role is none)");
    }
    Caller caller;
    caller.who = absl::StrCat("plaintext:", peer.address);
    caller.role = rules.plaintext_role;
    caller.any_host = rules.plaintext_agents;
    return caller;
  }
  Caller caller;
  for (const std::string& uri : peer.uri_sans) {
    if (caller.who.empty() && absl::StartsWith(uri, "spiffe://")) caller.who = uri;
    if (auto it = rules.by_spiffe_id.find(uri); it != rules.by_spiffe_id.end()) {
      caller.role = std::max(caller.role, it->second);
    }
    absl::string_view rest = uri;
    if (caller.host_id.empty() && absl::ConsumePrefix(&rest, rules.host_prefix) &&
        !rest.empty() && !absl::StrContains(rest, '/')) {
      caller.host_id = std::string(rest);
    }
  }
  // A host's certificate is issued for the host: whatever CN its issuer
  // put in it (often the host's name, which a role binding may also name
  // for a person's certificate), it gets no role from it.
  if (auto it = rules.by_common_name.find(peer.common_name);
      caller.host_id.empty() && it != rules.by_common_name.end()) {
    caller.role = std::max(caller.role, it->second);
  }
  if (caller.who.empty()) caller.who = absl::StrCat("cn:", peer.common_name);
  return caller;
}

Caller Authorizer::IdentifyLocal(const Rules& rules, const LocalCredentials& credentials) const {
  Caller caller;
  caller.who = absl::StrCat("uid:", credentials.uid);
  // Root on csd's host can read csd's store and replace its binary: no
  // role withheld from it would protect anything.
  if (credentials.uid == 0) {
    caller.role = Role::kAdmin;
    caller.any_host = true;
    return caller;
  }
  // Any local user could have plaintext_role over loopback TCP: the socket
  // never gives less.
  caller.role = rules.plaintext_role;
  auto grant = [&](const std::map<uint32_t, Role>& map, uint32_t id) {
    if (auto it = map.find(id); it != map.end()) {
      caller.role = std::max(caller.role, it->second);
    }
  };
  grant(rules.by_uid, credentials.uid);
  grant(rules.by_gid, credentials.gid);
  for (uint32_t gid : credentials.groups) grant(rules.by_gid, gid);
  return caller;
}

absl::Status Authorizer::AllowControlPlane(const Caller& caller,
                                           absl::string_view method) {
  Role needed = RequiredRole(method);
  if (caller.role >= needed) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      caller.who, " has role ", RoleName(caller.role), "; ", method,
      " needs role ", RoleName(needed)));
}

absl::Status Authorizer::AllowHost(const Caller& caller,
                                   absl::string_view host_id) {
  if (caller.any_host || (!caller.host_id.empty() && caller.host_id == host_id)) {
    return absl::OkStatus();
  }
  if (caller.host_id.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        caller.who, " is not a host identity and may not act for host '", host_id,
        "' (agents need a host certificate, root on csd's Unix socket, or csd.yaml's "
        "plaintext_agents for plaintext)"));
  }
  return absl::PermissionDeniedError(
      absl::StrCat(caller.who, " is host '", caller.host_id,
                   "' and may not act for host '", host_id, "'"));
}

Peer Authorizer::PeerOf(const grpc::ServerContextBase& context) const {
  Peer peer = PeerFromContext(context);
  if (local_peers_ != nullptr) peer.local = local_peers_->Find(peer.address);
  return peer;
}

absl::StatusOr<Caller> Authorizer::ForControlPlane(
    const grpc::ServerContextBase& context, absl::string_view method) const {
  auto caller = Identify(PeerOf(context));
  if (!caller.ok()) return caller.status();
  absl::Status allowed = AllowControlPlane(*caller, method);
  if (!allowed.ok()) return allowed;
  return caller;
}

absl::StatusOr<Caller> Authorizer::ForHost(const grpc::ServerContextBase& context,
                                           absl::string_view host_id) const {
  auto caller = Identify(PeerOf(context));
  if (!caller.ok()) return caller.status();
  absl::Status allowed = AllowHost(*caller, host_id);
  if (!allowed.ok()) return allowed;
  return caller;
}

Peer PeerFromContext(const grpc::ServerContextBase& context) {
  Peer peer;
  peer.address = context.peer();
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  // Not IsPeerAuthenticated(): it is false for a verified certificate that
  // carries neither SAN nor CN, and such a caller must not pass for a
  // trusted plaintext one. csd's TLS always requires a verified client
  // certificate, so any transport but plaintext means one was verified (and
  // a missing property fails closed, as a certificate without a role).
  std::string security;
  if (auth != nullptr) {
    for (const grpc::string_ref& type :
         auth->FindPropertyValues("transport_security_type")) {
      security.assign(type.data(), type.size());
    }
  }
  if (security != "insecure") {
    peer.verified_certificate = true;
    for (const grpc::string_ref& uri : auth->FindPropertyValues("peer_uri")) {
      peer.uri_sans.emplace_back(uri.data(), uri.size());
    }
    for (const grpc::string_ref& cn :
         auth->FindPropertyValues("x509_common_name")) {
      peer.common_name.assign(cn.data(), cn.size());
    }
  }
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    absl::string_view value(it->second.data(), it->second.size());
    // Anything but a bearer token counts as a credential csd cannot use.
    peer.bearer_token =
        absl::ConsumePrefix(&value, kBearerPrefix) ? std::string(value) : "";
  }
  return peer;
}

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * SHA256_DIGEST_LENGTH);
  for (unsigned char b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

}  // namespace cosched::server
