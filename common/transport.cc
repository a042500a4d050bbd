#include "common/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
  errno = 0;
  std::ifstream in(path);
  if (!in) {
    // Most often a key only root may read, for a daemon that runs as
    // another user (csd as cosched): say which uid tried.
    const int err = errno;
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read ", what, " ", path, ": ", err != 0 ? std::strerror(err) : "open failed",
        " (as uid ", geteuid(), ")"));
  }
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::Status PlaintextAllowed(absl::string_view address, bool insecure) {
  if (insecure || IsLoopbackAddress(address) || IsUnixTarget(address)) return absl::OkStatus();
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

bool IsUnixTarget(absl::string_view target) {
  return absl::StartsWith(target, "unix:") && target.size() > 5;
}

bool IsLoopbackAddress(absl::string_view host_port) {
  const std::string host(HostPart(host_port));
  if (host == "localhost") return true;
  // Numeric addresses only: a name such as 127.example.com is not one.
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 &&
         IN6_IS_ADDR_LOOPBACK(&v6);
}

absl::Status ValidateListenAddress(absl::string_view field, absl::string_view listen) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " '", listen, "' must be host:port or [IPv6]:port with a port of "
        "0-65535 (0: any free port): ", why));
  };
  size_t colon = listen.rfind(':');
  if (absl::StartsWith(listen, "[")) {
    size_t end = listen.find(']');
    if (end == absl::string_view::npos || end + 1 != colon) return bad("no ]: before the port");
  } else if (colon == absl::string_view::npos) {
    return bad("no port");
  }
  if (HostPart(listen).empty()) return bad("no host");
  if (!absl::StartsWith(listen, "[") && absl::StrContains(HostPart(listen), ':')) {
    return bad("an IPv6 address goes in [brackets]");
  }
  absl::string_view port = listen.substr(colon + 1);
  int value = 0;
  if (port.empty() || port.size() > 5 || !absl::SimpleAtoi(port, &value) ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      value > 65535) {
    return bad(absl::StrCat("port '", port, "' is not a number in 0-65535"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ParseServerList(absl::string_view field,
                                                         absl::string_view list) {
  std::vector<std::string> addresses;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " '", list, "' must be one csd address or several, comma-separated, "
          "without empty entries"));
    }
    if (std::find(addresses.begin(), addresses.end(), entry) != addresses.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " lists '", entry, "' twice: each csd replica once"));
    }
    addresses.emplace_back(entry);
  }
  if (addresses.size() > static_cast<size_t>(kMaxServerAddresses)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " lists ", addresses.size(),
                                                   " addresses; at most ",
                                                   kMaxServerAddresses));
  }
  return addresses;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    absl::string_view listen, const v1::TlsConfig& tls, bool insecure) {
  if (tls.cert_file().empty() && (!tls.key_file().empty() || !tls.ca_file().empty())) {
    return absl::FailedPreconditionError(
        "tls.cert_file must be set when tls.key_file or tls.ca_file is: without it "
        "csd would serve plaintext");
  }
  if (!tls.cert_file().empty() && tls.key_file().empty()) {
    return absl::FailedPreconditionError("tls.key_file must be set with tls.cert_file");
  }
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
  if (tls.ca_file().empty() && (!tls.cert_file().empty() || !tls.key_file().empty())) {
    return absl::FailedPreconditionError(
        "tls.ca_file must be set when tls.cert_file or tls.key_file is: without it "
        "the connection would be plaintext and the certificate unused");
  }
  if (tls.cert_file().empty() != tls.key_file().empty()) {
    return absl::FailedPreconditionError(
        "tls.cert_file and tls.key_file must be set together");
  }
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
