// Offline csctl commands over a scenario file (docs/scenarios.md); they do
// not talk to csd:
//   csctl simulate FILE [--modes smt,nosmt,vm,tenant,policy] [-o json]
//   csctl explain [VM] --scenario FILE [-o json] (without --scenario,
//   csctl explain VM asks csd: RunExplainVm in commands.h)
// Exit codes as in commands.h: kExitUsage for a file that cannot be read or
// a bad scenario (one "csctl: " line naming the key and the rule),
// kExitRpcError when the engine cannot plan the host. Thread-compatible.
#ifndef COSCHED_CLI_SIMULATE_H_
#define COSCHED_CLI_SIMULATE_H_

#include <ostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "nlohmann/json.hpp"
#include "policy/tradeoff.h"

namespace cosched::cli {

struct SimulateArgs {
  std::string file;
  // Empty: all five, in the order smt, nosmt, vm, tenant, policy.
  std::vector<std::string> modes;
};

struct ExplainArgs {
  std::string file;
  // Empty: every VM.
  std::string vm;
};

int RunSimulate(const SimulateArgs& args, OutputFormat format,
                std::ostream& out, std::ostream& err);
int RunExplain(const ExplainArgs& args, OutputFormat format, std::ostream& out,
               std::ostream& err);

// The `-o json` object: keyed by mode name; each has total_throughput,
// relative_to_smt, measured_throughput, measured_relative_to_smt, same_pct,
// idle_pct, foreign_pct, cross_tenant_pct, forced_idle_pct,
// p50_wakeup_latency_ms, p99_wakeup_latency_ms, vms (instance name ->
// throughput) and, for policy, plan. `smt` is the reference run.
nlohmann::json SimulationToJson(const std::vector<policy::ModeResult>& results,
                                const policy::SimResult& smt);

}  // namespace cosched::cli

#endif  // COSCHED_CLI_SIMULATE_H_
