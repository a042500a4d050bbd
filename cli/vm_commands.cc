// csctl: The VM commands: tag, untag, get, ls. (cli/commands.h says how every command
// validates, calls csd and prints.)
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/names.h"
#include "common/validation.h"

namespace cosched::cli {

using nlohmann::json;

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
  if (valid.ok() && !args.domain_name.empty()) {
    valid = ValidateId("--name", args.domain_name);
    if (valid.ok() && !(args.tenant_id.empty() && args.host_id.empty() && args.trust_group.empty())) {
      valid = absl::InvalidArgumentError("--name is a filter of its own: not with --tenant, "
                                         "--host or --trust-group");
    }
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
        request.set_domain_name(args.domain_name);
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

}  // namespace cosched::cli
