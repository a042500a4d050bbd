// DesiredState's reads: single records and pages of VMs, tenant policies,
// hosts and audit records, sibling-sharing stats, and the messages of an
// agent's assignment stream. Kept apart from desired_state.cc, which holds
// the writes.
#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/labels.h"
#include "common/status_macros.h"
#include "absl/time/time.h"
#include "common/validation.h"
#include "google/protobuf/util/time_util.h"
#include "server/desired_state.h"
#include "server/desired_state_internal.h"
#include "server/metadata_tag.h"
#include "server/vm_presence.h"

namespace cosched::server {
namespace {

using internal::AllVms;
using internal::kMaxDetailLength;
using internal::kMaxPageSize;
using internal::kMaxTrustGroupLength;
using internal::PolicyOf;
using internal::ValidateOptionalId;
using google::protobuf::util::TimeUtil;

constexpr int kDefaultPageSize = 100;
constexpr char kPageTokenPrefix[] = "v1:";
constexpr int64_t kDefaultStatsSeconds = 300;

absl::StatusOr<store::Page> PageFrom(int32_t page_size,
                                     const std::string& page_token) {
  if (page_size < 0 || page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_size must be between 0 and ", kMaxPageSize, " (0 means ",
        kDefaultPageSize, ")"));
  }
  store::Page page;
  page.limit = page_size == 0 ? kDefaultPageSize : page_size;
  if (!page_token.empty()) {
    std::string decoded;
    if (!absl::WebSafeBase64Unescape(page_token, &decoded) ||
        !absl::StartsWith(decoded, kPageTokenPrefix)) {
      return absl::InvalidArgumentError(
          "page_token is not a token from a previous response");
    }
    page.after = decoded.substr(sizeof(kPageTokenPrefix) - 1);
  }
  return page;
}

std::string TokenAfter(const std::string& last_key) {
  return absl::WebSafeBase64Escape(absl::StrCat(kPageTokenPrefix, last_key));
}

// A full page has a next page when one more item follows its last key.
template <typename T, typename KeyFn, typename ListFn>
absl::StatusOr<std::string> NextToken(const std::vector<T>& items,
                                      const store::Page& page, KeyFn key,
                                      ListFn list) {
  if (items.empty() || static_cast<int>(items.size()) < page.limit) return "";
  store::Page probe;
  probe.after = key(items.back());
  probe.limit = 1;
  ASSIGN_OR_RETURN(auto more, list(probe));
  return more.empty() ? "" : TokenAfter(probe.after);
}

// What the agent of the VM's owner host last reported for it. An unchanged
// Report is not written (DesiredState::ApplyReport), so the time is that of
// the host's last Report when this csd has one.
absl::Status AddEnforcement(store::Transaction& txn, v1::VM& vm,
                            const std::function<std::optional<absl::Time>(
                                absl::string_view)>& last_report) {
  if (vm.host_id().empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto seen, txn.ListObservations(vm.vm_id()));
  for (const store::Observation& o : seen) {
    if (o.host_id != vm.host_id()) continue;
    *vm.mutable_enforcement() = o.vm.enforcement();
    std::optional<absl::Time> last = last_report(o.host_id);
    if (last && absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(
                    o.vm.enforcement().report_time())) < *last) {
      *vm.mutable_enforcement()->mutable_report_time() =
          TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(*last));
    }
    break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::VM> DesiredState::GetVm(const v1::GetVMRequest& request) {
  RETURN_IF_ERROR(ValidateId("vm_id", request.vm_id()));
  auto last_report = [this](absl::string_view host) { return LastReport(host); };
  v1::VM result;
  RETURN_IF_ERROR(store_->Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto vm, txn.GetVm(request.vm_id()));
    if (!vm) {
      ASSIGN_OR_RETURN(std::string why,
                       WhyNotTaggedFromMetadata(txn, request.vm_id(), tag_from_metadata_));
      return absl::NotFoundError(absl::StrCat("vm '", request.vm_id(), "' not found",
                                              why.empty() ? "" : ": it is not tagged; ", why));
    }
    result = std::move(*vm);
    return AddEnforcement(txn, result, last_report);
  }));
  return result;
}

