// csctl: The read-outs of what happened: stats and audit. (cli/commands.h says how every command
// validates, calls csd and prints.)
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/stats_output.h"
#include "common/names.h"
#include "common/validation.h"

namespace cosched::cli {

using nlohmann::json;

int RunStats(Stub& stub, const StatsArgs& args, const CommandOptions& options,
             std::ostream& out, std::ostream& err) {
  const int subjects = !args.vm_id.empty() + !args.host_id.empty() +
                       !args.tenant.empty() + !args.trust_group.empty();
  if (subjects != 1) {
    return UsageError(absl::InvalidArgumentError(
                          "stats takes exactly one of VM, --host, --tenant, --group"),
                      err);
  }
  v1::GetStatsRequest request;
  absl::Status valid;
  std::string what;
  if (!args.vm_id.empty()) {
    valid = ValidateId("vm_id", args.vm_id);
    request.set_vm_id(args.vm_id);
    what = absl::StrCat("stats of vm '", args.vm_id, "'");
  } else if (!args.host_id.empty()) {
    valid = ValidateId("--host", args.host_id);
    request.set_host_id(args.host_id);
    what = absl::StrCat("stats of host '", args.host_id, "'");
  } else if (!args.tenant.empty()) {
    valid = ValidateId("--tenant", args.tenant);
    request.set_tenant(args.tenant);
    what = absl::StrCat("stats of tenant '", args.tenant, "'");
  } else {
    request.set_trust_group(args.trust_group);
    what = absl::StrCat("stats of trust group '", args.trust_group, "'");
  }
  if (!valid.ok()) return UsageError(valid, err);
  auto window = ParseStatsWindow("--window", args.window);
  if (!window.ok()) return UsageError(window.status(), err);
  request.set_window_seconds(*window);

  v1::GetStatsResponse response;
  grpc::Status status =
      stub.GetStats(MakeContext(options).get(), request, &response);
  if (!status.ok()) return RpcError(status, options, what, err);
  if (options.format == OutputFormat::kJson) {
    PrintJson(StatsToJson(request, response), out);
  } else {
    PrintStats(request, response, out);
  }
  return kExitOk;
}

int RunAudit(Stub& stub, const AuditArgs& args, const CommandOptions& options,
             std::ostream& out, std::ostream& err) {
  if (!args.subject.empty()) {
    absl::Status valid = ValidateId("--vm", args.subject);
    if (!valid.ok()) return UsageError(valid, err);
  }
  if (args.limit < 1) {
    return UsageError(absl::InvalidArgumentError("--limit must be at least 1"),
                      err);
  }
  std::vector<v1::AuditRecord> records;
  v1::ListAuditRecordsRequest request;
  request.set_subject(args.subject);
  request.set_who(args.who);
  do {
    request.set_page_size(static_cast<int32_t>(std::min<int64_t>(
        kMaxPageSize, args.limit - static_cast<int64_t>(records.size()))));
    v1::ListAuditRecordsResponse response;
    grpc::Status status =
        stub.ListAuditRecords(MakeContext(options).get(), request, &response);
    if (!status.ok()) return RpcError(status, options, "audit records", err);
    for (auto& r : *response.mutable_records()) records.push_back(std::move(r));
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty() &&
           static_cast<int64_t>(records.size()) < args.limit);
  if (options.format == OutputFormat::kJson) {
    json array = json::array();
    for (const auto& r : records) array.push_back(AuditRecordToJson(r));
    PrintJson(array, out);
  } else {
    PrintAuditTable(records, out);
  }
  return kExitOk;
}

}  // namespace cosched::cli
