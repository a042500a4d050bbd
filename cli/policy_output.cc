#include "cli/policy_output.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/output.h"
#include "common/names.h"

namespace cosched::cli {
namespace {

using nlohmann::json;

// Rounded so that JSON stays readable and stable.
double Round(double value, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

template <typename T>
std::vector<int> Ints(const T& repeated) {
  return {repeated.begin(), repeated.end()};
}

std::string CpusText(const std::vector<int>& cpus, absl::string_view none) {
  return cpus.empty() ? std::string(none) : absl::StrJoin(cpus, ",");
}

}  // namespace

json PlaceToJson(const v1::PlaceResponse& response) {
  json candidates = json::array();
  for (const v1::PlacementCandidate& c : response.candidates()) {
    candidates.push_back({{"host_id", c.host_id()},
                          {"predicted_cost", Round(c.predicted_cost(), 4)},
                          {"reason", c.reason()}});
  }
  return {{"host_id", response.host_id()},
          {"cores", Ints(response.cores())},
          {"cpus", Ints(response.cpus())},
          {"predicted_cost", Round(response.predicted_cost(), 4)},
          {"reason", response.reason()},
          {"isolation", IsolationName(response.isolation())},
          {"candidates", candidates}};
}

void PrintPlace(const v1::PlaceResponse& response, std::ostream& out) {
  PrintFields({{"host", response.host_id()},
               {"isolation", IsolationName(response.isolation())},
               {"pin to cpus", CpusText(Ints(response.cpus()), "(not pinned)")},
               {"predicted cost", absl::StrFormat("%.3f", response.predicted_cost())},
               {"reason", response.reason()}},
              out);
  out << "\n";
  TextTable table({"RANK", "HOST", "COST", "WHY"});
  int rank = 1;
  for (const v1::PlacementCandidate& c : response.candidates()) {
    table.AddRow({absl::StrCat(rank++), c.host_id(),
                  absl::StrFormat("%.3f", c.predicted_cost()), c.reason()});
  }
  table.Print(out);
}

json ExplainToJson(const v1::ExplainVMResponse& response) {
  json layouts = json::array();
  for (const v1::LayoutCandidate& c : response.layouts()) {
    layouts.push_back(
        {{"name", c.name()},
         {"predicted_throughput", Round(c.predicted_throughput(), 3)},
         {"predicted_forced_idle_pct", Round(c.predicted_forced_idle_pct(), 2)},
         {"predicted_cross_tenant_pct", Round(c.predicted_cross_tenant_pct(), 2)},
         {"within_budget", c.within_budget()}});
  }
  return {{"vm_id", response.vm_id()},
          {"tenant_id", response.tenant_id()},
          {"host_id", response.host_id()},
          {"isolation", IsolationName(response.isolation())},
          {"trust_group", response.trust_group()},
          {"pin_cpus", Ints(response.pin_cpus())},
          {"reasons", std::vector<std::string>(response.reasons().begin(),
                                               response.reasons().end())},
          {"vcpus", response.vcpus()},
          {"load", Round(response.load(), 3)},
          {"host_vms", response.host_vms()},
          {"chosen_layout", response.chosen_layout()},
          {"layouts", layouts},
          {"host_reasons", std::vector<std::string>(response.host_reasons().begin(),
                                                    response.host_reasons().end())},
          {"forced_idle_budget_pct", response.has_forced_idle_budget_pct()
                                         ? json(response.forced_idle_budget_pct())
                                         : json(nullptr)},
          {"current",
           {{"isolation", IsolationName(response.current().isolation())},
            {"trust_group", response.current().trust_group()}}}};
}

void PrintExplain(const v1::ExplainVMResponse& response, std::ostream& out) {
  PrintFields(
      {{"vm", response.vm_id()},
       {"tenant", response.tenant_id()},
       {"host", absl::StrCat(response.host_id(), " (", response.host_vms(),
                             " tagged VMs considered)")},
       {"assumed", absl::StrFormat("%d vCPUs, load %.2f per vCPU", response.vcpus(),
                                   response.load())},
       {"isolation", IsolationName(response.isolation())},
       {"trust group",
        response.trust_group().empty() ? "(none: cookie 0)" : response.trust_group()},
       {"pinned cpus", CpusText(Ints(response.pin_cpus()), "(not pinned)")},
       {"current", absl::StrCat(IsolationName(response.current().isolation()), ", group ",
                                response.current().trust_group().empty()
                                    ? "(none)"
                                    : response.current().trust_group())},
       {"forced-idle budget",
        response.has_forced_idle_budget_pct()
            ? absl::StrFormat("%g%% of host CPU time", response.forced_idle_budget_pct())
            : "none"},
       {"layout", response.chosen_layout()}},
      out);
  for (const std::string& reason : response.reasons()) out << "  - " << reason << "\n";
  for (const std::string& reason : response.host_reasons()) {
    out << "  host: " << reason << "\n";
  }
  out << "\n";
  TextTable table({"LAYOUT", "THROUGHPUT", "FORCED-IDLE%", "X-TENANT%", "IN-BUDGET"});
  for (const v1::LayoutCandidate& c : response.layouts()) {
    table.AddRow({c.name() == response.chosen_layout() ? c.name() + " *" : c.name(),
                  absl::StrFormat("%.2f", c.predicted_throughput()),
                  absl::StrFormat("%.1f", c.predicted_forced_idle_pct()),
                  absl::StrFormat("%.1f", c.predicted_cross_tenant_pct()),
                  c.within_budget() ? "yes" : "no"});
  }
  table.Print(out);
}

}  // namespace cosched::cli
