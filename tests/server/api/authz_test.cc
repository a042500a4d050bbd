#include "server/api/authz.h"

#include "absl/strings/str_cat.h"
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
  EXPECT_EQ(RequiredRole("ForwardStats"), Role::kOperator);
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

// Issue #32 item 10: before, a host certificate whose CN a binding names
// ("bob", an operator) made the host an operator.
TEST(Authorizer, AHostCertificateGetsNoRoleFromItsCommonName) {
  Authorizer authz = Make();
  auto host = authz.Identify(Certificate({"spiffe://example.org/host/node-1"}, "root-of-all"));
  ASSERT_OK(host);
  EXPECT_EQ(host->host_id, "node-1");
  EXPECT_EQ(host->role, Role::kNone);
  EXPECT_EQ(Authorizer::AllowControlPlane(*host, "TagVM").code(),
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

// A reload of csd.yaml: the next call is judged by the new rules whole (a
// retired token and a removed binding no longer count, new ones do).
TEST(Authorizer, ReplaceJudgesTheNextCallByTheNewRules) {
  Authorizer authz = Make();
  Peer token = Certificate({}, "stranger");
  token.bearer_token = "viewer-token";
  ASSERT_OK(authz.Identify(token));
  EXPECT_EQ(authz.Identify(Certificate({}, "bob"))->role, Role::kOperator);

  AuthzOptions next = Options();
  next.tokens.clear();
  v1::TokenBinding rotated;
  rotated.set_role("viewer");
  rotated.set_sha256(Sha256Hex("rotated-token"));
  next.tokens.push_back(rotated);
  next.roles[0].clear_common_names();
  authz.Replace(Make(next));

  EXPECT_EQ(authz.Identify(token).status().code(), absl::StatusCode::kUnauthenticated);
  token.bearer_token = "rotated-token";
  EXPECT_OK(authz.Identify(token));
  EXPECT_EQ(authz.Identify(Certificate({}, "bob"))->role, Role::kNone);
  EXPECT_EQ(authz.Identify(Certificate({"spiffe://example.org/user/alice"}, "x"))->role,
            Role::kOperator);
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

// Any process of the host can be a loopback caller: by default it may read
// and nothing else, and act for no host.
TEST(Authorizer, PlaintextCallersAreViewersForNoHostByDefault) {
  Authorizer authz = Make();
  Peer local;
  local.address = "ipv6:%5B::1%5D:5000";
  auto caller = authz.Identify(local);
  ASSERT_OK(caller);
  EXPECT_EQ(caller->role, Role::kViewer);
  EXPECT_EQ(caller->who, "plaintext:ipv6:%5B::1%5D:5000");
  EXPECT_OK(Authorizer::AllowControlPlane(*caller, "ListVMs"));
  absl::Status tag = Authorizer::AllowControlPlane(*caller, "TagVM");
  EXPECT_EQ(tag.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(tag.message()), HasSubstr("has role viewer; TagVM needs role operator"));
  absl::Status host = Authorizer::AllowHost(*caller, "hv-1");
  EXPECT_EQ(host.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(host.message()), HasSubstr("plaintext_agents"));

  AuthzOptions trusted = Options();
  trusted.plaintext_role = "admin";
  trusted.plaintext_agents = true;
  auto admin = Make(trusted).Identify(local);
  ASSERT_OK(admin);
  EXPECT_EQ(admin->role, Role::kAdmin);
  EXPECT_OK(Authorizer::AllowHost(*admin, "any-host"));

  AuthzOptions closed = Options();
  closed.plaintext_role = "none";
  EXPECT_EQ(Make(closed).Identify(local).status().code(),
            absl::StatusCode::kUnauthenticated);
  // Agents only: no ControlPlane role, but any host.
  closed.plaintext_agents = true;
  auto agent = Make(closed).Identify(local);
  ASSERT_OK(agent);
  EXPECT_EQ(agent->role, Role::kNone);
  EXPECT_OK(Authorizer::AllowHost(*agent, "hv-1"));
}

Peer OnSocket(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups = {}) {
  Peer peer;
  peer.address = "fd:17";
  peer.local = LocalCredentials{uid, gid, 4242, std::move(groups)};
  return peer;
}

AuthzOptions WithUnixBindings() {
  AuthzOptions options = Options();
  v1::RoleBinding operators;
  operators.set_role("operator");
  operators.add_unix_users("1000");
  operators.add_unix_groups("2000");
  options.roles.push_back(operators);
  v1::RoleBinding admins;
  admins.set_role("admin");
  admins.add_unix_groups("3000");
  options.roles.push_back(admins);
  return options;
}

TEST(Authorizer, RootOnTheSocketIsAdminForEveryHost) {
  auto root = Make().Identify(OnSocket(0, 0));
  ASSERT_OK(root);
  EXPECT_EQ(root->role, Role::kAdmin);
  EXPECT_EQ(root->who, "uid:0");
  EXPECT_OK(Authorizer::AllowControlPlane(*root, "SetTenantPolicy"));
  EXPECT_OK(Authorizer::AllowHost(*root, "hv-9"));
  // Even when plaintext callers are refused outright.
  AuthzOptions closed = Options();
  closed.plaintext_role = "none";
  auto still_root = Make(closed).Identify(OnSocket(0, 0));
  ASSERT_OK(still_root);
  EXPECT_EQ(still_root->role, Role::kAdmin);
}

TEST(Authorizer, SocketCallersGetTheRolesOfTheirUidAndGroups) {
  Authorizer authz = Make(WithUnixBindings());
  struct Case {
    uint32_t uid, gid;
    std::vector<uint32_t> groups;
    Role role;
  };
  for (const Case& c : std::vector<Case>{
           {1000, 1000, {}, Role::kOperator},        // by uid
           {1001, 2000, {}, Role::kOperator},        // by primary group
           {1001, 1001, {27, 2000}, Role::kOperator},  // by a supplementary group
           {1000, 1000, {3000}, Role::kAdmin},       // the highest binding wins
           {65534, 65534, {65534}, Role::kViewer},   // unbound: plaintext_role
       }) {
    auto caller = authz.Identify(OnSocket(c.uid, c.gid, c.groups));
    ASSERT_OK(caller);
    EXPECT_EQ(caller->role, c.role) << "uid " << c.uid;
    EXPECT_EQ(caller->who, absl::StrCat("uid:", c.uid));
    // Only root acts for hosts on the socket.
    EXPECT_EQ(Authorizer::AllowHost(*caller, "hv-1").code(), absl::StatusCode::kPermissionDenied);
  }
  auto nobody = authz.Identify(OnSocket(65534, 65534));
  ASSERT_OK(nobody);
  absl::Status tag = Authorizer::AllowControlPlane(*nobody, "TagVM");
  EXPECT_EQ(tag.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(tag.message()), HasSubstr("uid:65534 has role viewer"));

  // plaintext_role none: an unbound socket caller has no role, and is told so.
  AuthzOptions closed = WithUnixBindings();
  closed.plaintext_role = "none";
  auto refused = Make(closed).Identify(OnSocket(65534, 65534));
  ASSERT_OK(refused);
  EXPECT_EQ(refused->role, Role::kNone);
  auto op = Make(closed).Identify(OnSocket(1000, 1000));
  ASSERT_OK(op);
  EXPECT_EQ(op->role, Role::kOperator);
}

TEST(Authorizer, ASocketConnectionWithoutRecordedCredentialsIsRefused) {
  Peer unknown;
  unknown.address = "fd:9";
  EXPECT_EQ(Make().Identify(unknown).status().code(), absl::StatusCode::kUnauthenticated);
  // A token over the socket is local, so it is accepted, and wins.
  Peer token = OnSocket(65534, 65534);
  token.bearer_token = "viewer-token";
  auto caller = Make().Identify(token);
  ASSERT_OK(caller);
  EXPECT_EQ(caller->who, "token:dashboard");
}

TEST(Authorizer, UnixUsersAndGroupsAreNamesOrNumbersTheHostKnows) {
  AuthzOptions named = Options();
  v1::RoleBinding binding;
  binding.set_role("viewer");
  binding.add_unix_users("root");  // every host has root, uid 0
  binding.add_unix_groups("root");
  named.roles.push_back(binding);
  EXPECT_OK(Authorizer::Create(named).status());

  AuthzOptions no_user = Options();
  v1::RoleBinding ghost;
  ghost.set_role("viewer");
  ghost.add_unix_users("no-such-user-cosched-test");
  no_user.roles.push_back(ghost);
  absl::Status s = Authorizer::Create(no_user).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("roles[2].unix_users[0] 'no-such-user-cosched-test' is not a user"));

  AuthzOptions no_group = Options();
  v1::RoleBinding ghosts;
  ghosts.set_role("viewer");
  ghosts.add_unix_groups("no-such-group-cosched-test");
  no_group.roles.push_back(ghosts);
  s = Authorizer::Create(no_group).status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("roles[2].unix_groups[0] 'no-such-group-cosched-test' is not a group"));

  AuthzOptions empty = Options();
  v1::RoleBinding blank;
  blank.set_role("viewer");
  blank.add_unix_users("");
  empty.roles.push_back(blank);
  s = Authorizer::Create(empty).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("roles[2].unix_users[0] is empty"));

  AuthzOptions twice = WithUnixBindings();
  twice.roles[3].add_unix_groups("2000");
  s = Authorizer::Create(twice).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("'2000' is bound twice"));

  // A number too large to be an id is taken as a name, which no host has.
  AuthzOptions huge = Options();
  v1::RoleBinding big;
  big.set_role("viewer");
  big.add_unix_users("4294967295");
  huge.roles.push_back(big);
  EXPECT_EQ(Authorizer::Create(huge).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HandedOverDescriptor, OnlyFdPeers) {
  EXPECT_EQ(HandedOverDescriptor("fd:12"), 12);
  EXPECT_EQ(HandedOverDescriptor("fd:"), std::nullopt);
  EXPECT_EQ(HandedOverDescriptor("fd:-1"), std::nullopt);
  EXPECT_EQ(HandedOverDescriptor("fd:1x"), std::nullopt);
  EXPECT_EQ(HandedOverDescriptor("ipv4:127.0.0.1:5"), std::nullopt);
  EXPECT_EQ(HandedOverDescriptor("unix:/run/cosched/csd.sock"), std::nullopt);
}

TEST(LocalPeerTable, ADescriptorReusedByANewConnectionCarriesTheNewCredentials) {
  LocalPeerTable table;
  EXPECT_EQ(table.Find("fd:5"), std::nullopt);
  table.Record(5, LocalCredentials{1000, 1000, 1, {}});
  ASSERT_TRUE(table.Find("fd:5").has_value());
  EXPECT_EQ(table.Find("fd:5")->uid, 1000u);
  table.Record(5, LocalCredentials{0, 0, 2, {}});
  EXPECT_EQ(table.Find("fd:5")->uid, 0u);
  EXPECT_EQ(table.Find("ipv4:127.0.0.1:5"), std::nullopt);
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
