#include "common/transport.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

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
  // A name that merely begins like a loopback address is not one.
  EXPECT_FALSE(IsLoopbackAddress("127.attacker.example:7443"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.1.example.com:7443"));
  EXPECT_FALSE(IsLoopbackAddress("[::2]:7443"));
  EXPECT_TRUE(IsLoopbackAddress("127.255.255.254"));
}

TEST(ValidateListenAddress, NeedsAHostAndAPortOf0To65535) {
  for (const char* ok : {"127.0.0.1:7443", "0.0.0.0:0", "[::1]:65535", "localhost:1"}) {
    EXPECT_OK(ValidateListenAddress("listen", ok)) << ok;
  }
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1", "127.0.0.1:",
                          ":7443", "127.0.0.1:-1", "127.0.0.1:+80", "127.0.0.1:80x", "::1:7443",
                          "[::1]7443", ""}) {
    absl::Status s = ValidateListenAddress("listen", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("listen '"), std::string::npos) << s;
  }
}

TEST(ParseServerList, OneAddressOrSeveralTrimmedInOrder) {
  absl::StatusOr<std::vector<std::string>> one = ParseServerList("server", "csd:7443");
  ASSERT_OK(one.status());
  EXPECT_EQ(*one, std::vector<std::string>{"csd:7443"});
  absl::StatusOr<std::vector<std::string>> several =
      ParseServerList("server", "csd-b:7443, unix:/run/cosched/csd.sock ,csd-a:1");
  ASSERT_OK(several.status());
  EXPECT_EQ(*several,
            (std::vector<std::string>{"csd-b:7443", "unix:/run/cosched/csd.sock", "csd-a:1"}));
}

TEST(ParseServerList, RefusesEmptyAndRepeatedEntriesAndTooMany) {
  for (const char* bad : {"", " ", "a:1,", ",a:1", "a:1,,b:2"}) {
    absl::StatusOr<std::vector<std::string>> list = ParseServerList("server", bad);
    EXPECT_EQ(list.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(list.status().message().find("without empty entries"), std::string::npos)
        << list.status();
  }
  absl::StatusOr<std::vector<std::string>> twice = ParseServerList("server", "a:1, a:1");
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(twice.status().message().find("server lists 'a:1' twice"), std::string::npos)
      << twice.status();
  std::string many;
  for (int i = 0; i <= kMaxServerAddresses; ++i) {
    many += (i ? ",csd-" : "csd-") + std::to_string(i) + ":7443";
  }
  absl::StatusOr<std::vector<std::string>> too_many = ParseServerList("server", many);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.status().message().find("at most 16"), std::string::npos)
      << too_many.status();
}

TEST(MakeServerCredentials, AKeyOrCaWithoutACertificateIsNotPlaintext) {
  v1::TlsConfig tls;
  tls.set_key_file("/etc/cosched/csd.key");
  tls.set_ca_file("/etc/cosched/ca.crt");
  auto creds = MakeServerCredentials("127.0.0.1:0", tls, false);
  EXPECT_EQ(creds.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(creds.status().message().find("tls.cert_file must be set"), std::string::npos)
      << creds.status();
  v1::TlsConfig no_key;
  no_key.set_cert_file("/etc/cosched/csd.crt");
  creds = MakeServerCredentials("127.0.0.1:0", no_key, false);
  EXPECT_NE(creds.status().message().find("tls.key_file must be set"), std::string::npos)
      << creds.status();
}

TEST(MakeChannelCredentials, ACertificateWithoutACaIsNotPlaintext) {
  v1::TlsConfig tls;
  tls.set_cert_file("/nonexistent/client.crt");
  tls.set_key_file("/nonexistent/client.key");
  auto creds = MakeChannelCredentials("127.0.0.1:7443", tls, false);
  EXPECT_EQ(creds.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(creds.status().message().find("tls.ca_file must be set"), std::string::npos)
      << creds.status();
  v1::TlsConfig half;
  half.set_ca_file("/nonexistent/ca.crt");
  half.set_cert_file("/nonexistent/client.crt");
  creds = MakeChannelCredentials("127.0.0.1:7443", half, false);
  EXPECT_NE(creds.status().message().find("must be set together"), std::string::npos)
      << creds.status();
}

TEST(MakeServerCredentials, PlaintextOnlyOnLoopbackUnlessInsecure) {
  v1::TlsConfig none;
  EXPECT_OK(MakeServerCredentials("127.0.0.1:0", none, false));
  auto refused = MakeServerCredentials("0.0.0.0:7443", none, false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("--insecure"), std::string::npos);
  EXPECT_OK(MakeServerCredentials("0.0.0.0:7443", none, true));
}

TEST(MakeServerCredentials, MissingCertificateFileIsNamed) {
  v1::TlsConfig tls;
  tls.set_cert_file("/nonexistent/csd.crt");
  tls.set_key_file("/nonexistent/csd.key");
  auto creds = MakeServerCredentials("0.0.0.0:7443", tls, false);
  EXPECT_EQ(creds.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(creds.status().message().find("/nonexistent/csd.crt"), std::string::npos);
  // Why, and as whom: a key only root can read stops csd (user cosched).
  EXPECT_NE(creds.status().message().find(
                absl::StrCat("cannot read tls.cert_file /nonexistent/csd.crt: No such file or "
                             "directory (as uid ", geteuid(), ")")),
            std::string::npos)
      << creds.status().message();
}

TEST(MakeChannelCredentials, PlaintextRule) {
  v1::TlsConfig none;
  EXPECT_OK(MakeChannelCredentials("localhost:7443", none, false));
  EXPECT_FALSE(MakeChannelCredentials("10.1.1.1:7443", none, false).ok());
}

TEST(StatusConversion, KeepsCodeAndMessage) {
  absl::Status s = absl::NotFoundError("vm 'x' not found");
  grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(g.error_message(), "vm 'x' not found");
  EXPECT_EQ(FromGrpcStatus(g), s);
  EXPECT_OK(ToGrpcStatus(absl::OkStatus()));
}

}  // namespace
}  // namespace cosched
