#include "common/transport.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"

namespace cosched {
namespace {

absl::string_view HostPart(absl::string_view host_port) {
  if (absl::StartsWith(host_port, "[")) {
    size_t end = host_port.find(']');
    return end == absl::string_view::npos ? host_port
                                         : host_port.substr(1, end - 1);
  }
  size_t colon = host_port.rfind(':');
  return colon == absl::string_view::npos ? host_port
                                         : host_port.substr(0, colon);
}

absl::StatusOr<std::string> ReadPem(absl::string_view what,
                                    const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", what, " ", path));
  }
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::Status PlaintextAllowed(absl::string_view address, bool insecure) {
  if (insecure || IsLoopbackAddress(address)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing plaintext on non-loopback address ", address,
      ": configure tls (cert_file, key_file, ca_file) or pass --insecure"));
}

}  // namespace

bool IsLoopbackAddress(absl::string_view host_port) {
  absl::string_view host = HostPart(host_port);
  return host == "localhost" || host == "::1" ||
         absl::StartsWith(host, "127.");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    absl::string_view listen, const v1::TlsConfig& tls, bool insecure) {
  if (tls.cert_file().empty()) {
    absl::Status s = PlaintextAllowed(listen, insecure);
    if (!s.ok()) return s;
    return grpc::InsecureServerCredentials();
  }
  auto cert = ReadPem("tls.cert_file", tls.cert_file());
  if (!cert.ok()) return cert.status();
  auto key = ReadPem("tls.key_file", tls.key_file());
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(
      tls.ca_file().empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!tls.ca_file().empty()) {
    auto ca = ReadPem("tls.ca_file", tls.ca_file());
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(absl::string_view target, const v1::TlsConfig& tls,
                       bool insecure) {
  if (tls.ca_file().empty()) {
    absl::Status s = PlaintextAllowed(target, insecure);
    if (!s.ok()) return s;
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  auto ca = ReadPem("tls.ca_file", tls.ca_file());
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *ca;
  if (!tls.cert_file().empty()) {
    auto cert = ReadPem("tls.cert_file", tls.cert_file());
    if (!cert.ok()) return cert.status();
    auto key = ReadPem("tls.key_file", tls.key_file());
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace cosched
