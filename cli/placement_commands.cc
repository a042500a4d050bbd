// csctl: The policy questions: place, explain and plan. (cli/commands.h says how every command
// validates, calls csd and prints.)
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/policy_output.h"
#include "common/names.h"
#include "common/validation.h"

namespace cosched::cli {

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

int RunPlan(Stub& stub, const PlanArgs& args, const CommandOptions& options,
            std::ostream& out, std::ostream& err) {
  if (args.dry_run == args.report) {
    return UsageError(absl::InvalidArgumentError(
                          "plan needs one of --dry-run (what the engine would change now; "
                          "nothing is changed, the engine applies plans itself) or --report "
                          "(its applied plans' predictions against measurements)"),
                      err);
  }
  if (!args.tenant_id.empty()) {
    absl::Status valid = ValidateId("--tenant", args.tenant_id);
    if (!valid.ok()) return UsageError(valid, err);
  }
  v1::PlanRequest request;
  request.set_tenant_id(args.tenant_id);
  request.set_report(args.report);
  v1::PlanResponse response;
  grpc::Status status = stub.Plan(MakeContext(options).get(), request, &response);
  if (!status.ok()) {
    return RpcError(status, options,
                    args.report ? "the engine's plan report" : "the engine's plan", err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(args.report ? PlanReportToJson(response) : PlanToJson(response), out);
  } else if (args.report) {
    PrintPlanReport(response, out);
  } else {
    PrintPlan(response, out);
  }
  return kExitOk;
}

}  // namespace cosched::cli