absl::StatusOr<v1::ListVMsResponse> DesiredState::ListVms(
    const v1::ListVMsRequest& request) {
  RETURN_IF_ERROR(ValidateOptionalId("tenant_id", request.tenant_id()));
  RETURN_IF_ERROR(ValidateOptionalId("host_id", request.host_id()));
  if (request.trust_group().size() > kMaxTrustGroupLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trust_group must be at most ", kMaxTrustGroupLength, " bytes"));
  }
  ASSIGN_OR_RETURN(store::Page page,
                   PageFrom(request.page_size(), request.page_token()));
  store::VmFilter filter;
  filter.tenant_id = request.tenant_id();
  filter.host_id = request.host_id();
  filter.trust_group = request.trust_group();
  auto last_report = [this](absl::string_view host) { return LastReport(host); };
  v1::ListVMsResponse response;
  RETURN_IF_ERROR(store_->Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto vms, txn.ListVms(filter, page));
    ASSIGN_OR_RETURN(
        auto token,
        NextToken(vms, page, [](const v1::VM& vm) { return vm.vm_id(); },
                  [&](const store::Page& p) { return txn.ListVms(filter, p); }));
    response.set_next_page_token(token);
    for (auto& vm : vms) {
      RETURN_IF_ERROR(AddEnforcement(txn, vm, last_report));
      *response.add_vms() = std::move(vm);
    }
    return absl::OkStatus();
  }));
  return response;
}

absl::StatusOr<v1::TenantPolicy> DesiredState::GetTenantPolicy(
    const v1::GetTenantPolicyRequest& request) {
  RETURN_IF_ERROR(ValidateId("tenant_id", request.tenant_id()));
  v1::TenantPolicy result;
  RETURN_IF_ERROR(store_->Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(result, PolicyOf(txn, request.tenant_id()));
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<v1::ListTenantPoliciesResponse> DesiredState::ListTenantPolicies(
    const v1::ListTenantPoliciesRequest& request) {
  ASSIGN_OR_RETURN(store::Page page,
                   PageFrom(request.page_size(), request.page_token()));
  v1::ListTenantPoliciesResponse response;
  RETURN_IF_ERROR(store_->Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto policies, txn.ListTenantPolicies(page));
    ASSIGN_OR_RETURN(
        auto token,
        NextToken(policies, page,
                  [](const v1::TenantPolicy& p) { return p.tenant_id(); },
                  [&](const store::Page& p) { return txn.ListTenantPolicies(p); }));
    response.set_next_page_token(token);
    for (auto& p : policies) *response.add_policies() = std::move(p);
    return absl::OkStatus();
  }));
  return response;
}

absl::StatusOr<v1::Host> DesiredState::GetHost(const v1::GetHostRequest& request) {
  RETURN_IF_ERROR(ValidateId("host_id", request.host_id()));
  v1::Host result;
  RETURN_IF_ERROR(store_->Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto host, txn.GetHost(request.host_id()));
    if (!host) {
      return absl::NotFoundError(
          absl::StrCat("host '", request.host_id(), "' not found"));
    }
    result = std::move(*host);
    return absl::OkStatus();
  }));
  AddLiveness(result);
  return result;
}

absl::StatusOr<v1::ListHostsResponse> DesiredState::ListHosts(
    const v1::ListHostsRequest& request) {
  ASSIGN_OR_RETURN(store::Page page,
                   PageFrom(request.page_size(), request.page_token()));
  ASSIGN_OR_RETURN(const LabelSelector selector,
                   ParseLabelSelector("selector", request.selector()));
  v1::ListHostsResponse response;
  RETURN_IF_ERROR(store_->Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto hosts, txn.ListHosts(page));
    ASSIGN_OR_RETURN(
        auto token,
        NextToken(hosts, page, [](const v1::Host& h) { return h.host_id(); },
                  [&](const store::Page& p) { return txn.ListHosts(p); }));
    response.set_next_page_token(token);
    // A page holds the matching hosts of one page of the store's: fewer
    // than page_size, or none, before the last.
    for (auto& h : hosts) {
      if (!Matches(selector, h.labels())) continue;
      AddLiveness(h);
      *response.add_hosts() = std::move(h);
    }
    return absl::OkStatus();
  }));
  return response;
}

