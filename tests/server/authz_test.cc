#include "server/authz.h"

#include "common/config_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;

AuthzOptions Options() {
  AuthzOptions options;
  options.trust_domain = "example.org";
  v1::RoleBinding operators;
  operators.set_role("operator");
  operators.add_spiffe_ids("spiffe://example.org/user/alice");
  operators.add_common_names("bob");
  options.roles.push_back(operators);
  v1::RoleBinding admins;
  admins.set_role("admin");
  admins.add_common_names("root-of-all");
  options.roles.push_back(admins);
  v1::TokenBinding viewer;
  viewer.set_role("viewer");
  viewer.set_sha256(Sha256Hex("viewer-token"));
  viewer.set_name("dashboard");
  options.tokens.push_back(viewer);
  return options;
}

Authorizer Make(const AuthzOptions& options = Options()) {
  auto authz = Authorizer::Create(options);
  EXPECT_OK(authz);
  return std::move(*authz);
}

Peer Certificate(std::vector<std::string> uris, std::string cn) {
  Peer peer;
  peer.verified_certificate = true;
  peer.uri_sans = std::move(uris);
  peer.common_name = std::move(cn);
  peer.address = "ipv4:10.0.0.7:40000";
  return peer;
}

TEST(Sha256Hex, KnownVector) {
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(RequiredRole, ReadsViewerChangesOperatorPoliciesAdminUnknownAdmin) {
  EXPECT_EQ(RequiredRole("GetVM"), Role::kViewer);
  EXPECT_EQ(RequiredRole("ListAuditRecords"), Role::kViewer);
  EXPECT_EQ(RequiredRole("GetStats"), Role::kViewer);
  EXPECT_EQ(RequiredRole("TagVM"), Role::kOperator);
  EXPECT_EQ(RequiredRole("UntagVM"), Role::kOperator);
  EXPECT_EQ(RequiredRole("SetTenantPolicy"), Role::kAdmin);
  EXPECT_EQ(RequiredRole("SomeNewMethod"), Role::kAdmin);
}

TEST(Authorizer, AgentCertificateIsItsHostOnly) {
  Authorizer authz = Make();
  auto caller =
      authz.Identify(Certificate({"spiffe://example.org/host/node-1"}, "node-1"));
  ASSERT_OK(caller);
  EXPECT_EQ(caller->who, "spiffe://example.org/host/node-1");
  EXPECT_EQ(caller->host_id, "node-1");
  EXPECT_EQ(caller->role, Role::kNone);
  EXPECT_OK(Authorizer::AllowHost(*caller, "node-1"));
  absl::Status other = Authorizer::AllowHost(*caller, "node-2");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(other.message()), HasSubstr("'node-1'"));
  EXPECT_THAT(std::string(other.message()), HasSubstr("'node-2'"));
  // No ControlPlane role unless mapped.
  EXPECT_EQ(Authorizer::AllowControlPlane(*caller, "GetVM").code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(Authorizer, HostIdFromAnotherTrustDomainOrPathIsNoHost) {
  Authorizer authz = Make();
  for (const char* uri : {"spiffe://evil.org/host/node-1",
                          "spiffe://example.org/host/node-1/extra",
                          "spiffe://example.org/host/"}) {
    auto caller = authz.Identify(Certificate({uri}, "x"));
    ASSERT_OK(caller);
    EXPECT_EQ(caller->host_id, "") << uri;
    EXPECT_EQ(Authorizer::AllowHost(*caller, "node-1").code(),
              absl::StatusCode::kPermissionDenied)
        << uri;
  }
}

TEST(Authorizer, RolesFromSpiffeIdOrCommonName) {
  Authorizer authz = Make();
  auto alice = authz.Identify(Certificate({"spiffe://example.org/user/alice"}, "a"));
  ASSERT_OK(alice);
  EXPECT_EQ(alice->role, Role::kOperator);
  EXPECT_OK(Authorizer::AllowControlPlane(*alice, "TagVM"));
  absl::Status denied = Authorizer::AllowControlPlane(*alice, "SetTenantPolicy");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(denied.message()), HasSubstr("needs role admin"));

  auto bob = authz.Identify(Certificate({}, "bob"));
  ASSERT_OK(bob);
  EXPECT_EQ(bob->who, "cn:bob");
  EXPECT_EQ(bob->role, Role::kOperator);

  auto root = authz.Identify(Certificate({}, "root-of-all"));
  ASSERT_OK(root);
  EXPECT_OK(Authorizer::AllowControlPlane(*root, "SetTenantPolicy"));
  // A role never lets a caller act as a host.
  EXPECT_EQ(Authorizer::AllowHost(*root, "node-1").code(),
            absl::StatusCode::kPermissionDenied);

  auto stranger = authz.Identify(Certificate({}, "stranger"));
  ASSERT_OK(stranger);
  EXPECT_EQ(Authorizer::AllowControlPlane(*stranger, "GetVM").code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(Authorizer, BearerTokens) {
  Authorizer authz = Make();
  Peer peer = Certificate({}, "stranger");
  peer.bearer_token = "viewer-token";
  auto caller = authz.Identify(peer);
  ASSERT_OK(caller);
  EXPECT_EQ(caller->who, "token:dashboard");
  EXPECT_EQ(caller->role, Role::kViewer);
  EXPECT_OK(Authorizer::AllowControlPlane(*caller, "ListVMs"));
  EXPECT_EQ(Authorizer::AllowControlPlane(*caller, "TagVM").code(),
            absl::StatusCode::kPermissionDenied);

  peer.bearer_token = "guessed";
  EXPECT_EQ(authz.Identify(peer).status().code(),
            absl::StatusCode::kUnauthenticated);

  // In plaintext: from loopback only.
  Peer local;
  local.address = "ipv4:127.0.0.1:5000";
  local.bearer_token = "viewer-token";
  EXPECT_OK(authz.Identify(local));
  Peer remote;
  remote.address = "ipv4:192.0.2.1:5000";
  remote.bearer_token = "viewer-token";
  EXPECT_EQ(authz.Identify(remote).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(Authorizer, PlaintextCallersGetPlaintextRoleAndAnyHost) {
  Authorizer authz = Make();
  Peer local;
  local.address = "ipv6:%5B::1%5D:5000";
  auto caller = authz.Identify(local);
  ASSERT_OK(caller);
  EXPECT_EQ(caller->role, Role::kAdmin);
  EXPECT_EQ(caller->who, "plaintext:ipv6:%5B::1%5D:5000");
  EXPECT_OK(Authorizer::AllowHost(*caller, "any-host"));

  AuthzOptions viewer_only = Options();
  viewer_only.plaintext_role = "viewer";
  auto viewer = Make(viewer_only).Identify(local);
  ASSERT_OK(viewer);
  EXPECT_EQ(Authorizer::AllowControlPlane(*viewer, "TagVM").code(),
            absl::StatusCode::kPermissionDenied);

  AuthzOptions closed = Options();
  closed.plaintext_role = "none";
  EXPECT_EQ(Make(closed).Identify(local).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(Authorizer, BadOptionsNameTheKey) {
  AuthzOptions bad_role = Options();
  bad_role.roles[0].set_role("superuser");
  auto s = Authorizer::Create(bad_role).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("roles[0].role"));

  AuthzOptions bad_hash = Options();
  bad_hash.tokens[0].set_sha256("ABC");
  s = Authorizer::Create(bad_hash).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("tokens[0].sha256"));

  AuthzOptions twice = Options();
  twice.roles[1].add_common_names("bob");
  s = Authorizer::Create(twice).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("'bob' is bound twice"));

  AuthzOptions domain = Options();
  domain.trust_domain = "a/b";
  s = Authorizer::Create(domain).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("trust_domain"));

  AuthzOptions plaintext = Options();
  plaintext.plaintext_role = "root";
  s = Authorizer::Create(plaintext).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("plaintext_role"));
}

TEST(Authorizer, ExampleConfigIsAccepted) {
  v1::CsdConfig config;
  absl::Status loaded = LoadYamlConfigFile(
      std::string(COSCHED_DEPLOY_CONFIG_DIR) + "/csd.yaml", &config);
  ASSERT_OK(loaded);
  auto authz = Authorizer::Create(AuthzOptionsFromConfig(config));
  ASSERT_OK(authz);
  auto admin = authz->Identify(Certificate({}, "platform-admin"));
  ASSERT_OK(admin);
  EXPECT_EQ(admin->role, Role::kAdmin);
}

TEST(Authorizer, TokensFromYamlConfig) {
  v1::CsdConfig config;
  absl::Status loaded = ParseYamlConfig(
      "tokens:\n  - role: operator\n    name: ci\n    sha256: " +
          Sha256Hex("s3cret") + "\n",
      "test", &config);
  ASSERT_OK(loaded);
  auto authz = Authorizer::Create(AuthzOptionsFromConfig(config));
  ASSERT_OK(authz);
  Peer peer;
  peer.address = "ipv4:127.0.0.1:1";
  peer.bearer_token = "s3cret";
  auto caller = authz->Identify(peer);
  ASSERT_OK(caller);
  EXPECT_EQ(caller->who, "token:ci");
  EXPECT_EQ(caller->role, Role::kOperator);
}

}  // namespace
}  // namespace cosched::server
