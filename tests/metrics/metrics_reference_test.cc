// docs/metrics.md is the reference of every metric csd and cs-agent export:
// its "cs-agent" and "csd" tables must list exactly the metric families
// that AgentMetrics and CsdMetrics serve (once they have seen some data),
// with their types. A metric added to the code and not to the doc, or left
// in the doc after it went, fails here.
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "agent/agent_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/api/csd_metrics.h"

namespace cosched {
namespace {

using Families = std::map<std::string, std::string>;  // name -> type

std::string TypeName(prometheus::MetricType type) {
  switch (type) {
    case prometheus::MetricType::Counter: return "counter";
    case prometheus::MetricType::Gauge: return "gauge";
    case prometheus::MetricType::Histogram: return "histogram";
    case prometheus::MetricType::Summary: return "summary";
    default: return "untyped";
  }
}

Families FamiliesOf(
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  Families families;
  for (const auto& collectable : collectables) {
    for (const prometheus::MetricFamily& family : collectable->Collect()) {
      families[family.name] = TypeName(family.type);
    }
  }
  return families;
}

v1::StatsWindow AWindow() {
  v1::StatsWindow window;
  v1::VMStats* vm = window.add_vms();
  vm->set_vm_id("vm-1");
  vm->mutable_share()->set_run_ns(1);
  vm->mutable_share()->set_forced_idle_known(true);
  window.add_cores()->set_core(0);
  return window;
}

// What cs-agent's /metrics serves, every series kind fed once.
Families AgentFamilies() {
  agent::AgentMetrics metrics([] { return true; });
  metrics.RecordStatsWindow(AWindow(), [](const std::string&) { return "g"; });
  agent::ReconcileResult result;
  agent::VmOutcome outcome;
  outcome.vm_id = "vm-1";
  result.vms.push_back(outcome);
  agent::PassRecord pass;
  pass.result = &result;
  metrics.RecordReconcilePass(pass);
  metrics.rpc().SeriesFor("/cosched.v1.AgentService/Report")->Handled(0, 0.1, true);
  return FamiliesOf(metrics.collectables());
}

// What csd's /metrics serves.
Families CsdFamilies() {
  server::CsdMetrics metrics({});
  v1::ReportRequest report;
  report.set_host_id("h");
  *report.add_stats() = AWindow();
  metrics.RecordAcceptedReport(server::SummarizeReport(report));
  metrics.RecordStoreWrite(absl::StatusCode::kOk, 0.001);
  metrics.rpc().SeriesFor("/cosched.v1.ControlPlane/TagVM")->Handled(0, 0.1, true);
  return FamiliesOf(metrics.collectables());
}

// The tables of the doc by section ("cs-agent", "csd"): every `cosched_*`
// name in a row's first cell, with the row's type cell.
std::map<std::string, Families> DocTables(const std::string& text) {
  static const std::regex kName("`(cosched_[a-z0-9_]+)`");
  std::map<std::string, Families> tables;
  std::string section;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      section = line.substr(3);
      continue;
    }
    if (line.rfind("| `cosched_", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream row(line.substr(1));
    std::string cell;
    while (std::getline(row, cell, '|')) cells.push_back(cell);
    if (cells.size() < 2) continue;
    std::string type = cells[1];
    type.erase(0, type.find_first_not_of(' '));
    type.erase(type.find_last_not_of(' ') + 1);
    for (auto it = std::sregex_iterator(cells[0].begin(), cells[0].end(), kName);
         it != std::sregex_iterator(); ++it) {
      tables[section][(*it)[1]] = type;
    }
  }
  return tables;
}

std::string ReadDoc() {
  std::ifstream in(COSCHED_METRICS_DOC);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Names of `a` missing from `b`, one a line, for the failure message.
std::string Missing(const Families& a, const Families& b) {
  std::string out;
  for (const auto& [name, type] : a) {
    if (!b.count(name)) out += "  " + name + " (" + type + ")\n";
  }
  return out;
}

void ExpectSame(const Families& exported, const Families& documented,
                const std::string& who) {
  EXPECT_EQ(Missing(exported, documented), "")
      << who << " exports these, and docs/metrics.md's \"" << who
      << "\" table does not list them";
  EXPECT_EQ(Missing(documented, exported), "")
      << "docs/metrics.md's \"" << who << "\" table lists these, and " << who
      << " does not export them";
  for (const auto& [name, type] : exported) {
    auto it = documented.find(name);
    if (it != documented.end()) {
      EXPECT_EQ(it->second, type) << name << "'s type in docs/metrics.md";
    }
  }
}

TEST(MetricsReference, ListsExactlyWhatTheAgentExports) {
  const std::string doc = ReadDoc();
  ASSERT_FALSE(doc.empty()) << "cannot read " << COSCHED_METRICS_DOC;
  auto tables = DocTables(doc);
  ASSERT_TRUE(tables.count("cs-agent")) << "no \"## cs-agent\" table";
  const Families exported = AgentFamilies();
  ASSERT_GE(exported.size(), 20u);
  ExpectSame(exported, tables["cs-agent"], "cs-agent");
}

TEST(MetricsReference, ListsExactlyWhatCsdExports) {
  const std::string doc = ReadDoc();
  ASSERT_FALSE(doc.empty()) << "cannot read " << COSCHED_METRICS_DOC;
  auto tables = DocTables(doc);
  ASSERT_TRUE(tables.count("csd")) << "no \"## csd\" table";
  const Families exported = CsdFamilies();
  ASSERT_GE(exported.size(), 10u);
  ExpectSame(exported, tables["csd"], "csd");
}

TEST(MetricsReference, TheParserReadsRowsOfSeveralNames) {
  auto tables = DocTables(
      "## csd\n"
      "| metric | type |\n"
      "| `cosched_a_total`, `cosched_b_total` | counter | | x |\n"
      "| `cosched_c` | gauge | `state` (as for `cosched_d`) | y |\n");
  EXPECT_EQ(tables["csd"], (Families{{"cosched_a_total", "counter"},
                                     {"cosched_b_total", "counter"},
                                     {"cosched_c", "gauge"}}));
  // A doc missing a metric fails the comparison.
  EXPECT_NE(Missing({{"cosched_e", "gauge"}}, tables["csd"]), "");
}

}  // namespace
}  // namespace cosched
