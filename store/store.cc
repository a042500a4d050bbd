#include "store/store.h"

#include <future>
#include <utility>

#include "absl/strings/match.h"

namespace cosched::store {

absl::string_view TenantOfTrustGroup(absl::string_view group) {
  return group.substr(0, group.find('/'));
}

bool TrustGroupOfTenant(absl::string_view group, absl::string_view tenant) {
  return !tenant.empty() && group.size() > tenant.size() && absl::StartsWith(group, tenant) &&
         group[tenant.size()] == '/';
}

absl::Status Store::WriteSync(TxnFn fn) {
  std::promise<absl::Status> promise;
  std::future<absl::Status> result = promise.get_future();
  Write(std::move(fn), [&promise](absl::Status status) {
    promise.set_value(std::move(status));
  });
  return result.get();
}

}  // namespace cosched::store
