// EtcdTransaction's observations (store.h): each host's in one key,
// reports/<host_id>, indexed by obs/<vm key>/<host_id> (etcd_store.h). A
// write function's puts and deletes edit the parsed report, which
// FinishWrites serializes once.
#include <algorithm>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "store/etcd_transaction.h"

namespace cosched::store {

absl::StatusOr<std::optional<EtcdReport>> EtcdTransaction::GetReport(absl::string_view host_id) {
  if (auto open = open_reports_.find(host_id); open != open_reports_.end()) {
    if (open->second.report.vms_size() == 0) return std::optional<EtcdReport>();
    return std::optional<EtcdReport>(open->second.report);
  }
  const std::string key = Key("reports", host_id);
  ASSIGN_OR_RETURN(std::optional<std::string> value, Get(key));
  if (!value) return std::optional<EtcdReport>();
  ASSIGN_OR_RETURN(EtcdReport report, Parse<EtcdReport>(key, *value, "host report"));
  return std::optional<EtcdReport>(std::move(report));
}

namespace {

// The keys a report's VMs are found by (their ids and UUIDs).
std::set<std::string> ReportKeys(const EtcdReport& report) {
  std::set<std::string> keys;
  for (const v1::VMObservation& vm : report.vms()) {
    for (const std::string* key : {&vm.vm_id(), &vm.uuid()}) {
      if (!key->empty()) keys.insert(*key);
    }
  }
  return keys;
}

}  // namespace

absl::StatusOr<EtcdTransaction::OpenReport*> EtcdTransaction::Open(absl::string_view host_id) {
  if (auto open = open_reports_.find(host_id); open != open_reports_.end()) return &open->second;
  ASSIGN_OR_RETURN(std::optional<EtcdReport> stored, GetReport(host_id));
  OpenReport& open = open_reports_[std::string(host_id)];
  if (stored) {
    open.stored = true;
    open.keys_before = ReportKeys(*stored);
    open.report = *std::move(stored);
  }
  return &open;
}

absl::Status EtcdTransaction::PutObservation(absl::string_view host_id,
                                             const v1::VMObservation& vm) {
  RETURN_IF_ERROR(RequireWrite("PutObservation"));
  if (host_id.empty()) return absl::InvalidArgumentError("PutObservation: host_id is empty");
  if (vm.vm_id().empty()) return absl::InvalidArgumentError("PutObservation: vm_id is empty");
  RETURN_IF_ERROR(CheckComponent("PutObservation: host_id", host_id));
  for (const std::string* key : {&vm.vm_id(), &vm.uuid()}) {
    if (!key->empty()) RETURN_IF_ERROR(CheckComponent("PutObservation: VM key", *key));
  }
  ASSIGN_OR_RETURN(OpenReport * open, Open(host_id));
  auto* vms = open->report.mutable_vms();
  // Kept in vm_id order: ListHostObservations answers in it.
  auto at = std::lower_bound(vms->begin(), vms->end(), vm.vm_id(),
                             [](const v1::VMObservation& o, const std::string& id) {
                               return o.vm_id() < id;
                             });
  if (at != vms->end() && at->vm_id() == vm.vm_id()) {
    *at = vm;
    return absl::OkStatus();
  }
  const int index = static_cast<int>(at - vms->begin());
  *vms->Add() = vm;
  for (int i = vms->size() - 1; i > index; --i) vms->SwapElements(i, i - 1);
  return absl::OkStatus();
}

absl::Status EtcdTransaction::DeleteObservation(absl::string_view host_id,
                                                absl::string_view vm_id) {
  RETURN_IF_ERROR(RequireWrite("DeleteObservation"));
  ASSIGN_OR_RETURN(OpenReport * open, Open(host_id));
  auto* vms = open->report.mutable_vms();
  auto at = std::find_if(vms->begin(), vms->end(),
                         [&](const v1::VMObservation& o) { return o.vm_id() == vm_id; });
  if (at == vms->end()) {
    return absl::NotFoundError(
        absl::StrCat("host ", host_id, " has no observation of vm ", vm_id));
  }
  vms->erase(at);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::VMObservation>> EtcdTransaction::ListHostObservations(
    absl::string_view host_id) {
  ASSIGN_OR_RETURN(std::optional<EtcdReport> report, GetReport(host_id));
  std::vector<v1::VMObservation> vms;
  if (!report) return vms;
  vms.assign(std::make_move_iterator(report->mutable_vms()->begin()),
             std::make_move_iterator(report->mutable_vms()->end()));
  // Reports written before observations were kept in vm_id order.
  std::sort(vms.begin(), vms.end(), [](const v1::VMObservation& a, const v1::VMObservation& b) {
    return a.vm_id() < b.vm_id();
  });
  return vms;
}

void EtcdTransaction::FinishWrites() {
  // A host's report is one key; the index keys of the VMs it names change
  // only when a VM appears or goes, so a changed report is two puts
  // (report and meta) whatever its size.
  for (auto& [host_id, open] : open_reports_) {
    const std::set<std::string> after = ReportKeys(open.report);
    for (const std::string& key : open.keys_before) {
      if (!after.count(key)) Delete(absl::StrCat(Key("obs", key), "/", host_id));
    }
    for (const std::string& key : after) {
      if (!open.keys_before.count(key)) Put(absl::StrCat(Key("obs", key), "/", host_id), "");
    }
    if (open.report.vms_size() == 0) {
      if (open.stored) Delete(Key("reports", host_id));
      continue;
    }
    open.report.set_sequence(write_->meta.observation_sequence() + 1);
    write_->meta.set_observation_sequence(open.report.sequence());
    Put(Key("reports", host_id), Serialized(open.report));
  }
  open_reports_.clear();
}

absl::StatusOr<std::vector<Observation>> EtcdTransaction::ListObservations(
    absl::string_view key) {
  // The hosts whose stored reports name `key` (the index), and those whose
  // reports this function is changing (their index keys are written with
  // them, by FinishWrites).
  std::set<std::string, std::less<>> hosts;
  const std::string base = Key("obs", key) + "/";
  RETURN_IF_ERROR(Scan(base, etcd::PrefixEnd(base), 0,
                       [&](const std::string& index, const std::string&) -> absl::StatusOr<bool> {
                         hosts.emplace(LastPart(index));
                         return true;
                       }));
  for (const auto& [host_id, open] : open_reports_) hosts.insert(host_id);
  std::vector<std::pair<int64_t, Observation>> found;
  for (const std::string& host_id : hosts) {
    ASSIGN_OR_RETURN(std::optional<EtcdReport> report, GetReport(host_id));
    if (!report) continue;  // an index key without its report: nothing to show
    // A report this function changed is the newest.
    const int64_t sequence = open_reports_.contains(host_id)
                                 ? std::numeric_limits<int64_t>::max()
                                 : report->sequence();
    // The VM of that name, else the one of that UUID: a VM whose UUID is
    // another's name does not hide it.
    const v1::VMObservation* match = nullptr;
    for (const v1::VMObservation& vm : report->vms()) {
      if (vm.vm_id() == key) {
        match = &vm;
        break;
      }
      if (match == nullptr && vm.uuid() == key) match = &vm;
    }
    if (match != nullptr) found.push_back({sequence, Observation{host_id, *match}});
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<Observation> all;
  for (auto& [seq, observation] : found) all.push_back(std::move(observation));
  return all;
}

absl::StatusOr<std::optional<Observation>> EtcdTransaction::FindObservation(
    absl::string_view key) {
  ASSIGN_OR_RETURN(std::vector<Observation> all, ListObservations(key));
  if (all.empty()) return std::optional<Observation>();
  return std::optional<Observation>(std::move(all.front()));
}

}  // namespace cosched::store
