#include "store/store.h"

#include <future>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/status_macros.h"

namespace cosched::store {

absl::string_view TenantOfTrustGroup(absl::string_view group) {
  return group.substr(0, group.find('/'));
}

bool TrustGroupOfTenant(absl::string_view group, absl::string_view tenant) {
  return !tenant.empty() && group.size() > tenant.size() && absl::StartsWith(group, tenant) &&
         group[tenant.size()] == '/';
}

absl::StatusOr<std::vector<v1::VM>> ListAllVms(Transaction& txn, const VmFilter& filter) {
  // At most this many a read: a page of etcd's keys stays well under its
  // response limit.
  constexpr int kPage = 1000;
  std::vector<v1::VM> all;
  Page page;
  page.limit = kPage;
  while (true) {
    ASSIGN_OR_RETURN(std::vector<v1::VM> batch, txn.ListVms(filter, page));
    if (batch.empty()) break;
    page.after = batch.back().vm_id();
    for (v1::VM& vm : batch) all.push_back(std::move(vm));
    if (static_cast<int>(batch.size()) < page.limit) break;
  }
  return all;
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
