#include "server/state/audit_trail.h"

#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/state/write_support.h"

namespace cosched::server {
namespace {

using internal::kMaxDetailLength;
using internal::PageFrom;
using internal::TokenAfter;
using internal::ValidateOptionalId;

}  // namespace

absl::Status AuditTrail::AuditConfigReload(const std::string& changed) {
  v1::AuditRecord logged;
  RETURN_IF_ERROR(store_.WriteSync([&](store::Transaction& txn) {
    return internal::Audit(txn, "csd:reload", "admin", "ReloadConfig", "csd.yaml", nullptr,
                           nullptr, store_.CurrentRevision(), &logged,
                           absl::StrCat("changed ", changed));
  }));
  internal::LogAudit(logged);
  return absl::OkStatus();
}

absl::StatusOr<v1::ListAuditRecordsResponse> AuditTrail::ListAuditRecords(
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
  RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
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

}  // namespace cosched::server
