#include "tests/compat/compat_support.h"

#include "tests/testing/trusted_plaintext.h"

namespace cosched::compat {

absl::StatusOr<std::unique_ptr<server::CsdServer>> StartCsd(
    const std::string& sqlite_dir, const std::optional<store::EtcdStoreOptions>& etcd) {
  server::CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = sqlite_dir;
  options.metrics_listen = "";
  options.etcd_store = etcd;
  testing::TrustPlaintextCallers(options.authz);
  return server::CsdServer::Start(options);
}

}  // namespace cosched::compat