absl::StatusOr<v1::GetStatsResponse> DesiredState::GetStats(
    const v1::GetStatsRequest& request) {
  ASSIGN_OR_RETURN(StatsQuery query, QueryStats(request));
  if (query.stats.windows() == 0) return absl::NotFoundError(query.not_found);
  return std::move(query.stats);
}

absl::StatusOr<DesiredState::StatsQuery> DesiredState::QueryStats(
    const v1::GetStatsRequest& request) {
  if (request.window_seconds() < 0 ||
      request.window_seconds() > kMaxStatsSpanSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window_seconds must be between 1 and ", kMaxStatsSpanSeconds,
        " (0 means ", kDefaultStatsSeconds, ")"));
  }
  const int64_t span = request.window_seconds() == 0 ? kDefaultStatsSeconds
                                                     : request.window_seconds();
  v1::GetStatsResponse response;
  std::string subject;
  switch (request.subject_case()) {
    case v1::GetStatsRequest::kVmId:
      RETURN_IF_ERROR(ValidateId("vm_id", request.vm_id()));
      subject = absl::StrCat("vm '", request.vm_id(), "'");
      response = stats_.QueryVms({request.vm_id()}, span);
      break;
    case v1::GetStatsRequest::kHostId:
      RETURN_IF_ERROR(ValidateId("host_id", request.host_id()));
      subject = absl::StrCat("host '", request.host_id(), "'");
      response = stats_.QueryHost(request.host_id(), span);
      break;
    case v1::GetStatsRequest::kTenant:
    case v1::GetStatsRequest::kTrustGroup: {
      store::VmFilter filter;
      if (request.has_tenant()) {
        RETURN_IF_ERROR(ValidateId("tenant", request.tenant()));
        filter.tenant_id = request.tenant();
        subject = absl::StrCat("tenant '", request.tenant(), "'");
      } else {
        if (request.trust_group().empty() ||
            request.trust_group().size() > kMaxTrustGroupLength) {
          return absl::InvalidArgumentError(absl::StrCat(
              "trust_group must be 1-", kMaxTrustGroupLength, " bytes"));
        }
        filter.trust_group = request.trust_group();
        subject = absl::StrCat("trust group '", request.trust_group(), "'");
      }
      std::vector<std::string> vm_ids;
      RETURN_IF_ERROR(store_->Read([&](store::Transaction& txn) -> absl::Status {
        ASSIGN_OR_RETURN(auto vms, AllVms(txn, filter));
        for (const v1::VM& vm : vms) vm_ids.push_back(vm.vm_id());
        return absl::OkStatus();
      }));
      response = stats_.QueryVms(vm_ids, span);
      break;
    }
    case v1::GetStatsRequest::SUBJECT_NOT_SET:
      return absl::InvalidArgumentError(
          "one of vm_id, host_id, tenant, trust_group is required");
  }
  return StatsQuery{std::move(response), absl::StrCat("no stats were reported for ", subject,
                                                     " in the last ", span, " s")};
}

absl::StatusOr<v1::ListAuditRecordsResponse> DesiredState::ListAuditRecords(
    const v1::ListAuditRecordsRequest& request) {
  RETURN_IF_ERROR(ValidateOptionalId("subject", request.subject()));
  if (request.who().size() > kMaxDetailLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("who must be at most ", kMaxDetailLength, " bytes"));
  }
  if (request.since_unix_ns() < 0) {
    return absl::InvalidArgumentError("since_unix_ns must not be negative");
  }
  ASSIGN_OR_RETURN(store::Page page,
                   PageFrom(request.page_size(), request.page_token()));
  int64_t before = 0;
  if (!page.after.empty() && (!absl::SimpleAtoi(page.after, &before) || before <= 0)) {
    return absl::InvalidArgumentError(
        "page_token is not a token from a previous response");
  }
  store::AuditFilter filter;
  filter.subject = request.subject();
  filter.who = request.who();
  filter.since_unix_ns = request.since_unix_ns();
  v1::ListAuditRecordsResponse response;
  RETURN_IF_ERROR(store_->Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto records, txn.ListAudit(filter, before, page.limit));
    if (static_cast<int>(records.size()) == page.limit) {
      int64_t last = records.back().sequence();
      ASSIGN_OR_RETURN(auto more, txn.ListAudit(filter, last, 1));
      if (!more.empty()) response.set_next_page_token(TokenAfter(absl::StrCat(last)));
    }
    for (auto& r : records) *response.add_records() = std::move(r);
    return absl::OkStatus();
  }));
  return response;
}

