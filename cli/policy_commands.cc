// csctl: The tenant policy commands: policy get, set, ls. (cli/commands.h says how every command
// validates, calls csd and prints.)
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/names.h"
#include "common/validation.h"

namespace cosched::cli {

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
  if (args.mode == "auto") {
    policy->set_mode(v1::POLICY_MODE_AUTO);
  } else if (args.mode.empty() || args.mode == "fixed") {
    policy->set_mode(v1::POLICY_MODE_FIXED);
  } else {
    return UsageError(absl::InvalidArgumentError(absl::StrCat(
                          "--mode '", args.mode.substr(0, 32), "' must be fixed or auto")),
                      err);
  }
  if (args.no_apply) {
    if (policy->mode() != v1::POLICY_MODE_AUTO) {
      return UsageError(absl::InvalidArgumentError(
                            "--no-apply needs --mode auto: a fixed tenant has no plans to apply"),
                        err);
    }
    policy->set_apply(false);
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

}  // namespace cosched::cli
