// The Grafana dashboard in deploy/grafana/ may only query metrics that
// csd and cs-agent export, so it cannot drift from the code: every
// cosched_* name in its expressions and variables must be one that the
// metrics classes serve once they have seen some data.
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "agent/agent_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/api/csd_metrics.h"

namespace cosched {
namespace {

// Names of every series the collectables serve; a histogram's series are
// its _bucket, _sum and _count.
void AddExportedNames(
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables,
    std::set<std::string>& names) {
  for (const auto& collectable : collectables) {
    for (const prometheus::MetricFamily& family : collectable->Collect()) {
      if (family.type == prometheus::MetricType::Histogram) {
        for (const char* suffix : {"_bucket", "_sum", "_count"}) {
          names.insert(family.name + suffix);
        }
      } else {
        names.insert(family.name);
      }
    }
  }
}

std::set<std::string> ExportedNames() {
  std::set<std::string> names;

  agent::AgentMetrics agent_metrics([] { return true; });
  v1::StatsWindow window;
  v1::VMStats* vm = window.add_vms();
  vm->set_vm_id("vm-1");
  vm->mutable_share()->set_run_ns(1);
  vm->mutable_share()->set_forced_idle_known(true);
  window.add_cores()->set_core(0);
  agent_metrics.RecordStatsWindow(window, [](const std::string&) { return "g"; });
  agent::ReconcileResult result;
  agent::VmOutcome outcome;
  outcome.vm_id = "vm-1";
  result.vms.push_back(outcome);
  agent::PassRecord pass;
  pass.result = &result;
  agent_metrics.RecordReconcilePass(pass);
  agent_metrics.rpc().SeriesFor("/cosched.v1.AgentService/Report")->Handled(0, 0.1, true);
  AddExportedNames(agent_metrics.collectables(), names);

  server::CsdMetrics csd_metrics({});
  v1::ReportRequest report;
  report.set_host_id("h");
  *report.add_stats() = window;
  csd_metrics.RecordAcceptedReport(server::SummarizeReport(report));
  csd_metrics.RecordStoreWrite(absl::StatusCode::kOk, 0.001);
  csd_metrics.rpc().SeriesFor("/cosched.v1.ControlPlane/TagVM")->Handled(0, 0.1, true);
  AddExportedNames(csd_metrics.collectables(), names);
  return names;
}

// Every panel, rows' nested panels included.
void CollectPanels(const nlohmann::json& panels, std::vector<nlohmann::json>& out) {
  for (const auto& panel : panels) {
    out.push_back(panel);
    if (panel.contains("panels")) CollectPanels(panel["panels"], out);
  }
}

// The cosched_* names an expression reads: metrics, and recording rules
// (level:cosched_...:operations, Prometheus' naming convention).
std::set<std::string> MetricNamesIn(const std::string& expr) {
  static const std::regex kName("([a-z_]+:)?cosched_[a-z0-9_]+(:[a-z0-9_]+)?");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), kName);
       it != std::sregex_iterator(); ++it) {
    names.insert(it->str());
  }
  return names;
}

bool IsRecordingRule(const std::string& name) { return name.find(':') != std::string::npos; }

// The recording rules deploy/prometheus/ ships: "- record: <name>" lines.
std::set<std::string> RecordedNames() {
  std::ifstream in(COSCHED_RULES);
  EXPECT_TRUE(in) << "cannot read " << COSCHED_RULES;
  static const std::regex kRecord(R"(^\s*- record:\s*(\S+))");
  std::set<std::string> names;
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, m, kRecord)) names.insert(m[1]);
  }
  return names;
}

TEST(Dashboard, QueriesOnlyExportedMetrics) {
  std::ifstream in(COSCHED_DASHBOARD);
  ASSERT_TRUE(in) << "cannot read " << COSCHED_DASHBOARD;
  nlohmann::json dashboard = nlohmann::json::parse(in);
  EXPECT_GE(dashboard["schemaVersion"].get<int>(), 36);

  const std::set<std::string> exported = ExportedNames();
  const std::set<std::string> recorded = RecordedNames();
  ASSERT_TRUE(recorded.count("job:cosched_csd_connected_agents:sum"));
  // A name the dashboard reads is a metric a daemon exports, or a
  // recording rule the shipped rules define.
  auto known = [&](const std::string& name) {
    return IsRecordingRule(name) ? recorded.count(name) > 0 : exported.count(name) > 0;
  };
  // The names the tests below rely on are there at all.
  ASSERT_TRUE(exported.count("cosched_vm_sibling_seconds_total"));
  ASSERT_TRUE(exported.count("cosched_grpc_server_handling_seconds_bucket"));

  std::vector<nlohmann::json> panels;
  CollectPanels(dashboard["panels"], panels);
  int queried = 0;
  std::set<std::string> used;
  for (const auto& panel : panels) {
    if (panel["type"] == "row") continue;
    const std::string title = panel["title"];
    EXPECT_EQ(panel["datasource"]["uid"], "${datasource}") << title;
    ASSERT_TRUE(panel.contains("targets")) << title;
    ASSERT_FALSE(panel["targets"].empty()) << title;
    for (const auto& target : panel["targets"]) {
      const std::string expr = target["expr"];
      const std::set<std::string> names = MetricNamesIn(expr);
      EXPECT_FALSE(names.empty()) << title << ": " << expr;
      for (const std::string& name : names) {
        EXPECT_TRUE(known(name)) << "panel \"" << title << "\" queries " << name
                                 << ", which no cosched metric class exports and no "
                                    "recording rule of deploy/prometheus defines";
        used.insert(name);
      }
      ++queried;
    }
  }
  for (const auto& variable : dashboard["templating"]["list"]) {
    if (!variable.contains("definition")) continue;
    for (const std::string& name : MetricNamesIn(variable["definition"])) {
      EXPECT_TRUE(known(name)) << "variable " << variable["name"] << " queries " << name;
    }
  }
  EXPECT_GE(queried, 20);
  // The views the dashboard exists for.
  for (const char* name :
       {"cosched_vm_run_seconds_total", "cosched_vm_longest_foreign_interval_seconds",
        "cosched_vm_forced_idle_seconds_total", "cosched_agent_vms",
        "cosched_agent_reconcile_duration_seconds_bucket",
        "cosched_grpc_server_handled_total", "job:cosched_csd_connected_agents:sum"}) {
    EXPECT_TRUE(used.count(name)) << "the dashboard no longer shows " << name;
  }
}

TEST(Dashboard, NameCheckCatchesAnUnknownMetric) {
  // The check above would fail for a misspelt name: it is not exported.
  EXPECT_EQ(ExportedNames().count("cosched_vm_foreign_seconds_total"), 0u);
  EXPECT_EQ(MetricNamesIn("rate(cosched_a_total[5m]) / cosched_b"),
            (std::set<std::string>{"cosched_a_total", "cosched_b"}));
  // A recording rule is one name, checked against the rules file.
  EXPECT_EQ(MetricNamesIn("sum(job:cosched_a:sum) / instance_vm:cosched_b:ratio_rate5m"),
            (std::set<std::string>{"job:cosched_a:sum", "instance_vm:cosched_b:ratio_rate5m"}));
  EXPECT_EQ(RecordedNames().count("job:cosched_csd_connected_agents:max"), 0u);
}

}  // namespace
}  // namespace cosched
