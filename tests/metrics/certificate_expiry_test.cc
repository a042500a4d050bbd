// cosched_tls_certificate_not_after_seconds (issue #38): when the
// certificates a daemon presents and trusts expire, read from the files.
#include "metrics/certificate_expiry.h"

#include <ctime>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_pki.h"

namespace cosched::metrics {
namespace {

int64_t Utc(int year, int month, int day) {
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  return static_cast<int64_t>(timegm(&tm));
}

class CertificateExpiryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pki_.MakeCa("ca"));
    ASSERT_TRUE(pki_.MakeCertByCa("ca", "late", "DNS:localhost", "20250101000000Z",
                                  "20400102000000Z"));
    ASSERT_TRUE(pki_.MakeCertByCa("ca", "soon", "DNS:localhost", "20250101000000Z",
                                  "20300601000000Z"));
  }
  std::string Path(const std::string& name) { return dir_.path() + "/" + name; }

  cosched::testing::TempDir dir_;
  cosched::testing::TestPki pki_{dir_.path()};
};

TEST_F(CertificateExpiryTest, TheEarliestNotAfterOfAFileOrABundle) {
  absl::StatusOr<int64_t> late = EarliestNotAfter(Path("late.crt"));
  ASSERT_OK(late);
  EXPECT_EQ(*late, Utc(2040, 1, 2));
  // A bundle expires with its first certificate to.
  std::ofstream(Path("bundle.crt"))
      << std::ifstream(Path("late.crt")).rdbuf();
  std::ofstream(Path("bundle.crt"), std::ios::app)
      << std::ifstream(Path("soon.crt")).rdbuf();
  absl::StatusOr<int64_t> bundle = EarliestNotAfter(Path("bundle.crt"));
  ASSERT_OK(bundle);
  EXPECT_EQ(*bundle, Utc(2030, 6, 1));
  EXPECT_EQ(EarliestNotAfter(Path("missing.crt")).status().code(), absl::StatusCode::kNotFound);
  std::ofstream(Path("junk.crt")) << "not a certificate\n";
  absl::StatusOr<int64_t> junk = EarliestNotAfter(Path("junk.crt"));
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(junk.status().message()), ::testing::HasSubstr("junk.crt"));
}

TEST_F(CertificateExpiryTest, OneSeriesPerFileThatReadsNoneWithoutTls) {
  ScrapeGauges gauges;
  TlsFiles files{Path("soon.crt"), Path("ca.crt")};
  AddCertificateExpiry(gauges, [&] { return files; });
  auto families = gauges.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "cosched_tls_certificate_not_after_seconds");
  ASSERT_EQ(families[0].metric.size(), 2u);
  EXPECT_EQ(families[0].metric[0].label[0].value, "cert");
  EXPECT_EQ(families[0].metric[0].gauge.value, static_cast<double>(Utc(2030, 6, 1)));
  EXPECT_EQ(families[0].metric[1].label[0].value, "ca");
  // A renewed file shows at the next scrape; plaintext has no series.
  files.cert_file = Path("late.crt");
  EXPECT_EQ(gauges.Collect()[0].metric[0].gauge.value, static_cast<double>(Utc(2040, 1, 2)));
  files = {};
  EXPECT_TRUE(gauges.Collect()[0].metric.empty());
}

}  // namespace
}  // namespace cosched::metrics
