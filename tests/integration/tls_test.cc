// csd with mutual TLS: a client with a certificate from the configured CA is
// served; one without a certificate, with one from another CA, or with an
// expired one is refused at the handshake; renewed server certificates are
// served without a restart. Certificates are made here with openssl.
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/transport.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_pki.h"

namespace cosched {
namespace {

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pki_.MakeCa("ca")) << "openssl failed: see " << dir_.path() << "/openssl.log";
    ASSERT_TRUE(pki_.MakeCa("other-ca"));
    ASSERT_TRUE(pki_.MakeCert("ca", "csd", "DNS:localhost,IP:127.0.0.1"));
    ASSERT_TRUE(pki_.MakeCert("ca", "operator", "URI:spiffe://test/operator"));
    ASSERT_TRUE(pki_.MakeCert("other-ca", "intruder", "URI:spiffe://test/intruder"));
    ASSERT_TRUE(pki_.MakeExpiredCert("ca", "expired", "URI:spiffe://test/operator"));
    // Made the same way as the expired one but valid now: the control that
    // shows it is refused for its dates alone.
    ASSERT_TRUE(pki_.MakeCertByCa("ca", "current", "URI:spiffe://test/operator",
                                  "20200101000000Z", "20990101000000Z"));
    server::CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = dir_.Sub("data");
    options.tls.set_cert_file(dir_.Sub("csd.crt"));
    options.tls.set_key_file(dir_.Sub("csd.key"));
    options.tls.set_ca_file(dir_.Sub("ca.crt"));
    options.tls.set_refresh_interval_s(1);
    v1::RoleBinding viewers;
    viewers.set_role("viewer");
    viewers.add_spiffe_ids("spiffe://test/operator");
    options.authz.roles.push_back(viewers);
    auto csd = server::CsdServer::Start(options);
    ASSERT_OK(csd);
    csd_ = std::move(*csd);
  }

  // A GetVM call on a new connection with client certificate `client` (""
  // for none); `server_cn` gets the common name of csd's certificate.
  grpc::Status Call(const std::string& client, std::string* server_cn = nullptr) {
    v1::TlsConfig tls;
    tls.set_ca_file(dir_.Sub("ca.crt"));
    if (!client.empty()) {
      tls.set_cert_file(dir_.Sub(client + ".crt"));
      tls.set_key_file(dir_.Sub(client + ".key"));
    }
    auto credentials = MakeChannelCredentials(csd_->address(), tls, false);
    EXPECT_OK(credentials);
    // A channel of its own: gRPC would otherwise reuse a connection that
    // an earlier channel to the same address made.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto stub = v1::ControlPlane::NewStub(
        grpc::CreateCustomChannel(csd_->address(), *credentials, args));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetVMRequest request;
    request.set_vm_id("vm-1");
    v1::VM vm;
    grpc::Status status = stub->GetVM(&context, request, &vm);
    if (server_cn != nullptr && context.auth_context() != nullptr) {
      auto cn = context.auth_context()->FindPropertyValues("x509_common_name");
      *server_cn = cn.empty() ? "" : std::string(cn[0].data(), cn[0].size());
    }
    return status;
  }

  cosched::testing::TempDir dir_;
  cosched::testing::TestPki pki_{dir_.path()};
  std::unique_ptr<server::CsdServer> csd_;
};

TEST_F(TlsTest, ClientWithCertificateFromTheCaIsServed) {
  grpc::Status status = Call("operator");
  // Served: the VM does not exist, which csd can only say after the handshake.
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
}

TEST_F(TlsTest, ClientWithoutCertificateIsRefused) {
  EXPECT_EQ(Call("").error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, ClientFromAnotherCaIsRefused) {
  EXPECT_EQ(Call("intruder").error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, ExpiredClientCertificateIsRefused) {
  EXPECT_EQ(Call("expired").error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Call("current").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(TlsTest, ServerWithoutClientCaIsRefusedAtStart) {
  server::CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = dir_.Sub("data2");
  options.tls.set_cert_file(dir_.Sub("csd.crt"));
  options.tls.set_key_file(dir_.Sub("csd.key"));
  auto csd = server::CsdServer::Start(options);
  EXPECT_EQ(csd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(csd.status().message().find("tls.ca_file"), std::string::npos);
}

TEST_F(TlsTest, RenewedServerCertificateIsServedWithoutRestart) {
  std::string cn;
  ASSERT_EQ(Call("operator", &cn).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(cn, "csd");

  // Renewal as a certificate manager does it: new files renamed into place.
  ASSERT_TRUE(pki_.MakeCert("ca", "renewed", "DNS:localhost,IP:127.0.0.1", "csd-renewed"));
  std::filesystem::rename(dir_.Sub("renewed.key"), dir_.Sub("csd.key"));
  std::filesystem::rename(dir_.Sub("renewed.crt"), dir_.Sub("csd.crt"));

  // csd re-reads the files every second (refresh_interval_s: 1); poll new
  // connections until one is served the new certificate. Not a timing
  // assertion: the bound only stops a broken watcher from hanging the test.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (cn != "csd-renewed" && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_EQ(Call("operator", &cn).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_EQ(cn, "csd-renewed");
}

}  // namespace
}  // namespace cosched
