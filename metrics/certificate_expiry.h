// cosched_tls_certificate_not_after_seconds{file}: when the certificates a
// daemon presents (file="cert") and trusts (file="ca") expire, so that an
// alert fires days before a fleet's mTLS breaks (issue #38). Read from the
// files at each scrape: a renewed file, which the daemons pick up without a
// restart, shows at once.
#ifndef COSCHED_METRICS_CERTIFICATE_EXPIRY_H_
#define COSCHED_METRICS_CERTIFICATE_EXPIRY_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "metrics/scrape_gauges.h"

namespace cosched::metrics {

// The earliest notAfter, in seconds since the Unix epoch, of the PEM
// certificates in `path` (a bundle's first to expire); NOT_FOUND or
// INVALID_ARGUMENT naming the file when it cannot be read or holds none.
absl::StatusOr<int64_t> EarliestNotAfter(const std::string& path);

// The daemon's certificate and CA bundle, as it uses them now (empty: none,
// plaintext).
struct TlsFiles {
  std::string cert_file;
  std::string ca_file;
};

// Adds the family to `gauges`: one series per file that is set and reads;
// a file that does not read has no series (its daemon fails its TLS
// handshakes and logs why).
void AddCertificateExpiry(ScrapeGauges& gauges, std::function<TlsFiles()> files);

}  // namespace cosched::metrics

#endif  // COSCHED_METRICS_CERTIFICATE_EXPIRY_H_
