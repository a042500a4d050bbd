#include "common/transport.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

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

absl::StatusOr<unsigned int> RefreshInterval(const v1::TlsConfig& tls) {
  if (tls.refresh_interval_s() == 0) return kDefaultTlsRefreshSeconds;
  if (tls.refresh_interval_s() < 1 || tls.refresh_interval_s() > 86400) {
    return absl::InvalidArgumentError(
        "tls.refresh_interval_s must be between 1 and 86400 (0 means 60)");
  }
  return static_cast<unsigned int>(tls.refresh_interval_s());
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
  // Read once here so that a bad path fails start-up with its name; the
  // provider reads them again, and again on each refresh.
  for (auto [what, path] : {std::pair{"tls.cert_file", &tls.cert_file()},
                            std::pair{"tls.key_file", &tls.key_file()}}) {
    auto pem = ReadPem(what, *path);
    if (!pem.ok()) return pem.status();
  }
  if (tls.ca_file().empty()) {
    return absl::FailedPreconditionError(
        "tls.ca_file must be set with tls.cert_file: csd requires and "
        "verifies client certificates");
  }
  auto ca = ReadPem("tls.ca_file", tls.ca_file());
  if (!ca.ok()) return ca.status();
  auto interval = RefreshInterval(tls);
  if (!interval.ok()) return interval.status();
  grpc::experimental::TlsServerCredentialsOptions options(
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          tls.key_file(), tls.cert_file(), tls.ca_file(), *interval));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(absl::string_view target, const v1::TlsConfig& tls,
                       bool insecure) {
  if (tls.ca_file().empty()) {
    absl::Status s = PlaintextAllowed(target, insecure);
    if (!s.ok()) return s;
    return grpc::InsecureChannelCredentials();
  }
  auto ca = ReadPem("tls.ca_file", tls.ca_file());
  if (!ca.ok()) return ca.status();
  auto interval = RefreshInterval(tls);
  if (!interval.ok()) return interval.status();
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider;
  if (tls.cert_file().empty()) {
    provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            tls.ca_file(), *interval);
  } else {
    for (auto [what, path] : {std::pair{"tls.cert_file", &tls.cert_file()},
                              std::pair{"tls.key_file", &tls.key_file()}}) {
      auto pem = ReadPem(what, *path);
      if (!pem.ok()) return pem.status();
    }
    provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            tls.key_file(), tls.cert_file(), tls.ca_file(), *interval);
  }
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider);
  options.watch_root_certs();
  if (!tls.cert_file().empty()) options.watch_identity_key_cert_pairs();
  return grpc::experimental::TlsCredentials(options);
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
