#include "cli/commands.h"

#include <algorithm>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cli/output.h"
#include "cli/policy_output.h"
#include "cli/stats_output.h"
#include "common/names.h"
#include "common/transport.h"
#include "common/validation.h"
#include "grpcpp/client_context.h"

namespace cosched::cli {
namespace {

using nlohmann::json;

// The API's largest page; a --limit above it takes several pages.
constexpr int64_t kMaxPageSize = 1000;

std::unique_ptr<grpc::ClientContext> MakeContext(
    const CommandOptions& options) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + options.timeout);
  if (!options.bearer_token.empty()) {
    context->AddMetadata("authorization",
                         absl::StrCat("Bearer ", options.bearer_token));
  }
  return context;
}

// Messages from gRPC or csd may span lines; the error must stay one line.
std::string OneLine(absl::string_view message) {
  return absl::StrReplaceAll(message, {{"\r\n", "; "}, {"\n", "; "}});
}

int UsageError(const absl::Status& status, std::ostream& err) {
  err << "csctl: " << OneLine(status.message()) << "\n";
  return kExitUsage;
}

// `what` names the object of the call ("vm 'vm-1'", "listing VMs") for
// answers that carry no message of their own.
int RpcError(const grpc::Status& status, const CommandOptions& options,
             absl::string_view what, std::ostream& err) {
  const std::string message = OneLine(status.error_message());
  err << "csctl: ";
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      err << "cannot reach csd at " << options.server << ": " << message;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      err << "csd at " << options.server << " did not answer within "
          << options.timeout.count() / 1000.0 << "s";
      if (!message.empty()) err << ": " << message;
      break;
    default:
      if (!message.empty()) {
        err << message;
      } else if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
        err << what << " not found";
      } else {
        err << what << ": "
            << absl::StatusCodeToString(FromGrpcStatus(status).code());
      }
  }
  err << "\n";
  return kExitRpcError;
}

// Calls `fetch_page(token, page_size, items, &next_token)` until the last
// page or until `limit` items (0: no limit) were collected.
template <typename Item, typename FetchPage>
grpc::Status CollectPages(int64_t limit, FetchPage fetch_page,
                          std::vector<Item>* items) {
  std::string token;
  do {
    const int page_size =
        limit > 0 ? static_cast<int>(std::min<int64_t>(
                        limit - static_cast<int64_t>(items->size()),
                        kMaxPageSize))
                  : 0;
    std::string next;
    grpc::Status status = fetch_page(token, page_size, items, &next);
    if (!status.ok()) return status;
    // A server that hands back the token it was given would loop forever.
    if (!next.empty() && next == token) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "csd returned the same page token twice");
    }
    token = std::move(next);
  } while (!token.empty() &&
           (limit == 0 || static_cast<int64_t>(items->size()) < limit));
  if (limit > 0 && static_cast<int64_t>(items->size()) > limit) {
    items->resize(limit);
  }
  return grpc::Status::OK;
}

template <typename Item>
json ToJsonArray(const std::vector<Item>& items,
                 json (*to_json)(const Item&)) {
  json array = json::array();
  for (const Item& item : items) array.push_back(to_json(item));
  return array;
}

}  // namespace

int RunTag(Stub& stub, const TagArgs& args, const CommandOptions& options,
           std::ostream& out, std::ostream& err) {
  v1::TagVMRequest request;
  request.set_vm_id(args.vm_id);
  request.set_tenant_id(args.tenant_id.empty() ? "default" : args.tenant_id);
  absl::Status valid = ValidateId("vm_id", request.vm_id());
  if (valid.ok()) valid = ValidateId("tenant_id", request.tenant_id());
  if (!valid.ok()) return UsageError(valid, err);
  if (!args.isolation.empty()) {
    auto level = ParseIsolation("--isolation", args.isolation);
    if (!level.ok()) return UsageError(level.status(), err);
    request.set_isolation(*level);
  }
  if (!args.thread_scope.empty()) {
    auto scope = ParseThreadScope("--scope", args.thread_scope);
    if (!scope.ok()) return UsageError(scope.status(), err);
    request.set_thread_scope(*scope);
  }
  for (const std::string& c : args.interference_classes) {
    request.add_interference_classes(c);
  }
  std::vector<std::string> normalized;
  valid = ValidateClasses("--class", request.interference_classes(),
                          &normalized);
  if (!valid.ok()) return UsageError(valid, err);

  v1::TagVMResponse response;
  grpc::Status status = stub.TagVM(MakeContext(options).get(), request,
                                   &response);
  if (!status.ok()) {
    return RpcError(status, options, absl::StrCat("vm '", args.vm_id, "'"),
                    err);
  }
  if (options.format == OutputFormat::kJson) {
    json vm = VmToJson(response.vm());
    vm["changed"] = response.changed();
    PrintJson(vm, out);
  } else {
    if (response.changed()) {
      out << "tagged " << response.vm().vm_id() << "\n";
    } else {
      out << "unchanged: " << response.vm().vm_id()
          << " was already tagged this way\n";
    }
    PrintVm(response.vm(), out);
  }
  return kExitOk;
}

