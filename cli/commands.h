// The csctl commands. Each validates what it can locally (ids, enum names),
// calls csd through the given stub with a deadline, prints the result to
// `out` (a table or "key: value" block, or JSON with OutputFormat::kJson)
// and returns the process exit code. On failure it prints exactly one line,
// starting with "csctl: ", to `err`:
//   kExitUsage (2): a local check failed; nothing was sent.
//   kExitRpcError (1): csd answered with an error (its message is printed
//     as is), could not be reached, or did not answer within the timeout.
//   kExitUnhealthy (3): `csctl status` only: csd answered, and something
//     in its answer is wrong (printed as the rest of the answer).
// Thread-compatible: the functions keep no state of their own.
#ifndef COSCHED_CLI_COMMANDS_H_
#define COSCHED_CLI_COMMANDS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cosched/v1/control_plane.grpc.pb.h"

namespace cosched::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRpcError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnhealthy = 3;

enum class OutputFormat { kTable, kJson };

// How every command talks and prints.
struct CommandOptions {
  // Only used in messages ("cannot reach csd at ...").
  std::string server = "127.0.0.1:7443";
  OutputFormat format = OutputFormat::kTable;
  // Deadline of each RPC.
  std::chrono::milliseconds timeout{10000};
  // Sent as "authorization: Bearer <token>" when not empty.
  std::string bearer_token{};
};

struct AuditArgs {
  // Filters; empty matches all. subject: a vm, tenant or host id.
  std::string subject{};
  std::string who{};
  // At most this many records, newest first.
  int64_t limit = 50;
};

struct TagArgs {
  std::string vm_id{};
  // Empty is sent as "default".
  std::string tenant_id = "default";
  // vm|tenant|none|dedicated; empty: the tenant's default level.
  std::string isolation{};
  std::vector<std::string> interference_classes{};
  // vcpus|emulator|full; empty: the server's default (emulator).
  std::string thread_scope{};
};

struct ListArgs {
  // Filters; empty matches all.
  std::string tenant_id{};
  std::string host_id{};
  std::string trust_group{};
  // The libvirt domain name hosts run the VMs under (alone).
  std::string domain_name{};
  // Stop after this many VMs; 0: all of them.
  int64_t limit = 0;
};

struct PolicySetArgs {
  std::string tenant_id{};
  // vm|tenant|none|dedicated; required.
  std::string default_isolation{};
  // Empty: every level is allowed.
  std::vector<std::string> allowed_isolation{};
  // Percent of host CPU time, 0-100; unset: no budget.
  std::optional<double> forced_idle_budget_pct{};
  // fixed|auto; empty: fixed.
  std::string mode{};
  // With auto: plan and show, change no assignment.
  bool no_apply = false;
};

// Exactly one of dry_run and report.
struct PlanArgs {
  // Plan changes nothing, and csctl says so by asking for it.
  bool dry_run = false;
  // The applied plans' predictions against what was measured since.
  bool report = false;
  // Only hosts running this tenant's VMs; empty: all.
  std::string tenant_id{};
};

struct PlaceArgs {
  int64_t vcpus = 0;
  // Empty is sent as "default".
  std::string tenant_id = "default";
  std::vector<std::string> interference_classes{};
  // vm|tenant|none|dedicated; empty: the tenant's default level.
  std::string isolation{};
  // Load per vCPU, 0-1; unset: csd's default (1).
  std::optional<double> load{};
  bool no_pin = false;
};

// Exactly one subject: a VM, --host, --tenant or --group.
struct StatsArgs {
  std::string vm_id{};
  std::string host_id{};
  std::string tenant{};
  std::string trust_group{};
  // "300s", "5m", "1h", ... (ParseStatsWindow).
  std::string window = "5m";
};

// csctl rollout start.
struct RolloutStartArgs {
  // "1%,10%,50%,100%" (ParseStagePercents).
  std::string stages{};
  // "30m" (ParseSoak).
  std::string soak{};
  // Host labels; empty: every host.
  std::string selector{};
};

// csctl rollout pause|resume|abort.
struct RolloutChangeArgs {
  // Empty: whichever rollout is current.
  std::string rollout_id{};
  // For the audit trail.
  std::string reason{};
};
enum class RolloutChange { kPause, kResume, kAbort };

// csctl rollout new-hosts [VALUE].
struct RolloutNewHostsArgs {
  // "enforce" or "wait-for-rollout"; empty: print the setting.
  std::string value{};
  // For the audit trail.
  std::string reason{};
};

using Stub = v1::ControlPlane::StubInterface;

// TagVM; prints the VM with its assignment (JSON: the VM object plus
// "changed").
int RunTag(Stub& stub, const TagArgs& args, const CommandOptions& options,
           std::ostream& out, std::ostream& err);
// UntagVM; prints the revision of the removal (JSON: vm_id, revision).
int RunUntag(Stub& stub, const std::string& vm_id,
             const CommandOptions& options, std::ostream& out,
             std::ostream& err);
// GetVM.
int RunGet(Stub& stub, const std::string& vm_id, const CommandOptions& options,
           std::ostream& out, std::ostream& err);
// ListVMs, following next_page_token until the last page or args.limit.
// JSON: an array of VM objects.
int RunList(Stub& stub, const ListArgs& args, const CommandOptions& options,
            std::ostream& out, std::ostream& err);

int RunPolicyGet(Stub& stub, const std::string& tenant_id,
                 const CommandOptions& options, std::ostream& out,
                 std::ostream& err);
int RunPolicySet(Stub& stub, const PolicySetArgs& args,
                 const CommandOptions& options, std::ostream& out,
                 std::ostream& err);
