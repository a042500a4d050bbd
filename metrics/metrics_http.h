// The /metrics endpoint of csd and cs-agent: prometheus-cpp's Exposer (an
// embedded civetweb server) behind an absl::Status start, since the Exposer
// reports a bad or busy address by throwing.
#ifndef COSCHED_METRICS_METRICS_HTTP_H_
#define COSCHED_METRICS_METRICS_HTTP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"

namespace prometheus {
class Exposer;
}

namespace cosched::metrics {

// What a `metrics_listen` config value or `--metrics-listen` flag turns
// into: "" for "off" (or ""), else the value itself.
std::string NormalizeMetricsListen(absl::string_view value);

// Serves the text exposition of its collectables at /metrics until
// destroyed. Thread-safe (scrapes run on civetweb's threads; the
// collectables must be thread-safe).
class MetricsHttpServer {
 public:
  // `listen` is IPv4 "host:port" or IPv6 "[host]:port"; port 0 picks a free
  // port (see port()). INVALID_ARGUMENT when `listen` is not of that form;
  // UNAVAILABLE naming the address when it cannot be bound (in use, or not
  // an address of this host).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables);
  ~MetricsHttpServer();

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  // host:port with the bound port, for logs and scrapers.
  const std::string& address() const { return address_; }

 private:
  MetricsHttpServer() = default;

  // The Exposer holds weak pointers: these keep the collectables alive for
  // as long as they are served.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  std::string address_;
};

}  // namespace cosched::metrics

#endif  // COSCHED_METRICS_METRICS_HTTP_H_
