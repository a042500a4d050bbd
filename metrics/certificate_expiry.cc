#include "metrics/certificate_expiry.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <ctime>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cosched::metrics {

absl::StatusOr<int64_t> EarliestNotAfter(const std::string& path) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_file(path.c_str(), "r"), &BIO_free);
  if (bio == nullptr) {
    ERR_clear_error();
    return absl::NotFoundError(absl::StrCat("certificate file ", path, " cannot be read"));
  }
  bool any = false;
  int64_t earliest = 0;
  while (true) {
    std::unique_ptr<X509, decltype(&X509_free)> cert(
        PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
    if (cert == nullptr) break;
    std::tm tm{};
    if (ASN1_TIME_to_tm(X509_get0_notAfter(cert.get()), &tm) != 1) continue;
    const int64_t not_after = static_cast<int64_t>(timegm(&tm));
    if (!any || not_after < earliest) earliest = not_after;
    any = true;
  }
  ERR_clear_error();  // the end of the file reads as an error
  if (!any) {
    return absl::InvalidArgumentError(
        absl::StrCat("certificate file ", path, " holds no PEM certificate"));
  }
  return earliest;
}

void AddCertificateExpiry(ScrapeGauges& gauges, std::function<TlsFiles()> files) {
  gauges.AddFamily(
      "cosched_tls_certificate_not_after_seconds",
      "When the certificate this daemon presents (file=\"cert\") and the first of the CAs it "
      "trusts (file=\"ca\") to expire stop being valid, in seconds since the Unix epoch; read "
      "from the files at each scrape. No series without TLS or while a file does not read.",
      [files = std::move(files)] {
        std::vector<ScrapeGauges::Sample> samples;
        if (!files) return samples;
        const TlsFiles now = files();
        for (const auto& [label, path] : {std::pair{"cert", now.cert_file}, {"ca", now.ca_file}}) {
          if (path.empty()) continue;
          absl::StatusOr<int64_t> not_after = EarliestNotAfter(path);
          if (!not_after.ok()) continue;
          samples.emplace_back(prometheus::Labels{{"file", label}},
                               static_cast<double>(*not_after));
        }
        return samples;
      });
}

}  // namespace cosched::metrics
