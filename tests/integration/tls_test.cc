// csd with TLS and client-certificate verification: a client with a
// certificate from the configured CA is served; one without a certificate,
// or with one from another CA, is refused. Certificates are made here with
// openssl.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/transport.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/csd_server.h"
#include "tests/testing/temp_dir.h"

namespace cosched {
namespace {

// Runs a shell command in `dir`; true when it exits 0.
bool Shell(const std::string& dir, const std::string& command) {
  std::string full = "cd '" + dir + "' && (" + command + ") >openssl.log 2>&1";
  return std::system(full.c_str()) == 0;
}

// A CA and a certificate signed by it, for `name` with SAN `san`.
bool MakeCa(const std::string& dir, const std::string& ca) {
  return Shell(dir, "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=" + ca +
                        " -keyout " + ca + ".key -out " + ca + ".crt");
}
bool MakeCert(const std::string& dir, const std::string& ca, const std::string& name,
              const std::string& san) {
  return Shell(dir, "openssl req -newkey rsa:2048 -nodes -subj /CN=" + name + " -keyout " +
                        name + ".key -out " + name + ".csr && printf 'subjectAltName=" + san +
                        "' >" + name + ".ext && openssl x509 -req -in " + name + ".csr -CA " +
                        ca + ".crt -CAkey " + ca + ".key -CAcreateserial -days 1 -extfile " +
                        name + ".ext -out " + name + ".crt");
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string d = dir_.path();
    ASSERT_TRUE(MakeCa(d, "ca")) << "openssl failed: see " << d << "/openssl.log";
    ASSERT_TRUE(MakeCa(d, "other-ca"));
    ASSERT_TRUE(MakeCert(d, "ca", "csd", "DNS:localhost,IP:127.0.0.1"));
    ASSERT_TRUE(MakeCert(d, "ca", "operator", "URI:spiffe://test/operator"));
    ASSERT_TRUE(MakeCert(d, "other-ca", "intruder", "URI:spiffe://test/intruder"));
    server::CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = dir_.Sub("data");
    options.tls.set_cert_file(dir_.Sub("csd.crt"));
    options.tls.set_key_file(dir_.Sub("csd.key"));
    options.tls.set_ca_file(dir_.Sub("ca.crt"));
    auto csd = server::CsdServer::Start(options);
    ASSERT_TRUE(csd.ok()) << csd.status();
    csd_ = std::move(*csd);
  }

  // A GetVM call with client certificate `client` ("" for none).
  grpc::Status Call(const std::string& client) {
    v1::TlsConfig tls;
    tls.set_ca_file(dir_.Sub("ca.crt"));
    if (!client.empty()) {
      tls.set_cert_file(dir_.Sub(client + ".crt"));
      tls.set_key_file(dir_.Sub(client + ".key"));
    }
    auto credentials = MakeChannelCredentials(csd_->address(), tls, false);
    EXPECT_TRUE(credentials.ok());
    auto stub = v1::ControlPlane::NewStub(grpc::CreateChannel(csd_->address(), *credentials));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetVMRequest request;
    request.set_vm_id("vm-1");
    v1::VM vm;
    return stub->GetVM(&context, request, &vm);
  }

  cosched::testing::TempDir dir_;
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

}  // namespace
}  // namespace cosched
