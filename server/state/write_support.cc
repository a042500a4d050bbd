// The desired state's shared write helpers: audit records, the change log
// of assignments, and paging of List calls.
#include "server/state/write_support.h"

#include <set>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "glog/logging.h"
#include "google/protobuf/util/json_util.h"
#include "server/state/vm_presence.h"

namespace cosched::server::internal {
namespace {

constexpr int kDefaultPageSize = 100;
constexpr char kPageTokenPrefix[] = "v1:";

}  // namespace


absl::Status ValidateOptionalId(absl::string_view field,
                                absl::string_view value) {
  return value.empty() ? absl::OkStatus() : ValidateId(field, value);
}

absl::StatusOr<v1::TenantPolicy> PolicyOf(store::Transaction& txn,
                                          const std::string& tenant_id) {
  ASSIGN_OR_RETURN(auto stored, txn.GetTenantPolicy(tenant_id));
  return stored.has_value() ? *stored : policy::DefaultTenantPolicy(tenant_id);
}

// A record as audit JSON; empty for none.
std::string AuditJson(const google::protobuf::Message* record) {
  if (record == nullptr) return "";
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(*record, &json, options).ok()) {
    // A record that does not print is still a change that happened.
    return record->ShortDebugString();
  }
  return json;
}

absl::Status ValidateSwitchReason(const std::string& reason) {
  if (reason.empty()) {
    return absl::InvalidArgumentError(
        "reason is required: say why enforcement is switched, for the audit trail");
  }
  if (reason.size() > kMaxDetailLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("reason must be at most ", kMaxDetailLength, " characters"));
  }
  return absl::OkStatus();
}

absl::Status Audit(store::Transaction& txn, const std::string& who,
                   const std::string& role, absl::string_view method,
                   absl::string_view subject, const google::protobuf::Message* before,
                   const google::protobuf::Message* after, int64_t revision,
                   v1::AuditRecord* logged, absl::string_view reason) {
  v1::AuditRecord record;
  record.set_time_unix_ns(absl::ToUnixNanos(absl::Now()));
  record.set_who(who);
  record.set_role(role);
  record.set_method(std::string(method));
  record.set_subject(std::string(subject));
  record.set_before(AuditJson(before));
  record.set_after(AuditJson(after));
  record.set_revision(revision);
  record.set_reason(std::string(reason));
  RETURN_IF_ERROR(txn.AppendAudit(record));
  *logged = std::move(record);
  return absl::OkStatus();
}

void LogAudit(const v1::AuditRecord& record) {
  if (record.method().empty()) return;
  LOG(INFO) << "audit: " << record.who() << " (" << record.role() << ") "
            << record.method() << " " << record.subject()
            << (record.reason().empty() ? "" : " (" + record.reason() + ")")
            << " revision " << record.revision() << " before "
            << (record.before().empty() ? "none" : record.before()) << " after "
            << (record.after().empty() ? "none" : record.after());
}

absl::Status RecordReceiverChanges(store::Transaction& txn, const v1::VM* before,
                                   const v1::VM* after) {
  std::set<std::string> hosts;
  if (before != nullptr) hosts = HostsOf(*before);
  if (after != nullptr) hosts.merge(HostsOf(*after));
  const std::string& vm_id = after != nullptr ? after->vm_id() : before->vm_id();
  for (const std::string& host : hosts) {
    const bool was = before != nullptr && ReceivesAssignment(*before, host);
    const bool is = after != nullptr && ReceivesAssignment(*after, host);
    if (was != is) RETURN_IF_ERROR(txn.RecordChange(host, vm_id));
  }
  return absl::OkStatus();
}

absl::Status RecordAssignmentChange(store::Transaction& txn, const v1::VM& vm) {
  for (const std::string& host : HostsOf(vm)) {
    if (ReceivesAssignment(vm, host)) RETURN_IF_ERROR(txn.RecordChange(host, vm.vm_id()));
  }
  return absl::OkStatus();
}

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

}  // namespace cosched::server::internal
