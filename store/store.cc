#include "store/store.h"

#include <future>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"

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

namespace {

// Whether the stored observation says what `now` says, csd's report_time
// aside.
bool SameObservation(const v1::VMObservation& stored, const v1::VMObservation& now) {
  google::protobuf::util::MessageDifferencer same;
  same.IgnoreField(v1::VMEnforcement::descriptor()->FindFieldByName("report_time"));
  return same.Compare(stored, now);
}

template <typename Vms>
absl::StatusOr<std::vector<std::string>> ReplaceObservationsOf(Transaction& txn, absl::string_view host_id,
                                          const Vms& vms,
                                          const google::protobuf::Timestamp* report_time) {
  absl::flat_hash_map<absl::string_view, const v1::VMObservation*> given;
  given.reserve(vms.size());
  for (const v1::VMObservation& vm : vms) {
    if (vm.vm_id().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReplaceObservations: host ", host_id, " reports a VM without vm_id"));
    }
    if (!given.emplace(vm.vm_id(), &vm).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ReplaceObservations: host ", host_id, " reports vm ", vm.vm_id(), " twice"));
    }
  }
  ASSIGN_OR_RETURN(std::vector<v1::VMObservation> stored, txn.ListHostObservations(host_id));
  std::vector<std::string> written;
  for (const v1::VMObservation& old : stored) {
    if (given.contains(old.vm_id())) continue;
    RETURN_IF_ERROR(txn.DeleteObservation(host_id, old.vm_id()));
    written.push_back(old.vm_id());
  }
  absl::flat_hash_map<absl::string_view, const v1::VMObservation*> before;
  before.reserve(stored.size());
  for (const v1::VMObservation& old : stored) before.emplace(old.vm_id(), &old);
  for (const v1::VMObservation& vm : vms) {
    auto old = before.find(vm.vm_id());
    if (old != before.end() && SameObservation(*old->second, vm)) continue;
    if (report_time == nullptr) {
      RETURN_IF_ERROR(txn.PutObservation(host_id, vm));
    } else {
      v1::VMObservation stamped = vm;
      *stamped.mutable_enforcement()->mutable_report_time() = *report_time;
      RETURN_IF_ERROR(txn.PutObservation(host_id, stamped));
    }
    written.push_back(vm.vm_id());
  }
  return written;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReplaceObservations(
    Transaction& txn, absl::string_view host_id,
    const google::protobuf::RepeatedPtrField<v1::VMObservation>& vms,
    const google::protobuf::Timestamp* report_time) {
  return ReplaceObservationsOf(txn, host_id, vms, report_time);
}

absl::StatusOr<std::vector<std::string>> ReplaceObservations(
    Transaction& txn, absl::string_view host_id, const std::vector<v1::VMObservation>& vms) {
  return ReplaceObservationsOf(txn, host_id, vms, nullptr);
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