absl::Status DesiredState::ValidateWatch(
    const v1::WatchAssignmentsRequest& request) {
  RETURN_IF_ERROR(ValidateId("host_id", request.host_id()));
  if (request.resume_revision() < 0) {
    return absl::InvalidArgumentError("resume_revision must not be negative");
  }
  return store_->Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto host, txn.GetHost(request.host_id()));
    if (!host) {
      return absl::FailedPreconditionError(absl::StrCat(
          "host '", request.host_id(), "' is not registered; call Register first"));
    }
    return absl::OkStatus();
  });
}

namespace {

// The host's assignments as a snapshot, read in `txn`: the VMs it owns, and
// those it reports that another host owns (a live migration's other side).
absl::Status ReadSnapshot(store::Transaction& txn, absl::string_view host_id,
                          v1::WatchAssignmentsResponse& message) {
  message.Clear();
  message.set_kind(v1::WatchAssignmentsResponse::KIND_SNAPSHOT);
  std::set<std::string> sent;
  for (const store::VmFilter& filter : {store::VmFilter::OwnedBy(std::string(host_id)),
                                        store::VmFilter::ReportedOn(std::string(host_id))}) {
    ASSIGN_OR_RETURN(auto vms, AllVms(txn, filter));
    for (auto& vm : vms) {
      if (!ReceivesAssignment(vm, host_id) || !sent.insert(vm.vm_id()).second) continue;
      *message.add_assignments() = vm.assignment();
    }
  }
  ASSIGN_OR_RETURN(const int64_t revision, txn.ReadRevision());
  message.set_revision(revision);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::WatchAssignmentsResponse> DesiredState::ReadWatchMessage(
    absl::string_view host_id, int64_t revision) {
  v1::WatchAssignmentsResponse message;
  RETURN_IF_ERROR(store_->Read([&](store::Transaction& txn) -> absl::Status {
    if (revision <= 0) return ReadSnapshot(txn, host_id, message);
    ASSIGN_OR_RETURN(auto changes, txn.ChangesSince(host_id, revision));
    if (!changes.complete) return ReadSnapshot(txn, host_id, message);
    message.Clear();
    message.set_kind(v1::WatchAssignmentsResponse::KIND_DELTA);
    // Complete only when `revision` is at most the read's, so the stream
    // never goes back.
    message.set_revision(changes.revision);
    for (const std::string& vm_id : changes.vm_ids) {
      ASSIGN_OR_RETURN(auto vm, txn.GetVm(vm_id));
      if (vm && ReceivesAssignment(*vm, host_id)) {
        *message.add_assignments() = vm->assignment();
      } else {
        message.add_removed_vm_ids(vm_id);
      }
    }
    return absl::OkStatus();
  }));
  return message;
}

absl::StatusOr<v1::WatchAssignmentsResponse> DesiredState::FirstWatchMessage(
    absl::string_view host_id, int64_t resume_revision) {
  // Nothing changed since a resume: the empty delta tells the agent it is
  // current up to the read's revision.
  return ReadWatchMessage(host_id, resume_revision);
}

absl::StatusOr<std::optional<v1::WatchAssignmentsResponse>>
DesiredState::WatchUpdate(absl::string_view host_id, int64_t revision) {
  ASSIGN_OR_RETURN(v1::WatchAssignmentsResponse message, ReadWatchMessage(host_id, revision));
  if (message.kind() == v1::WatchAssignmentsResponse::KIND_DELTA &&
      message.assignments().empty() && message.removed_vm_ids().empty()) {
    return std::nullopt;
  }
  return message;
}

}  // namespace cosched::server
