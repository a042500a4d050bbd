// csd's `store` config: SQLite stays the default, `store: {etcd: ...}`
// selects etcd, and a bad store section is a usage error (exit 2) naming the
// file, the line and the field, before anything starts.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config_loader.h"
#include "gtest/gtest.h"
#include "server/api/replica_identity.h"
#include "server/daemon/csd_main.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_pki.h"

namespace cosched::server {
namespace {

struct Exit {
  int code = -1;
  std::string output;
};

class CsdStoreConfigTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    std::string path = dir_.Sub("csd.yaml");
    std::ofstream(path) << text;
    return path;
  }

  Exit Csd(const std::string& yaml) {
    std::vector<std::string> args = {"csd",           "--config", Write(yaml), "--listen",
                                     "127.0.0.1:0",   "--data-dir", dir_.Sub("data"),
                                     "--metrics-listen", "off", "--socket", "off"};
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    CsdMainEnvironment env;
    env.serve_until_stopped = [](CsdServer&, const std::function<absl::Status()>&) {};  // one that starts anyway stops at once
    std::ostringstream out, err;
    Exit e;
    e.code = RunCsdMain(static_cast<int>(argv.size()), argv.data(), env, out, err);
    e.output = out.str() + err.str();
    return e;
  }

  void ExpectUsageError(const std::string& yaml, const std::string& says) {
    SCOPED_TRACE(yaml);
    Exit e = Csd(yaml);
    EXPECT_EQ(e.code, kCsdExitUsage) << e.output;
    EXPECT_NE(e.output.find(says), std::string::npos) << "no '" << says << "' in: " << e.output;
  }

  cosched::testing::TempDir dir_;
};

TEST_F(CsdStoreConfigTest, SqliteStaysTheDefault) {
  v1::CsdConfig config;
  ASSERT_TRUE(ParseYamlConfig("listen: 127.0.0.1:0\n", "csd.yaml", &config).ok());
  EXPECT_FALSE(CsdOptionsFromConfig(config).etcd_store.has_value());
}

TEST_F(CsdStoreConfigTest, EtcdStoreOptionsComeFromTheFile) {
  v1::CsdConfig config;
  absl::Status parsed = ParseYamlConfig(R"(store:
  etcd:
    endpoints: ["127.0.0.1:2479", "127.0.0.2:2479"]
    prefix: /fleet-a
    timeout_ms: 1500
    max_txn_ops: 512
    replica_name: csd-a
    lease_ttl_s: 15
    maintenance_interval_s: 600
    disable_compaction: true
    advertise_address: csd-a.example:7443
    peer_timeout_ms: 2500
)", "csd.yaml", &config);
  ASSERT_TRUE(parsed.ok()) << parsed;
  CsdOptions options = CsdOptionsFromConfig(config);
  ASSERT_TRUE(options.etcd_store.has_value());
  EXPECT_EQ(options.etcd_store->client.endpoints,
            (std::vector<std::string>{"127.0.0.1:2479", "127.0.0.2:2479"}));
  EXPECT_EQ(options.etcd_store->prefix, "/fleet-a");
  EXPECT_EQ(options.etcd_store->client.timeout, absl::Milliseconds(1500));
  EXPECT_EQ(options.etcd_store->client.max_txn_ops, 512);
  EXPECT_EQ(options.etcd_store->client.max_request_bytes, etcd::kDefaultMaxRequestBytes);
  EXPECT_EQ(options.etcd_store->replicas.name, "csd-a");
  EXPECT_EQ(options.etcd_store->replicas.ttl, absl::Seconds(15));
  EXPECT_EQ(options.etcd_store->maintenance.interval, absl::Seconds(600));
  EXPECT_FALSE(options.etcd_store->maintenance.compact);
  EXPECT_EQ(options.etcd_store->replicas.address, "csd-a.example:7443");
  EXPECT_EQ(options.peer_timeout, absl::Milliseconds(2500));
  EXPECT_TRUE(ValidateCsdOptions(options).ok());

  // Unset: the defaults.
  ASSERT_TRUE(ParseYamlConfig("store:\n  etcd:\n    endpoints: [127.0.0.1:2479]\n"
                              "    prefix: /a\n", "csd.yaml", &config).ok());
  options = CsdOptionsFromConfig(config);
  EXPECT_EQ(options.etcd_store->replicas.name, "");
  EXPECT_EQ(options.etcd_store->replicas.ttl, absl::Seconds(10));
  EXPECT_EQ(options.etcd_store->maintenance.interval, absl::Minutes(5));
  // etcd's history is the whole cluster's: csd compacts it only when told.
  EXPECT_FALSE(options.etcd_store->maintenance.compact);
  EXPECT_EQ(options.etcd_store->replicas.address, "");
  EXPECT_EQ(options.peer_timeout, absl::Seconds(1));
}

