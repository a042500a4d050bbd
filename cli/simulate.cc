#include "cli/simulate.h"

#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/output.h"
#include "common/names.h"
#include "policy/scenario.h"

namespace cosched::cli {
namespace {

using json = nlohmann::json;
using policy::Mode;
using policy::ModeResult;

int Fail(int code, absl::string_view message, std::ostream& err) {
  err << "csctl: " << message << "\n";
  return code;
}

// Reads and parses the scenario; on failure prints the error and sets `code`.
std::optional<policy::Scenario> LoadScenario(const std::string& file,
                                             std::ostream& err, int* code) {
  std::ifstream in(file);
  if (!in) {
    *code = Fail(kExitUsage, absl::StrCat("cannot read scenario file '", file, "'"), err);
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto scenario = policy::ParseScenarioYaml(text.str());
  if (!scenario.ok()) {
    *code = Fail(kExitUsage, absl::StrCat(file, ": ", scenario.status().message()), err);
    return std::nullopt;
  }
  return *std::move(scenario);
}

double Ratio(double value, double reference) {
  return reference > 0 ? value / reference : 0;
}

// Rounded so that JSON stays readable and stable.
double Round(double value, int digits) {
  double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

std::string Percent(double ratio) {
  return absl::StrFormat("%+.1f%%", 100 * (ratio - 1));
}

json PlanToJson(const policy::HostPlan& plan) {
  json candidates = json::array();
  for (const auto& c : plan.candidates) {
    candidates.push_back({{"name", c.name},
                          {"predicted_throughput", Round(c.predicted_throughput, 3)},
                          {"predicted_forced_idle_pct", Round(c.predicted_forced_idle_pct, 2)},
                          {"within_budget", c.within_budget}});
  }
  return {{"chosen", plan.chosen},
          {"reasons", plan.reasons},
          {"candidates", candidates}};
}

json DecisionToJson(const policy::VmDecision& d) {
  return {{"vm", d.vm},
          {"tenant", d.tenant},
          {"isolation", IsolationName(d.isolation)},
          {"trust_group", d.trust_group},
          {"pin_cpus", d.pin_cpus},
          {"reasons", d.reasons}};
}

}  // namespace

json SimulationToJson(const std::vector<ModeResult>& results,
                      const policy::SimResult& smt) {
  json out = json::object();
  for (const ModeResult& m : results) {
    const policy::SimResult& r = m.result;
    json vms = json::object();
    for (const auto& vm : r.vms) vms[vm.name] = Round(vm.throughput, 4);
    json mode = {
        {"total_throughput", Round(r.total_throughput, 4)},
        {"relative_to_smt", Round(Ratio(r.total_throughput, smt.total_throughput), 4)},
        {"measured_throughput", Round(r.measured_throughput, 4)},
        {"measured_relative_to_smt",
         Round(Ratio(r.measured_throughput, smt.measured_throughput), 4)},
        {"same_pct", Round(r.same_pct, 2)},
        {"idle_pct", Round(r.idle_pct, 2)},
        {"foreign_pct", Round(r.foreign_pct, 2)},
        {"cross_tenant_pct", Round(r.cross_tenant_pct, 2)},
        {"forced_idle_pct", Round(r.forced_idle_pct, 2)},
        {"p50_wakeup_latency_ms", Round(r.p50_wakeup_latency_ms, 3)},
        {"p99_wakeup_latency_ms", Round(r.p99_wakeup_latency_ms, 3)},
        {"vms", vms},
    };
    if (m.plan.has_value()) mode["plan"] = PlanToJson(*m.plan);
    out[policy::ModeName(m.mode)] = mode;
  }
  return out;
}

int RunSimulate(const SimulateArgs& args, OutputFormat format,
                std::ostream& out, std::ostream& err) {
  std::vector<Mode> modes;
  std::vector<std::string> names = args.modes;
  if (names.empty()) names = {"smt", "nosmt", "vm", "tenant", "policy"};
  for (const std::string& name : names) {
    auto mode = policy::ParseMode("--modes", name);
    if (!mode.ok()) return Fail(kExitUsage, mode.status().message(), err);
    modes.push_back(*mode);
  }
  int code = kExitOk;
  std::optional<policy::Scenario> scenario = LoadScenario(args.file, err, &code);
  if (!scenario.has_value()) return code;

  // smt is the reference of every relative figure, shown or not.
  auto smt = policy::RunMode(*scenario, Mode::kSmt);
  if (!smt.ok()) return Fail(kExitRpcError, smt.status().message(), err);
  std::vector<ModeResult> results;
  for (Mode mode : modes) {
    if (mode == Mode::kSmt) {
      results.push_back(*smt);
      continue;
    }
    auto result = policy::RunMode(*scenario, mode);
    if (!result.ok()) {
      return Fail(kExitRpcError,
                  absl::StrCat("mode ", policy::ModeName(mode), ": ",
                               result.status().message()),
                  err);
    }
    results.push_back(*std::move(result));
  }
  if (format == OutputFormat::kJson) {
    PrintJson(SimulationToJson(results, smt->result), out);
    return kExitOk;
  }
  out << scenario->name << ": " << scenario->cores << " cores x 2, "
      << policy::ExpandInstances(*scenario).size() << " VMs, "
      << scenario->duration_s << " s, seed " << scenario->seed << "\n";
  TextTable table({"MODE", "TOTAL", "VS SMT", "MEASURED", "VS SMT", "SAME%",
                   "IDLE%", "FOREIGN%", "X-TENANT%", "FORCED-IDLE%",
                   "P99-WAKE-MS"});
  for (const ModeResult& m : results) {
    const policy::SimResult& r = m.result;
    table.AddRow({policy::ModeName(m.mode),
                  absl::StrFormat("%.2f", r.total_throughput),
                  Percent(Ratio(r.total_throughput, smt->result.total_throughput)),
                  absl::StrFormat("%.2f", r.measured_throughput),
                  Percent(Ratio(r.measured_throughput, smt->result.measured_throughput)),
                  absl::StrFormat("%.1f", r.same_pct),
                  absl::StrFormat("%.1f", r.idle_pct),
                  absl::StrFormat("%.1f", r.foreign_pct),
                  absl::StrFormat("%.1f", r.cross_tenant_pct),
                  absl::StrFormat("%.1f", r.forced_idle_pct),
                  absl::StrFormat("%.2f", r.p99_wakeup_latency_ms)});
  }
  table.Print(out);
  for (const ModeResult& m : results) {
    if (!m.plan.has_value()) continue;
    out << "policy: " << absl::StrJoin(m.plan->reasons, "; ") << "\n";
  }
  return kExitOk;
}

int RunExplain(const ExplainArgs& args, OutputFormat format, std::ostream& out,
               std::ostream& err) {
  int code = kExitOk;
  std::optional<policy::Scenario> scenario = LoadScenario(args.file, err, &code);
  if (!scenario.has_value()) return code;
  auto plan = policy::PlanHost(*scenario);
  if (!plan.ok()) return Fail(kExitRpcError, plan.status().message(), err);
  std::vector<const policy::VmDecision*> chosen;
  for (const auto& d : plan->vms) {
    if (args.vm.empty() || d.vm == args.vm) chosen.push_back(&d);
  }
  if (chosen.empty()) {
    return Fail(kExitUsage,
                absl::StrCat("scenario '", scenario->name, "' has no VM '",
                             args.vm, "'"),
                err);
  }
  if (format == OutputFormat::kJson) {
    json vms = json::array();
    for (const auto* d : chosen) vms.push_back(DecisionToJson(*d));
    PrintJson({{"host", PlanToJson(*plan)}, {"vms", vms}}, out);
    return kExitOk;
  }
  for (const std::string& reason : plan->reasons) out << "host: " << reason << "\n";
  for (const auto* d : chosen) {
    out << "\n" << d->vm << " (tenant " << d->tenant << ")\n";
    Fields fields = {
        {"isolation", IsolationName(d->isolation)},
        {"trust_group", d->trust_group.empty() ? "(none: cookie 0)" : d->trust_group},
        {"pinned_cpus", d->pin_cpus.empty() ? "(not pinned)"
                                            : absl::StrJoin(d->pin_cpus, ",")},
    };
    PrintFields(fields, out);
    for (const std::string& reason : d->reasons) out << "  - " << reason << "\n";
  }
  return kExitOk;
}

}  // namespace cosched::cli