int RunUntag(Stub& stub, const std::string& vm_id,
             const CommandOptions& options, std::ostream& out,
             std::ostream& err) {
  absl::Status valid = ValidateId("vm_id", vm_id);
  if (!valid.ok()) return UsageError(valid, err);
  v1::UntagVMRequest request;
  request.set_vm_id(vm_id);
  v1::UntagVMResponse response;
  grpc::Status status = stub.UntagVM(MakeContext(options).get(), request,
                                     &response);
  if (!status.ok()) {
    return RpcError(status, options, absl::StrCat("vm '", vm_id, "'"), err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson({{"vm_id", vm_id}, {"revision", response.revision()}}, out);
  } else {
    out << "untagged " << vm_id << " at revision " << response.revision()
        << "\n";
  }
  return kExitOk;
}

int RunGet(Stub& stub, const std::string& vm_id, const CommandOptions& options,
           std::ostream& out, std::ostream& err) {
  absl::Status valid = ValidateId("vm_id", vm_id);
  if (!valid.ok()) return UsageError(valid, err);
  v1::GetVMRequest request;
  request.set_vm_id(vm_id);
  v1::VM vm;
  grpc::Status status = stub.GetVM(MakeContext(options).get(), request, &vm);
  if (!status.ok()) {
    return RpcError(status, options, absl::StrCat("vm '", vm_id, "'"), err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(VmToJson(vm), out);
  } else {
    PrintVm(vm, out);
  }
  return kExitOk;
}

int RunList(Stub& stub, const ListArgs& args, const CommandOptions& options,
            std::ostream& out, std::ostream& err) {
  if (args.limit < 0) {
    return UsageError(absl::InvalidArgumentError("--limit must be >= 0"),
                      err);
  }
  absl::Status valid = absl::OkStatus();
  if (!args.tenant_id.empty()) valid = ValidateId("--tenant", args.tenant_id);
  if (valid.ok() && !args.host_id.empty()) {
    valid = ValidateId("--host", args.host_id);
  }
  if (!valid.ok()) return UsageError(valid, err);

  std::vector<v1::VM> vms;
  grpc::Status status = CollectPages(
      args.limit,
      [&](const std::string& token, int page_size, std::vector<v1::VM>* items,
          std::string* next) {
        v1::ListVMsRequest request;
        request.set_tenant_id(args.tenant_id);
        request.set_host_id(args.host_id);
        request.set_trust_group(args.trust_group);
        request.set_page_size(page_size);
        request.set_page_token(token);
        v1::ListVMsResponse response;
        grpc::Status s =
            stub.ListVMs(MakeContext(options).get(), request, &response);
        if (!s.ok()) return s;
        items->insert(items->end(), response.vms().begin(),
                      response.vms().end());
        *next = response.next_page_token();
        return s;
      },
      &vms);
  if (!status.ok()) return RpcError(status, options, "listing VMs", err);
  if (options.format == OutputFormat::kJson) {
    PrintJson(ToJsonArray(vms, &VmToJson), out);
  } else if (vms.empty()) {
    out << "no VMs found\n";
  } else {
    PrintVmTable(vms, out);
  }
  return kExitOk;
}

int RunPolicyGet(Stub& stub, const std::string& tenant_id,
                 const CommandOptions& options, std::ostream& out,
                 std::ostream& err) {
  absl::Status valid = ValidateId("tenant_id", tenant_id);
  if (!valid.ok()) return UsageError(valid, err);
  v1::GetTenantPolicyRequest request;
  request.set_tenant_id(tenant_id);
  v1::TenantPolicy policy;
  grpc::Status status =
      stub.GetTenantPolicy(MakeContext(options).get(), request, &policy);
  if (!status.ok()) {
    return RpcError(status, options,
                    absl::StrCat("policy of tenant '", tenant_id, "'"), err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(TenantPolicyToJson(policy), out);
  } else {
    PrintTenantPolicy(policy, out);
  }
  return kExitOk;
}

int RunPolicySet(Stub& stub, const PolicySetArgs& args,
                 const CommandOptions& options, std::ostream& out,
                 std::ostream& err) {
  absl::Status valid = ValidateId("tenant_id", args.tenant_id);
  if (!valid.ok()) return UsageError(valid, err);
  v1::SetTenantPolicyRequest request;
  v1::TenantPolicy* policy = request.mutable_policy();
  policy->set_tenant_id(args.tenant_id);
  auto default_level = ParseIsolation("--default", args.default_isolation);
  if (!default_level.ok()) return UsageError(default_level.status(), err);
  policy->set_default_isolation(*default_level);
  for (const std::string& name : args.allowed_isolation) {
    auto level = ParseIsolation("--allow", name);
    if (!level.ok()) return UsageError(level.status(), err);
    policy->add_allowed_isolation(*level);
  }
  if (args.forced_idle_budget_pct.has_value()) {
    const double budget = *args.forced_idle_budget_pct;
    if (!(budget >= 0 && budget <= 100)) {
      return UsageError(absl::InvalidArgumentError(
                            "--forced-idle-budget must be between 0 and 100 "
                            "(percent of host CPU time)"),
                        err);
    }
    policy->set_forced_idle_budget_pct(budget);
  }
  v1::TenantPolicy stored;
  grpc::Status status =
      stub.SetTenantPolicy(MakeContext(options).get(), request, &stored);
  if (!status.ok()) {
    return RpcError(status, options,
                    absl::StrCat("policy of tenant '", args.tenant_id, "'"),
                    err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(TenantPolicyToJson(stored), out);
  } else {
    PrintTenantPolicy(stored, out);
  }
  return kExitOk;
}

int RunPolicyList(Stub& stub, const CommandOptions& options, std::ostream& out,
                  std::ostream& err) {
  std::vector<v1::TenantPolicy> policies;
  grpc::Status status = CollectPages(
      0,
      [&](const std::string& token, int page_size,
          std::vector<v1::TenantPolicy>* items, std::string* next) {
        v1::ListTenantPoliciesRequest request;
        request.set_page_size(page_size);
        request.set_page_token(token);
        v1::ListTenantPoliciesResponse response;
        grpc::Status s = stub.ListTenantPolicies(MakeContext(options).get(),
                                                 request, &response);
        if (!s.ok()) return s;
        items->insert(items->end(), response.policies().begin(),
                      response.policies().end());
        *next = response.next_page_token();
        return s;
      },
      &policies);
  if (!status.ok()) {
    return RpcError(status, options, "listing tenant policies", err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(ToJsonArray(policies, &TenantPolicyToJson), out);
  } else if (policies.empty()) {
    out << "no tenant policies set (every tenant uses the built-in default)\n";
  } else {
    PrintTenantPolicyTable(policies, out);
  }
  return kExitOk;
}

int RunHostList(Stub& stub, const CommandOptions& options, std::ostream& out,
                std::ostream& err) {
  std::vector<v1::Host> hosts;
  grpc::Status status = CollectPages(
      0,
      [&](const std::string& token, int page_size, std::vector<v1::Host>* items,
          std::string* next) {
        v1::ListHostsRequest request;
        request.set_page_size(page_size);
        request.set_page_token(token);
        v1::ListHostsResponse response;
        grpc::Status s =
            stub.ListHosts(MakeContext(options).get(), request, &response);
        if (!s.ok()) return s;
        items->insert(items->end(), response.hosts().begin(),
                      response.hosts().end());
        *next = response.next_page_token();
        return s;
      },
      &hosts);
  if (!status.ok()) return RpcError(status, options, "listing hosts", err);
  if (options.format == OutputFormat::kJson) {
    PrintJson(ToJsonArray(hosts, &HostToJson), out);
  } else if (hosts.empty()) {
    out << "no hosts registered\n";
  } else {
    PrintHostTable(hosts, out);
  }
  return kExitOk;
}

int RunHostGet(Stub& stub, const std::string& host_id,
               const CommandOptions& options, std::ostream& out,
               std::ostream& err) {
  absl::Status valid = ValidateId("host_id", host_id);
  if (!valid.ok()) return UsageError(valid, err);
  v1::GetHostRequest request;
  request.set_host_id(host_id);
  v1::Host host;
  grpc::Status status = stub.GetHost(MakeContext(options).get(), request, &host);
  if (!status.ok()) {
    return RpcError(status, options, absl::StrCat("host '", host_id, "'"),
                    err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(HostToJson(host), out);
  } else {
    PrintHost(host, out);
  }
  return kExitOk;
}

int RunHostDrain(Stub& stub, const std::string& host_id, bool draining,
                 const CommandOptions& options, std::ostream& out, std::ostream& err) {
  absl::Status valid = ValidateId("host_id", host_id);
  if (!valid.ok()) return UsageError(valid, err);
  v1::DrainHostRequest request;
  request.set_host_id(host_id);
  v1::Host host;
  grpc::Status status =
      draining ? stub.DrainHost(MakeContext(options).get(), request, &host)
               : stub.UndrainHost(MakeContext(options).get(), request, &host);
  if (!status.ok()) {
    return RpcError(status, options,
                    absl::StrCat(draining ? "draining" : "undraining", " host '", host_id, "'"),
                    err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(HostToJson(host), out);
  } else if (draining) {
    out << "host " << host_id
        << " is draining: Place chooses no new VMs for it; its VMs stay enforced\n";
  } else {
    out << "host " << host_id << " is no longer draining\n";
  }
  return kExitOk;
}

int RunHostRemove(Stub& stub, const std::string& host_id, const CommandOptions& options,
                  std::ostream& out, std::ostream& err) {
  absl::Status valid = ValidateId("host_id", host_id);
  if (!valid.ok()) return UsageError(valid, err);
  v1::RemoveHostRequest request;
  request.set_host_id(host_id);
  v1::RemoveHostResponse response;
  grpc::Status status = stub.RemoveHost(MakeContext(options).get(), request, &response);
  if (!status.ok()) {
    return RpcError(status, options, absl::StrCat("removing host '", host_id, "'"), err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson({{"host_id", host_id}, {"revision", response.revision()}}, out);
  } else {
    out << "removed host " << host_id << " at revision " << response.revision() << "\n";
  }
  return kExitOk;
}

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

int RunPlace(Stub& stub, const PlaceArgs& args, const CommandOptions& options,
             std::ostream& out, std::ostream& err) {
  v1::PlaceRequest request;
  request.set_tenant_id(args.tenant_id.empty() ? "default" : args.tenant_id);
  absl::Status valid = ValidateId("--tenant", request.tenant_id());
  if (valid.ok() && (args.vcpus < 1 || args.vcpus > 1024)) {
    valid = absl::InvalidArgumentError("--vcpus must be between 1 and 1024");
  }
  if (!valid.ok()) return UsageError(valid, err);
  request.set_vcpus(static_cast<int32_t>(args.vcpus));
  if (!args.isolation.empty()) {
    auto level = ParseIsolation("--isolation", args.isolation);
    if (!level.ok()) return UsageError(level.status(), err);
    request.set_isolation(*level);
  }
  for (const std::string& c : args.interference_classes) {
    request.add_interference_classes(c);
  }
  std::vector<std::string> normalized;
  valid = ValidateClasses("--class", request.interference_classes(), &normalized);
  if (!valid.ok()) return UsageError(valid, err);
  if (args.load.has_value()) {
    if (!(*args.load >= 0 && *args.load <= 1)) {
      return UsageError(
          absl::InvalidArgumentError("--load must be between 0 and 1 (per vCPU)"),
          err);
    }
    request.set_load(*args.load);
  }
  if (args.no_pin) request.set_pin(false);

  v1::PlaceResponse response;
  grpc::Status status = stub.Place(MakeContext(options).get(), request, &response);
  if (!status.ok()) {
    return RpcError(status, options,
                    absl::StrCat("placing a ", args.vcpus, "-vCPU VM"), err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(PlaceToJson(response), out);
  } else {
    PrintPlace(response, out);
  }
  return kExitOk;
}

int RunExplainVm(Stub& stub, const std::string& vm_id,
                 const CommandOptions& options, std::ostream& out,
                 std::ostream& err) {
  absl::Status valid = ValidateId("vm_id", vm_id);
  if (!valid.ok()) return UsageError(valid, err);
  v1::ExplainVMRequest request;
  request.set_vm_id(vm_id);
  v1::ExplainVMResponse response;
  grpc::Status status =
      stub.ExplainVM(MakeContext(options).get(), request, &response);
  if (!status.ok()) {
    return RpcError(status, options, absl::StrCat("vm '", vm_id, "'"), err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(ExplainToJson(response), out);
  } else {
    PrintExplain(response, out);
  }
  return kExitOk;
}

}  // namespace cosched::cli
