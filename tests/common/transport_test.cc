#include "common/transport.h"

#include "gtest/gtest.h"

namespace cosched {
namespace {

TEST(IsLoopbackAddress, KnowsLoopback) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:7443"));
  EXPECT_TRUE(IsLoopbackAddress("127.1.2.3:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:7443"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:7443"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:7443"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:7443"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:7443"));
  EXPECT_FALSE(IsLoopbackAddress("csd.example.com:7443"));
}

TEST(MakeServerCredentials, PlaintextOnlyOnLoopbackUnlessInsecure) {
  v1::TlsConfig none;
  EXPECT_TRUE(MakeServerCredentials("127.0.0.1:0", none, false).ok());
  auto refused = MakeServerCredentials("0.0.0.0:7443", none, false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("--insecure"), std::string::npos);
  EXPECT_TRUE(MakeServerCredentials("0.0.0.0:7443", none, true).ok());
}

TEST(MakeServerCredentials, MissingCertificateFileIsNamed) {
  v1::TlsConfig tls;
  tls.set_cert_file("/nonexistent/csd.crt");
  tls.set_key_file("/nonexistent/csd.key");
  auto creds = MakeServerCredentials("0.0.0.0:7443", tls, false);
  EXPECT_EQ(creds.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(creds.status().message().find("/nonexistent/csd.crt"), std::string::npos);
}

TEST(MakeChannelCredentials, PlaintextRule) {
  v1::TlsConfig none;
  EXPECT_TRUE(MakeChannelCredentials("localhost:7443", none, false).ok());
  EXPECT_FALSE(MakeChannelCredentials("10.1.1.1:7443", none, false).ok());
}

TEST(StatusConversion, KeepsCodeAndMessage) {
  absl::Status s = absl::NotFoundError("vm 'x' not found");
  grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(g.error_message(), "vm 'x' not found");
  EXPECT_EQ(FromGrpcStatus(g), s);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace cosched