// Every page of ListTenantPolicies. JSON: an array.
int RunPolicyList(Stub& stub, const CommandOptions& options, std::ostream& out,
                  std::ostream& err);

// Every page of ListHosts, of the hosts whose labels match `selector`
// (ListHostsRequest.selector; empty: all). JSON: an array.
int RunHostList(Stub& stub, const CommandOptions& options, std::ostream& out,
                std::ostream& err, const std::string& selector = "");
// `csctl hosts enforce on|off [HOST] [--selector S] [--all] --reason R`.
struct HostEnforceArgs {
  std::string switch_to;  // "on" or "off"
  std::string host_id;
  std::string selector;
  bool all = false;
  std::string reason;
};
int RunHostEnforce(Stub& stub, const HostEnforceArgs& args, const CommandOptions& options,
                   std::ostream& out, std::ostream& err);

// csctl hosts drain|undrain HOST and csctl hosts rm HOST.
int RunHostDrain(Stub& stub, const std::string& host_id, bool draining,
                 const CommandOptions& options, std::ostream& out, std::ostream& err);
int RunHostRemove(Stub& stub, const std::string& host_id, const CommandOptions& options,
                  std::ostream& out, std::ostream& err);
int RunHostGet(Stub& stub, const std::string& host_id,
               const CommandOptions& options, std::ostream& out,
               std::ostream& err);

// csctl hosts traits (cli/host_traits.h): every host's, or one's.
struct HostTraitsArgs {
  // Empty: every host.
  std::string host_id{};
  // table, json, openstack-provider-yaml or k8s-labels.
  std::string format = "table";
  // openstack-provider-yaml of one host as uuid '$COMPUTE_NODE'.
  bool compute_node = false;
};
int RunHostTraits(Stub& stub, const HostTraitsArgs& args, const CommandOptions& options,
                  std::ostream& out, std::ostream& err);

// GetStats; prints the subject's VMs (a TOTAL row unless it is one VM)
// with PrintStats, or StatsToJson (cli/stats_output.h). kExitUsage for no
// subject or several, a bad id or window; NOT_FOUND from csd (nothing
// reported in the span) is kExitRpcError with csd's message.
int RunStats(Stub& stub, const StatsArgs& args, const CommandOptions& options,
             std::ostream& out, std::ostream& err);
// Place: the chosen host, the cores and CPUs to pin to, the predicted cost
// and the ranked candidates (JSON: the PlaceResponse fields). kExitUsage for
// a bad vcpus (1-1024), tenant, class, level or load; RESOURCE_EXHAUSTED
// from csd (no host fits) is kExitRpcError with csd's message.
int RunPlace(Stub& stub, const PlaceArgs& args, const CommandOptions& options,
             std::ostream& out, std::ostream& err);
// ExplainVM: the engine's decision for the VM on its host, its reasons, the
// layouts predicted and the budget (JSON: the ExplainVMResponse fields).
int RunExplainVm(Stub& stub, const std::string& vm_id,
                 const CommandOptions& options, std::ostream& out,
                 std::ostream& err);

// ControlPlane.Plan: with --dry-run the hosts where the policy engine would
// change layouts now, what would change and the predicted gain (JSON: an
// array of hosts with changes, current, planned, would_apply, reasons);
// with --report each host's newest applied plan, predicted against
// measured (JSON: PlanReportToJson). Neither or both: a usage error.
int RunPlan(Stub& stub, const PlanArgs& args, const CommandOptions& options,
            std::ostream& out, std::ostream& err);

// GetStatus: each csd replica, its version, whether it leads, its store
// and revision, its agents (JSON: {"healthy", "problems", "replicas"}).
// kExitUnhealthy, with each problem on a line of its own after the table,
// when a replica could not be asked or cannot reach its store, or when
// not exactly one replica leads.
int RunStatus(Stub& stub, const CommandOptions& options, std::ostream& out, std::ostream& err);

// StartRollout; prints the rollout (cli/rollout_output.h). kExitUsage for
// stages that are not N% or do not strictly increase within 1-100%, a
// soak that is not a whole number with s/m/h/d or is over 7 days, or a bad
// selector; csd refuses the rest (a soak under its rollout.min_soak_s, a
// selector matching no host, a rollout already running).
int RunRolloutStart(Stub& stub, const RolloutStartArgs& args, const CommandOptions& options,
                    std::ostream& out, std::ostream& err);
// GetRollout: the current rollout, its stage, its enabled hosts and, when
// halted, why.
int RunRolloutStatus(Stub& stub, const CommandOptions& options, std::ostream& out,
                     std::ostream& err);
// PauseRollout, ResumeRollout or AbortRollout; prints the rollout after.
int RunRolloutChange(Stub& stub, RolloutChange change, const RolloutChangeArgs& args,
                     const CommandOptions& options, std::ostream& out, std::ostream& err);
// SetNewHosts with a value, GetRollout without; prints the setting
// (JSON: the rollout record). kExitUsage for a value other than enforce or
// wait-for-rollout.
int RunRolloutNewHosts(Stub& stub, const RolloutNewHostsArgs& args, const CommandOptions& options,
                       std::ostream& out, std::ostream& err);

// ListAuditRecords, following next_page_token up to args.limit records.
// JSON: an array of records, before/after as JSON objects.
int RunAudit(Stub& stub, const AuditArgs& args, const CommandOptions& options,
             std::ostream& out, std::ostream& err);

}  // namespace cosched::cli

#endif  // COSCHED_CLI_COMMANDS_H_
