#include "cli/policy_output.h"

#include "host/cpu_affinity.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/output.h"
#include "common/cpu_list.h"
#include "common/names.h"
#include "google/protobuf/util/time_util.h"

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

std::string DecidedByName(v1::DecidedBy by) {
  switch (by) {
    case v1::DECIDED_BY_ENGINE: return "engine";
    case v1::DECIDED_BY_OPERATOR: return "operator";
    default: return "";
  }
}

json PredictedToJson(const v1::PredictedLayout& p) {
  return {{"throughput", Round(p.throughput(), 3)},
          {"forced_idle_pct", Round(p.forced_idle_pct(), 2)},
          {"cross_tenant_pct", Round(p.cross_tenant_pct(), 2)},
          {"foreign_pct", Round(p.foreign_pct(), 2)},
          {"gain", Round(p.gain(), 4)}};
}

json Optional(bool has, double value, int digits) {
  return has ? json(Round(value, digits)) : json(nullptr);
}

json MeasuredToJson(const v1::MeasuredLayout& m) {
  return {{"windows", m.windows()},
          {"throughput", Optional(m.has_throughput(), m.throughput(), 3)},
          {"forced_idle_pct", Optional(m.has_forced_idle_pct(), m.forced_idle_pct(), 2)},
          {"foreign_pct", Round(m.foreign_pct(), 2)},
          {"forced_idle_error_pct",
           Optional(m.has_forced_idle_error_pct(), m.forced_idle_error_pct(), 2)}};
}

std::string Percent(bool has, double fraction) {
  return has ? absl::StrFormat("%+.1f%%", 100 * fraction) : std::string("-");
}

std::string Points(bool has, double points) {
  return has ? absl::StrFormat("%+.1f", points) : std::string("-");
}

// "predicted X, measured Y" for a report's figure, with `digits` after the
// point; "-" when unknown.
std::string PredictedMeasured(double predicted, bool has, double measured, int digits) {
  return absl::StrCat(absl::StrFormat("%.*f", digits, predicted), " / ",
                      has ? absl::StrFormat("%.*f", digits, measured) : std::string("-"));
}

std::string PredictedText(const v1::PredictedLayout& p) {
  return absl::StrFormat("throughput %.2f, forced idle %.1f%%, cross-tenant %.1f%%, gain %+.1f%%",
                         p.throughput(), p.forced_idle_pct(), p.cross_tenant_pct(),
                         100 * p.gain());
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
  const v1::LayoutDecision& decision = response.decision();
  const v1::MeasuredLayout& measured = response.measured();
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
          // Why the engine would decide isolation/trust_group/pin_cpus now;
          // "reasons" are those of the decision in force (below).
          {"proposed_reasons", std::vector<std::string>(response.reasons().begin(),
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
            {"trust_group", response.current().trust_group()}}},
          {"recommended_host", response.recommended_host()},
          {"decided_by", decision.decided_by() == v1::DECIDED_BY_UNSPECIFIED
                             ? json(nullptr)
                             : json(DecidedByName(decision.decided_by()))},
          {"decided_at", decision.has_decided_at()
                             ? json(google::protobuf::util::TimeUtil::ToString(
                                   decision.decided_at()))
                             : json(nullptr)},
          {"reasons",
           std::vector<std::string>(decision.reasons().begin(), decision.reasons().end())},
          {"predicted",
           decision.has_predicted() ? PredictedToJson(decision.predicted()) : json(nullptr)},
          {"measured", MeasuredToJson(measured)},
          {"host_plan", response.has_host_plan() ? HostPlanReportToJson(response.host_plan())
                                                 : json(nullptr)}};
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
  const v1::LayoutDecision& decision = response.decision();
  if (decision.decided_by() != v1::DECIDED_BY_UNSPECIFIED) {
    out << "current level set by " << DecidedByName(decision.decided_by());
    if (decision.has_decided_at()) {
      out << " at " << google::protobuf::util::TimeUtil::ToString(decision.decided_at());
    }
    out << ":\n";
    for (const std::string& reason : decision.reasons()) out << "  - " << reason << "\n";
    if (decision.has_predicted()) {
      out << "  predicted: " << PredictedText(decision.predicted()) << "\n";
    }
  }
  const v1::MeasuredLayout& measured = response.measured();
  if (measured.windows() == 0) {
    out << "  measured: nothing reported in the last 5 minutes\n";
  } else {
    out << absl::StrFormat("  measured (%d windows): forced idle %s, foreign %.1f%%",
                           measured.windows(),
                           measured.has_forced_idle_pct()
                               ? absl::StrFormat("%.1f%%", measured.forced_idle_pct())
                               : std::string("unknown (schedstats off)"),
                           measured.foreign_pct());
    if (measured.has_forced_idle_error_pct()) {
      out << absl::StrFormat(", %+.1f points from the prediction",
                             measured.forced_idle_error_pct());
    }
    out << "\n";
  }
  if (response.has_host_plan()) {
    const v1::HostPlanReport& r = response.host_plan();
    out << "  host's plan of " << google::protobuf::util::TimeUtil::ToString(r.decided_at())
        << " (" << r.vms() << " VMs): ";
    if (r.since().windows() == 0) {
      out << "predicted gain " << Percent(true, r.predicted().gain())
          << ", not measured since yet\n";
    } else {
      out << absl::StrFormat(
          "gain predicted %s, measured %s; forced idle predicted %.1f%%, measured %s "
          "(error %s points); throughput error %s (%d windows since)\n",
          Percent(true, r.predicted().gain()),
          Percent(r.has_measured_gain(), r.measured_gain()), r.predicted().forced_idle_pct(),
          r.since().has_forced_idle_pct()
              ? absl::StrFormat("%.1f%%", r.since().forced_idle_pct())
              : std::string("unknown"),
          Points(r.has_forced_idle_error_pct(), r.forced_idle_error_pct()),
          Percent(r.has_throughput_error(), r.throughput_error()), r.since().windows());
    }
  }
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