TEST_F(CsdStoreConfigTest, BadLeadershipSettingsExit2NamingTheField) {
  const std::string head = "store:\n  etcd:\n    endpoints: [127.0.0.1:2479]\n    prefix: /a\n";
  ExpectUsageError(head + "    lease_ttl_s: 1\n",
                   "csd.yaml:5: store.etcd.lease_ttl_s must be 2 to 300 seconds");
  ExpectUsageError(head + "    maintenance_interval_s: 5\n",
                   "csd.yaml:5: store.etcd.maintenance_interval_s must be 10 to 86400");
  ExpectUsageError(head + "    replica_name: \"a b\"\n",
                   "csd.yaml:5: store.etcd.replica_name 'a b' must be");
}

TEST_F(CsdStoreConfigTest, CompactHistoryIsOptInAndNotBesideDisableCompaction) {
  const std::string head = "store:\n  etcd:\n    endpoints: [127.0.0.1:2479]\n    prefix: /a\n";
  v1::CsdConfig config;
  ASSERT_TRUE(ParseYamlConfig(head + "    compact_history: true\n", "csd.yaml", &config).ok());
  CsdOptions options = CsdOptionsFromConfig(config);
  EXPECT_TRUE(options.etcd_store->maintenance.compact);
  EXPECT_TRUE(ValidateCsdOptions(options).ok());
  ExpectUsageError(head + "    compact_history: true\n    disable_compaction: true\n",
                   "store.etcd.compact_history: true and store.etcd.disable_compaction: true "
                   "contradict each other");
}

TEST_F(CsdStoreConfigTest, TheDefaultReplicaNameIsTheHostNameUnlessOnPortZero) {
  const std::string host = store::HostReplicaName();
  ASSERT_FALSE(host.empty());
  store::EtcdReplicasOptions named;
  named.name = host;
  EXPECT_TRUE(store::ValidateEtcdReplicasOptions(named).ok()) << host;
  EXPECT_EQ(DefaultReplicaName("0.0.0.0:7443"), host);
  EXPECT_EQ(DefaultReplicaName("[::1]:7443"), host);
  // Several csds on one machine (tests): the host name and a random suffix.
  EXPECT_EQ(DefaultReplicaName("127.0.0.1:0"), "");
}

// Issue #37 item 3: a replica presents its own certificate when it dials
// the others, so it must allow client authentication and be an operator
// under the roles the replicas share; csd says so at start, not when the
// first forwarded stats are refused.
class ReplicaIdentityTest : public CsdStoreConfigTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pki_.MakeCa("ca"));
    // The server's usage only.
    ASSERT_TRUE(pki_.MakeCert("ca", "server-only",
                              "URI:spiffe://cosched/csd/a\\nextendedKeyUsage=serverAuth"));
    ASSERT_TRUE(pki_.MakeCert("ca", "both",
                              "URI:spiffe://cosched/csd/a\\nextendedKeyUsage=serverAuth,clientAuth"));
    ASSERT_TRUE(pki_.MakeCert("ca", "any", "URI:spiffe://cosched/csd/b", "csd-b"));
  }

  std::string Yaml(const std::string& cert, const std::string& role) const {
    return absl::StrCat("tls:\n  cert_file: ", dir_.Sub(cert + ".crt"), "\n  key_file: ",
                        dir_.Sub(cert + ".key"), "\n  ca_file: ", dir_.Sub("ca.crt"),
                        "\nroles:\n  - role: ", role,
                        "\n    spiffe_ids: [\"spiffe://cosched/csd/a\"]\n"
                        "store:\n  etcd:\n    endpoints: [127.0.0.1:1]\n    prefix: /a\n");
  }

  cosched::testing::TestPki pki_{dir_.path()};
};

