#include "metrics/metrics_http.h"

#include <exception>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"

namespace cosched::metrics {
namespace {

// civetweb takes numeric addresses only; say so here rather than let it
// fail with "possible problem binding to port".
absl::Status CheckListen(absl::string_view listen) {
  const size_t colon = listen.rfind(':');
  absl::string_view host =
      colon == absl::string_view::npos ? "" : listen.substr(0, colon);
  absl::string_view port =
      colon == absl::string_view::npos ? "" : listen.substr(colon + 1);
  int port_number = -1;
  bool host_ok = !host.empty();
  if (host_ok && host.front() == '[') {
    host_ok = host.size() > 2 && host.back() == ']';
  } else {
    for (char c : host) host_ok = host_ok && (absl::ascii_isdigit(c) || c == '.');
  }
  if (!host_ok || !absl::SimpleAtoi(port, &port_number) || port_number < 0 ||
      port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics_listen must be IPv4 host:port or [IPv6]:port with a numeric "
        "address (or \"off\"), got \"",
        listen, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

std::string NormalizeMetricsListen(absl::string_view value) {
  if (value == "off") return "";
  return std::string(value);
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables) {
  if (absl::Status valid = CheckListen(listen); !valid.ok()) return valid;
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  try {
    // One thread serves: scrapes are rare and short.
    server->exposer_ = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", listen,
        " (address in use, or not an address of this host?): ", e.what()));
  }
  for (const auto& collectable : collectables) {
    server->exposer_->RegisterCollectable(collectable);
  }
  server->collectables_ = std::move(collectables);
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  server->port_ = ports.empty() ? 0 : ports.front();
  server->address_ =
      absl::StrCat(listen.substr(0, listen.rfind(':')), ":", server->port_);
  return server;
}

MetricsHttpServer::~MetricsHttpServer() = default;

}  // namespace cosched::metrics