json PlanToJson(const v1::PlanResponse& response) {
  json hosts = json::array();
  for (const v1::HostLayoutPlan& h : response.hosts()) {
    json changes = json::array();
    for (const v1::VMLayoutChange& c : h.changes()) {
      changes.push_back({{"vm_id", c.vm_id()},
                         {"tenant_id", c.tenant_id()},
                         {"from", {{"isolation", IsolationName(c.from_isolation())},
                                   {"trust_group", c.from_trust_group()},
                                   {"pin_cpus", Ints(c.from_pin_cpus())}}},
                         {"to", {{"isolation", IsolationName(c.to_isolation())},
                                 {"trust_group", c.to_trust_group()},
                                 {"pin_cpus", Ints(c.to_pin_cpus())}}}});
    }
    hosts.push_back(
        {{"host_id", h.host_id()},
         {"changes", changes},
         {"current", h.has_current() ? PredictedToJson(h.current()) : json(nullptr)},
         {"planned", h.has_planned() ? PredictedToJson(h.planned()) : json(nullptr)},
         {"predicted_gain", h.has_planned() ? json(Round(h.planned().gain(), 4)) : json(nullptr)},
         {"would_apply", h.would_apply()},
         {"reasons", std::vector<std::string>(h.reasons().begin(), h.reasons().end())}});
  }
  return hosts;
}

void PrintPlan(const v1::PlanResponse& response, std::ostream& out) {
  int changing = 0;
  for (const v1::HostLayoutPlan& h : response.hosts()) {
    if (h.changes().empty()) {
      out << "host " << h.host_id() << ": keeps its layout ("
          << absl::StrJoin(h.reasons(), "; ") << ")\n";
      continue;
    }
    ++changing;
    out << "host " << h.host_id() << ": "
        << (h.would_apply() ? "would change now" : "would not change now") << "\n";
    TextTable table({"VM", "TENANT", "FROM", "TO"});
    // "vm acme/vm/a-1", and the CPUs where the engine pins it: "on 0-1".
    auto layout = [](v1::IsolationLevel level, const std::string& group, const auto& pins) {
      std::string text = absl::StrCat(IsolationName(level), " ", group);
      if (!pins.empty()) absl::StrAppend(&text, " on ", FormatCpuList(Ints(pins)));
      return text;
    };
    for (const v1::VMLayoutChange& c : h.changes()) {
      table.AddRow({c.vm_id(), c.tenant_id(),
                    layout(c.from_isolation(), c.from_trust_group(), c.from_pin_cpus()),
                    layout(c.to_isolation(), c.to_trust_group(), c.to_pin_cpus())});
    }
    table.Print(out);
    for (const std::string& reason : h.reasons()) out << "  - " << reason << "\n";
    out << "\n";
  }
  out << changing << " of " << response.hosts_size()
      << " hosts with engine-managed VMs would change\n";
}

