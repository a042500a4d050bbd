#include "cli/output.h"

#include <sstream>

#include "cli/policy_output.h"

#include "gtest/gtest.h"

namespace cosched::cli {
namespace {

v1::VM TaggedVm(const std::string& id, const std::string& tenant) {
  v1::VM vm;
  vm.set_vm_id(id);
  vm.set_tenant_id(tenant);
  vm.add_interference_classes("db");
  vm.add_interference_classes("noisy");
  v1::Assignment* a = vm.mutable_assignment();
  a->set_isolation(v1::ISOLATION_LEVEL_TENANT);
  a->set_trust_group("tg-" + tenant);
  a->set_thread_scope(v1::THREAD_SCOPE_EMULATOR);
  a->set_revision(12);
  return vm;
}

TEST(OutputTest, VmBlock) {
  v1::VM vm = TaggedVm("vm-1", "acme");
  vm.set_host_id("kvm-01");
  vm.mutable_enforcement()->set_state(v1::ENFORCEMENT_STATE_PARTIAL);
  vm.mutable_enforcement()->set_threads_found(4);
  vm.mutable_enforcement()->set_threads_tagged(3);
  vm.mutable_enforcement()->set_last_error("tid 77:\nEPERM");
  vm.mutable_update_time()->set_seconds(1700000000);
  std::ostringstream out;
  PrintVm(vm, out);
  EXPECT_EQ(out.str(),
            "vm:                   vm-1\n"
            "tenant:               acme\n"
            "isolation:            tenant (requested: default)\n"
            "trust group:          tg-acme\n"
            "dedicated cores:      no\n"
            "pinned:               no\n"
            "interference classes: db,noisy\n"
            "thread scope:         emulator\n"
            "revision:             12\n"
            "host:                 kvm-01\n"
            "on hosts:             -\n"
            "enforcement:          partial (3/4 threads tagged)\n"
            "tagged from:          TagVM\n"
            "last error:           tid 77:?EPERM\n"
            "created:              -\n"
            "updated:              2023-11-14T22:13:20Z\n");
}

// The engine's pin, and where the agent found others pin the vCPUs.
TEST(OutputTest, VmBlockAndJsonShowPins) {
  v1::VM vm = TaggedVm("vm-1", "acme");
  vm.mutable_assignment()->mutable_pin()->set_host_id("kvm-01");
  for (int cpu : {0, 1, 2, 3, 8}) vm.mutable_assignment()->mutable_pin()->add_cpus(cpu);
  for (int cpu : {4, 5}) vm.mutable_enforcement()->add_vcpu_affinity(cpu);
  std::ostringstream out;
  PrintVm(vm, out);
  EXPECT_NE(out.str().find("pinned:               CPUs 0-3,8 of host kvm-01 (the engine's)\n"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("vCPU affinity:        4-5 (set by others: libvirt, taskset)\n"),
            std::string::npos)
      << out.str();
  const nlohmann::json json = VmToJson(vm);
  EXPECT_EQ(json["pin"]["host_id"], "kvm-01");
  EXPECT_EQ(json["pin"]["cpus"], nlohmann::json({0, 1, 2, 3, 8}));
  EXPECT_EQ(json["enforcement"]["vcpu_affinity"], nlohmann::json({4, 5}));
  EXPECT_EQ(json["enforcement"]["pinned_cpus"], nlohmann::json::array());
  EXPECT_TRUE(VmToJson(TaggedVm("vm-2", "acme"))["pin"].is_null());
}

TEST(OutputTest, VmTableAlignsColumnsWithoutTrailingSpaces) {
  v1::VM none = TaggedVm("a-long-vm-name", "t");
  none.mutable_assignment()->set_isolation(v1::ISOLATION_LEVEL_NONE);
  none.mutable_assignment()->clear_trust_group();
  // Tagged under its UUID from Nova's metadata: its domain name beside it.
  v1::VM by_uuid = TaggedVm("0b5e2e4c-uuid", "t");
  by_uuid.set_domain_name("instance-0001a");
  by_uuid.mutable_assignment()->set_isolation(v1::ISOLATION_LEVEL_VM);
  by_uuid.mutable_assignment()->clear_trust_group();
  std::ostringstream out;
  PrintVmTable({TaggedVm("vm-1", "acme"), none, by_uuid}, out);
  EXPECT_EQ(out.str(),
            "VM              NAME            TENANT  ISOLATION  TRUST GROUP  REVISION  HOST  "
            "ENFORCEMENT\n"
            "vm-1            -               acme    tenant     tg-acme      12        -     -\n"
            "a-long-vm-name  -               t       none       -            12        -     -\n"
            "0b5e2e4c-uuid   instance-0001a  t       vm         -            12        -     -\n");
}

TEST(OutputTest, VmJsonUsesShortNamesAndNullForMissingParts) {
  nlohmann::json j = VmToJson(TaggedVm("vm-1", "acme"));
  EXPECT_EQ(j["isolation"], "tenant");
  EXPECT_EQ(j["requested_isolation"], "default");
  EXPECT_EQ(j["thread_scope"], "emulator");
  EXPECT_TRUE(j["enforcement"].is_null());
  EXPECT_TRUE(j["create_time"].is_null());
}

TEST(OutputTest, JsonReplacesInvalidUtf8InsteadOfThrowing) {
  std::ostringstream out;
  PrintJson({{"last_error", std::string("bad \xff byte")}}, out);
  EXPECT_NE(out.str().find("bad"), std::string::npos);
}

TEST(OutputTest, ExplainJsonSaysWhoDecidedWhenWhyAndWhatWasPredictedAndMeasured) {
  v1::ExplainVMResponse response;
  response.set_vm_id("vm-1");
  response.add_reasons("would stay at `tenant`");
  v1::LayoutDecision* d = response.mutable_decision();
  d->set_decided_by(v1::DECIDED_BY_ENGINE);
  d->mutable_decided_at()->set_seconds(1700000000);
  d->add_reasons("tenant 'acme' allows `tenant`");
  d->mutable_predicted()->set_throughput(3.5);
  d->mutable_predicted()->set_forced_idle_pct(1.25);
  d->mutable_predicted()->set_gain(0.2);
  response.mutable_measured()->set_windows(6);
  response.mutable_measured()->set_forced_idle_pct(1.5);
  response.mutable_measured()->set_forced_idle_error_pct(0.25);
  nlohmann::json j = ExplainToJson(response);
  EXPECT_EQ(j["decided_by"], "engine");
  EXPECT_EQ(j["decided_at"], "2023-11-14T22:13:20Z");
  EXPECT_EQ(j["reasons"], nlohmann::json({"tenant 'acme' allows `tenant`"}));
  EXPECT_EQ(j["predicted"]["throughput"], 3.5);
  EXPECT_EQ(j["predicted"]["gain"], 0.2);
  EXPECT_EQ(j["measured"]["windows"], 6);
  EXPECT_EQ(j["measured"]["forced_idle_pct"], 1.5);
  EXPECT_EQ(j["measured"]["forced_idle_error_pct"], 0.25);
  EXPECT_EQ(j["proposed_reasons"], nlohmann::json({"would stay at `tenant`"}));
  EXPECT_FALSE(j.contains("decision_reasons"));

  std::ostringstream text;
  PrintExplain(response, text);
  EXPECT_NE(text.str().find("current level set by engine at 2023-11-14T22:13:20Z"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("+0.2 points from the prediction"), std::string::npos)
      << text.str();

  v1::ExplainVMResponse operators;
  operators.mutable_decision()->set_decided_by(v1::DECIDED_BY_OPERATOR);
  j = ExplainToJson(operators);
  EXPECT_EQ(j["decided_by"], "operator");
  EXPECT_TRUE(j["predicted"].is_null());
  EXPECT_TRUE(j["measured"]["forced_idle_pct"].is_null());
}

TEST(OutputTest, AHostTheEngineFlaggedShowsItsBudgetUnmet) {
  v1::Host flagged;
  flagged.set_host_id("hv-1");
  flagged.set_budget_unmet("measured forced idle over the least budget");
  v1::Host fine;
  fine.set_host_id("hv-2");
  std::ostringstream table;
  PrintHostTable({flagged, fine}, table);
  EXPECT_NE(table.str().find("BUDGET"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("unmet"), std::string::npos) << table.str();
  EXPECT_EQ(HostToJson(flagged)["budget_unmet"], "measured forced idle over the least budget");
  EXPECT_EQ(HostToJson(fine)["budget_unmet"], "");
  std::ostringstream block;
  PrintHost(flagged, block);
  EXPECT_NE(block.str().find("measured forced idle over the least budget"), std::string::npos)
      << block.str();
}

TEST(OutputTest, AHostSaysWhichReplicaItsAgentIsConnectedTo) {
  v1::Host host;
  host.set_host_id("hv-1");
  host.set_connected(true);
  host.set_connected_replica("csd-b");
  std::ostringstream block;
  PrintHost(host, block);
  EXPECT_NE(block.str().find("yes (to replica csd-b)"), std::string::npos) << block.str();
  EXPECT_EQ(HostToJson(host)["connected_replica"], "csd-b");
  host.set_connected(false);
  host.clear_connected_replica();
  std::ostringstream alone;
  PrintHost(host, alone);
  EXPECT_EQ(alone.str().find("replica"), std::string::npos) << alone.str();
  EXPECT_EQ(HostToJson(host)["connected_replica"], "");
}

TEST(OutputTest, PlanShowsEachChangeAndThePredictedGain) {
  v1::PlanResponse response;
  v1::HostLayoutPlan* h = response.add_hosts();
  h->set_host_id("hv-1");
  v1::VMLayoutChange* c = h->add_changes();
  c->set_vm_id("a-1");
  c->set_tenant_id("acme");
  c->set_from_isolation(v1::ISOLATION_LEVEL_VM);
  c->set_from_trust_group("acme/vm/a-1");
  c->set_to_isolation(v1::ISOLATION_LEVEL_TENANT);
  c->set_to_trust_group("acme/tenant");
  h->mutable_planned()->set_gain(0.35);
  h->add_reasons("dry run: a tenant has apply: false");
  response.add_hosts()->set_host_id("hv-2");
  response.mutable_hosts(1)->add_reasons("the host already has the engine's layout");
  nlohmann::json j = PlanToJson(response);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["changes"][0]["to"]["trust_group"], "acme/tenant");
  EXPECT_EQ(j[0]["predicted_gain"], 0.35);
  EXPECT_EQ(j[0]["would_apply"], false);
  EXPECT_TRUE(j[1]["predicted_gain"].is_null());
  std::ostringstream text;
  PrintPlan(response, text);
  EXPECT_NE(text.str().find("host hv-1: would not change now"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("host hv-2: keeps its layout"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("1 of 2 hosts with engine-managed VMs would change"),
            std::string::npos)
      << text.str();
}

TEST(OutputTest, PlanReportShowsPredictedAgainstMeasuredPerHostAndForTheFleet) {
  v1::PlanResponse response;
  v1::HostPlanReport* r = response.add_reports();
  r->set_host_id("hv-1");
  r->mutable_decided_at()->set_seconds(1700000000);
  r->set_vms(4);
  r->mutable_predicted()->set_throughput(3.2);
  r->mutable_predicted()->set_forced_idle_pct(1.5);
  r->mutable_predicted()->set_gain(0.25);
  r->mutable_before()->set_windows(5);
  r->mutable_before()->set_throughput(2.5);
  r->mutable_since()->set_windows(6);
  r->mutable_since()->set_throughput(3.0);
  r->mutable_since()->set_forced_idle_pct(2.0);
  r->set_measured_gain(0.2);
  r->set_throughput_error(-0.0625);
  r->set_forced_idle_error_pct(0.5);
  v1::HostPlanReport* unmeasured = response.add_reports();
  unmeasured->set_host_id("hv-2");
  unmeasured->mutable_predicted()->set_gain(0.1);
  response.mutable_summary()->set_hosts(2);
  response.mutable_summary()->set_measured_hosts(1);
  response.mutable_summary()->set_mean_predicted_gain(0.175);
  response.mutable_summary()->set_mean_measured_gain(0.2);
  response.mutable_summary()->set_mean_abs_forced_idle_error_pct(0.5);

  nlohmann::json j = PlanReportToJson(response);
  ASSERT_EQ(j["hosts"].size(), 2u);
  EXPECT_EQ(j["hosts"][0]["host_id"], "hv-1");
  EXPECT_EQ(j["hosts"][0]["decided_at"], "2023-11-14T22:13:20Z");
  EXPECT_EQ(j["hosts"][0]["predicted"]["gain"], 0.25);
  EXPECT_EQ(j["hosts"][0]["before"]["throughput"], 2.5);
  EXPECT_EQ(j["hosts"][0]["since"]["throughput"], 3.0);
  EXPECT_EQ(j["hosts"][0]["measured_gain"], 0.2);
  EXPECT_EQ(j["hosts"][0]["forced_idle_error_pct"], 0.5);
  EXPECT_TRUE(j["hosts"][0]["foreign_error_pct"].is_null());
  EXPECT_TRUE(j["hosts"][1]["measured_gain"].is_null());
  EXPECT_EQ(j["hosts"][1]["since"]["windows"], 0);
  EXPECT_EQ(j["summary"]["hosts"], 2);
  EXPECT_EQ(j["summary"]["measured_hosts"], 1);
  EXPECT_EQ(j["summary"]["mean_measured_gain"], 0.2);
  EXPECT_TRUE(j["summary"]["mean_abs_throughput_error"].is_null());

  std::ostringstream text;
  PrintPlanReport(response, text);
  EXPECT_NE(text.str().find("+25.0% / +20.0%"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("3.20 / 3.00"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("+10.0% / -"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("2 hosts with an applied plan, 1 measured since"), std::string::npos)
      << text.str();

  std::ostringstream none;
  PrintPlanReport(v1::PlanResponse(), none);
  EXPECT_NE(none.str().find("applied no plan"), std::string::npos);

  v1::ExplainVMResponse explain;
  *explain.mutable_host_plan() = response.reports(0);
  EXPECT_EQ(ExplainToJson(explain)["host_plan"]["forced_idle_error_pct"], 0.5);
  EXPECT_TRUE(ExplainToJson(v1::ExplainVMResponse())["host_plan"].is_null());
  std::ostringstream explained;
  PrintExplain(explain, explained);
  EXPECT_NE(explained.str().find("gain predicted +25.0%, measured +20.0%"), std::string::npos)
      << explained.str();
  EXPECT_NE(explained.str().find("(error +0.5 points)"), std::string::npos) << explained.str();
}

}  // namespace
}  // namespace cosched::cli