TEST_F(ReplicaIdentityTest, TheCertificatesIdentityAndUsageAreRead) {
  auto server_only = ReadCertificateIdentity(dir_.Sub("server-only.crt"));
  ASSERT_TRUE(server_only.ok()) << server_only.status();
  EXPECT_FALSE(server_only->client_auth);
  EXPECT_EQ(server_only->uri_sans, std::vector<std::string>{"spiffe://cosched/csd/a"});
  auto both = ReadCertificateIdentity(dir_.Sub("both.crt"));
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE(both->client_auth);
  // Without an extended key usage a certificate may be used for anything.
  auto any = ReadCertificateIdentity(dir_.Sub("any.crt"));
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_TRUE(any->client_auth);
  EXPECT_EQ(any->common_name, "csd-b");
  EXPECT_EQ(ReadCertificateIdentity(dir_.Sub("nonexistent.crt")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ReplicaIdentityTest, ACertificateWithoutClientAuthenticationExits2NamingIt) {
  ExpectUsageError(Yaml("server-only", "operator"),
                   "the certificate's extended key usage lacks clientAuth");
}

TEST_F(ReplicaIdentityTest, AnIdentityBelowOperatorExits2NamingItsRole) {
  ExpectUsageError(Yaml("both", "viewer"),
                   "roles: the other replicas know this one as spiffe://cosched/csd/a");
  ExpectUsageError(Yaml("both", "viewer"), "which roles give viewer: it needs operator");
}

TEST_F(ReplicaIdentityTest, AnOperatorWithClientAuthenticationPassesTheCheck) {
  v1::TlsConfig tls;
  tls.set_cert_file(dir_.Sub("both.crt"));
  AuthzOptions authz;
  v1::RoleBinding binding;
  binding.set_role("operator");
  binding.add_spiffe_ids("spiffe://cosched/csd/a");
  authz.roles.push_back(binding);
  EXPECT_TRUE(CheckReplicaIdentity(tls, authz).ok()) << CheckReplicaIdentity(tls, authz);
  binding.set_role("admin");
  authz.roles = {binding};
  EXPECT_TRUE(CheckReplicaIdentity(tls, authz).ok());
  // Plaintext (loopback): nothing to check.
  EXPECT_TRUE(CheckReplicaIdentity(v1::TlsConfig(), AuthzOptions()).ok());
}

TEST_F(CsdStoreConfigTest, BadPeerSettingsExit2NamingTheField) {
  const std::string head = "store:\n  etcd:\n    endpoints: [127.0.0.1:2479]\n    prefix: /a\n";
  ExpectUsageError(head + "    advertise_address: csd-a\n",
                   "csd.yaml:5: store.etcd.advertise_address 'csd-a' must be host:port");
  ExpectUsageError(head + "    advertise_address: 0.0.0.0:7443\n",
                   "csd.yaml:5: store.etcd.advertise_address '0.0.0.0:7443' must be where the "
                   "other replicas dial this one");
  ExpectUsageError(head + "    advertise_address: csd-a:0\n", "not a wildcard or port 0");
  ExpectUsageError(head + "    peer_timeout_ms: 50\n",
                   "csd.yaml:5: store.etcd.peer_timeout_ms must be 100 to 10000");
}

TEST_F(CsdStoreConfigTest, AnUnknownStoreKindExits2) {
  ExpectUsageError("store:\n  consul:\n    endpoints: [127.0.0.1:8500]\n", "consul");
  ExpectUsageError("store: {}\n", "store must name its kind: etcd");
}

TEST_F(CsdStoreConfigTest, MissingEndpointsExit2NamingTheLine) {
  ExpectUsageError("store:\n  etcd:\n    prefix: /cosched\n",
                   "store.etcd.endpoints is required");
}

TEST_F(CsdStoreConfigTest, AnEmptyOrRelativePrefixExits2) {
  ExpectUsageError("store:\n  etcd:\n    endpoints: [127.0.0.1:2479]\n",
                   "store.etcd.prefix is required");
  ExpectUsageError("store:\n  etcd:\n    endpoints: [127.0.0.1:2479]\n    prefix: \"\"\n",
                   "store.etcd.prefix is required");
  ExpectUsageError("store:\n  etcd:\n    endpoints: [127.0.0.1:2479]\n    prefix: cosched\n",
                   "csd.yaml:4: store.etcd.prefix 'cosched' is relative: it must start with '/'");
  ExpectUsageError("store:\n  etcd:\n    endpoints: [127.0.0.1:2479]\n    prefix: /cosched/\n",
                   "must not end with '/'");
}

TEST_F(CsdStoreConfigTest, UnreadableTlsFilesExit2NamingTheField) {
  const std::string head =
      "store:\n  etcd:\n    endpoints: [10.0.0.5:2379]\n    prefix: /cosched\n    tls:\n";
  ExpectUsageError(head + "      ca_file: /nonexistent/ca.pem\n",
                   "store.etcd.tls.ca_file '/nonexistent/ca.pem' cannot be read");
  const std::string ca = dir_.Sub("ca.pem");
  std::ofstream(ca) << "not checked here";
  ExpectUsageError(head + "      ca_file: " + ca + "\n      cert_file: " + ca +
                       "\n      key_file: /nonexistent/key.pem\n",
                   "store.etcd.tls.key_file '/nonexistent/key.pem' cannot be read");
  ExpectUsageError(head + "      cert_file: " + ca + "\n      key_file: " + ca + "\n",
                   "store.etcd.tls.ca_file is required");
}

TEST_F(CsdStoreConfigTest, PlaintextToAnotherHostIsRefused) {
  ExpectUsageError("store:\n  etcd:\n    endpoints: [127.0.0.1:2479, 10.0.0.5:2379]\n"
                   "    prefix: /cosched\n",
                   "store.etcd.endpoints[1] '10.0.0.5:2379' is not a loopback address");
  ExpectUsageError("store:\n  etcd:\n    endpoints: [nohost]\n    prefix: /cosched\n",
                   "store.etcd.endpoints[0] 'nohost'");
}

// etcd not there: csd does not start (not a usage error: the file is fine).
TEST_F(CsdStoreConfigTest, AnUnreachableEtcdFailsTheStartNamingIt) {
  Exit e = Csd("store:\n  etcd:\n    endpoints: [127.0.0.1:1]\n    prefix: /cosched\n"
               "    timeout_ms: 300\n");
  EXPECT_EQ(e.code, kCsdExitStartFailed) << e.output;
  EXPECT_NE(e.output.find("etcd at 127.0.0.1:1 is unavailable"), std::string::npos) << e.output;
}

}  // namespace
}  // namespace cosched::server