json HostPlanReportToJson(const v1::HostPlanReport& r) {
  return {{"host_id", r.host_id()},
          {"decided_at", google::protobuf::util::TimeUtil::ToString(r.decided_at())},
          {"vms", r.vms()},
          {"predicted", PredictedToJson(r.predicted())},
          {"before", MeasuredToJson(r.before())},
          {"since", MeasuredToJson(r.since())},
          {"measured_gain", Optional(r.has_measured_gain(), r.measured_gain(), 4)},
          {"throughput_error", Optional(r.has_throughput_error(), r.throughput_error(), 4)},
          {"forced_idle_error_pct",
           Optional(r.has_forced_idle_error_pct(), r.forced_idle_error_pct(), 2)},
          {"foreign_error_pct", Optional(r.has_foreign_error_pct(), r.foreign_error_pct(), 2)}};
}

json PlanReportToJson(const v1::PlanResponse& response) {
  json hosts = json::array();
  for (const v1::HostPlanReport& r : response.reports()) hosts.push_back(HostPlanReportToJson(r));
  const v1::PlanReportSummary& s = response.summary();
  return {{"hosts", hosts},
          {"summary",
           {{"hosts", s.hosts()},
            {"measured_hosts", s.measured_hosts()},
            {"mean_predicted_gain",
             Optional(s.has_mean_predicted_gain(), s.mean_predicted_gain(), 4)},
            {"mean_measured_gain", Optional(s.has_mean_measured_gain(), s.mean_measured_gain(), 4)},
            {"mean_abs_throughput_error",
             Optional(s.has_mean_abs_throughput_error(), s.mean_abs_throughput_error(), 4)},
            {"mean_abs_forced_idle_error_pct",
             Optional(s.has_mean_abs_forced_idle_error_pct(), s.mean_abs_forced_idle_error_pct(),
                      2)}}}};
}

void PrintPlanReport(const v1::PlanResponse& response, std::ostream& out) {
  if (response.reports().empty()) {
    out << "the policy engine has applied no plan on any host\n";
    return;
  }
  TextTable table({"HOST", "DECIDED", "VMS", "GAIN PRED/MEAS", "THROUGHPUT PRED/MEAS",
                   "FORCED-IDLE% PRED/MEAS", "ERR POINTS", "WINDOWS"});
  for (const v1::HostPlanReport& r : response.reports()) {
    const v1::MeasuredLayout& since = r.since();
    table.AddRow(
        {r.host_id(), google::protobuf::util::TimeUtil::ToString(r.decided_at()),
         absl::StrCat(r.vms()),
         absl::StrCat(Percent(true, r.predicted().gain()), " / ",
                      Percent(r.has_measured_gain(), r.measured_gain())),
         PredictedMeasured(r.predicted().throughput(), since.has_throughput(),
                           since.throughput(), 2),
         PredictedMeasured(r.predicted().forced_idle_pct(), since.has_forced_idle_pct(),
                           since.forced_idle_pct(), 1),
         Points(r.has_forced_idle_error_pct(), r.forced_idle_error_pct()),
         absl::StrCat(since.windows())});
  }
  table.Print(out);
  const v1::PlanReportSummary& s = response.summary();
  out << "\n"
      << s.hosts() << " hosts with an applied plan, " << s.measured_hosts()
      << " measured since; mean predicted gain "
      << Percent(s.has_mean_predicted_gain(), s.mean_predicted_gain()) << ", measured "
      << Percent(s.has_mean_measured_gain(), s.mean_measured_gain())
      << "; mean |throughput error| "
      << (s.has_mean_abs_throughput_error()
              ? absl::StrFormat("%.1f%%", 100 * s.mean_abs_throughput_error())
              : std::string("-"))
      << ", mean |forced-idle error| "
      << (s.has_mean_abs_forced_idle_error_pct()
              ? absl::StrFormat("%.1f points", s.mean_abs_forced_idle_error_pct())
              : std::string("-"))
      << "\n";
}

}  // namespace cosched::cli
