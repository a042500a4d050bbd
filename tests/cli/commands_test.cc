#include "cli/commands.h"

#include <algorithm>
#include <sstream>

#include "common/validation.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cli/fake_control_plane.h"

namespace cosched::cli {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

int Lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

class CommandsTest : public ::testing::Test {
 protected:
  CommandOptions Json() {
    CommandOptions options = options_;
    options.format = OutputFormat::kJson;
    return options;
  }
  void Tag(const std::string& vm_id, const std::string& tenant = "default") {
    std::ostringstream out, err;
    ASSERT_EQ(RunTag(*stub_, {.vm_id = vm_id, .tenant_id = tenant}, options_,
                     out, err),
              kExitOk)
        << err.str();
  }

  testing::FakeServer server_;
  std::unique_ptr<Stub> stub_ = server_.NewStub();
  CommandOptions options_{.server = server_.address()};
  std::ostringstream out_, err_;
};

TEST_F(CommandsTest, TagWithNoFlagsSendsDefaultTenantAndPrintsAssignment) {
  EXPECT_EQ(RunTag(*stub_, {.vm_id = "vm-123"}, options_, out_, err_),
            kExitOk);
  const std::vector<v1::TagVMRequest> sent_all =
      server_.service().tag_requests();
  ASSERT_EQ(sent_all.size(), 1u);
  const v1::TagVMRequest& sent = sent_all[0];
  EXPECT_EQ(sent.tenant_id(), "default");
  EXPECT_EQ(sent.isolation(), v1::ISOLATION_LEVEL_UNSPECIFIED);
  EXPECT_EQ(sent.thread_scope(), v1::THREAD_SCOPE_UNSPECIFIED);
  EXPECT_THAT(out_.str(), StartsWith("tagged vm-123\n"));
  EXPECT_THAT(out_.str(), HasSubstr("isolation:            vm (requested: default)\n"));
  EXPECT_THAT(out_.str(), HasSubstr("trust group:          vm:vm-123\n"));
  EXPECT_THAT(out_.str(), HasSubstr("revision:             1\n"));
  EXPECT_EQ(err_.str(), "");
}

TEST_F(CommandsTest, TagAgainWithSameInputSaysUnchanged) {
  Tag("vm-1");
  EXPECT_EQ(RunTag(*stub_, {.vm_id = "vm-1"}, options_, out_, err_), kExitOk);
  EXPECT_THAT(out_.str(), StartsWith("unchanged"));
}

TEST_F(CommandsTest, TagJsonHasKeysAndTypes) {
  TagArgs args{.vm_id = "vm-7",
               .tenant_id = "acme",
               .isolation = "tenant",
               .interference_classes = {"noisy", "db"},
               .thread_scope = "full"};
  ASSERT_EQ(RunTag(*stub_, args, Json(), out_, err_), kExitOk) << err_.str();
  json vm = json::parse(out_.str());
  EXPECT_EQ(vm["vm_id"], "vm-7");
  EXPECT_EQ(vm["tenant_id"], "acme");
  EXPECT_EQ(vm["isolation"], "tenant");
  EXPECT_EQ(vm["requested_isolation"], "tenant");
  EXPECT_EQ(vm["trust_group"], "tenant:acme");
  EXPECT_TRUE(vm["revision"].is_number_integer());
  EXPECT_EQ(vm["revision"], 1);
  EXPECT_EQ(vm["dedicated_cores"], false);
  EXPECT_EQ(vm["interference_classes"], json({"db", "noisy"}));
  EXPECT_EQ(vm["thread_scope"], "full");
  EXPECT_EQ(vm["host_id"], "");
  EXPECT_TRUE(vm["enforcement"].is_null());
  EXPECT_EQ(vm["changed"], true);
}

TEST_F(CommandsTest, GetJsonShowsEnforcementAsObject) {
  v1::VM stored;
  stored.set_vm_id("vm-e");
  stored.set_tenant_id("default");
  stored.set_host_id("host-1");
  stored.mutable_assignment()->set_isolation(v1::ISOLATION_LEVEL_DEDICATED);
  stored.mutable_assignment()->set_dedicated_cores(true);
  stored.mutable_assignment()->set_revision(42);
  stored.mutable_enforcement()->set_state(v1::ENFORCEMENT_STATE_ENFORCED);
  stored.mutable_enforcement()->set_threads_found(5);
  stored.mutable_enforcement()->set_threads_tagged(5);
  server_.service().PutVm(stored);

  ASSERT_EQ(RunGet(*stub_, "vm-e", Json(), out_, err_), kExitOk);
  json vm = json::parse(out_.str());
  EXPECT_EQ(vm["isolation"], "dedicated");
  EXPECT_EQ(vm["requested_isolation"], "default");
  EXPECT_EQ(vm["dedicated_cores"], true);
  EXPECT_EQ(vm["revision"], 42);
  EXPECT_EQ(vm["host_id"], "host-1");
  ASSERT_TRUE(vm["enforcement"].is_object());
  EXPECT_EQ(vm["enforcement"]["state"], "enforced");
  EXPECT_EQ(vm["enforcement"]["threads_tagged"], 5);
}

TEST_F(CommandsTest, BadIdIsAUsageErrorNamingTheRuleWithoutAnRpc) {
  EXPECT_EQ(RunTag(*stub_, {.vm_id = "bad id!"}, options_, out_, err_),
            kExitUsage);
  EXPECT_EQ(err_.str(), std::string("csctl: vm_id 'bad id!' ") + kIdRule + "\n");
  EXPECT_EQ(out_.str(), "");
  EXPECT_EQ(server_.service().calls(), 0);
}

TEST_F(CommandsTest, BadIsolationScopeAndClassAreUsageErrors) {
  for (const TagArgs& args :
       {TagArgs{.vm_id = "vm-1", .isolation = "strict"},
        TagArgs{.vm_id = "vm-1", .thread_scope = "all"},
        TagArgs{.vm_id = "vm-1", .interference_classes = {"ok", "not ok"}},
        TagArgs{.vm_id = "vm-1", .tenant_id = "-x"}}) {
    std::ostringstream out, err;
    EXPECT_EQ(RunTag(*stub_, args, options_, out, err), kExitUsage);
    EXPECT_THAT(err.str(), StartsWith("csctl: "));
    EXPECT_EQ(Lines(err.str()), 1) << err.str();
  }
  EXPECT_EQ(server_.service().calls(), 0);
}

TEST_F(CommandsTest, ServerRejectionIsPrintedAsIs) {
  ASSERT_EQ(RunPolicySet(*stub_,
                         {.tenant_id = "strict",
                          .default_isolation = "vm",
                          .allowed_isolation = {"vm"}},
                         options_, out_, err_),
            kExitOk);
  std::ostringstream out, err;
  EXPECT_EQ(RunTag(*stub_,
                   {.vm_id = "vm-1", .tenant_id = "strict", .isolation = "none"},
                   options_, out, err),
            kExitRpcError);
  EXPECT_EQ(err.str(),
            "csctl: tenant 'strict' does not allow isolation 'none'\n");
}

TEST_F(CommandsTest, GetMissingVmSaysNotFound) {
  EXPECT_EQ(RunGet(*stub_, "vm-nope", options_, out_, err_), kExitRpcError);
  EXPECT_EQ(err_.str(), "csctl: vm 'vm-nope' not found\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CommandsTest, UntagRemovesTheVm) {
  Tag("vm-1");
  ASSERT_EQ(RunUntag(*stub_, "vm-1", Json(), out_, err_), kExitOk);
  json removed = json::parse(out_.str());
  EXPECT_EQ(removed["vm_id"], "vm-1");
  EXPECT_EQ(removed["revision"], 2);
  std::ostringstream out, err;
  EXPECT_EQ(RunUntag(*stub_, "vm-1", options_, out, err), kExitRpcError);
  EXPECT_EQ(err.str(), "csctl: vm 'vm-1' not found\n");
}

TEST_F(CommandsTest, ListFollowsPages) {
  for (const char* id : {"vm-1", "vm-2", "vm-3", "vm-4", "vm-5"}) Tag(id);
  ASSERT_EQ(RunList(*stub_, {}, Json(), out_, err_), kExitOk) << err_.str();
  json vms = json::parse(out_.str());
  ASSERT_TRUE(vms.is_array());
  ASSERT_EQ(vms.size(), 5u);
  EXPECT_EQ(vms[4]["vm_id"], "vm-5");
  EXPECT_EQ(server_.service().list_requests().size(), 3u);
}

TEST_F(CommandsTest, ListStopsAtLimitAndAsksOnlyForWhatItNeeds) {
  for (const char* id : {"vm-1", "vm-2", "vm-3", "vm-4", "vm-5"}) Tag(id);
  ASSERT_EQ(RunList(*stub_, {.limit = 3}, Json(), out_, err_), kExitOk);
  EXPECT_EQ(json::parse(out_.str()).size(), 3u);
  const std::vector<v1::ListVMsRequest> requests =
      server_.service().list_requests();
  ASSERT_FALSE(requests.empty());
  for (const v1::ListVMsRequest& r : requests) {
    EXPECT_GT(r.page_size(), 0);
    EXPECT_LE(r.page_size(), 3);
  }
}

TEST_F(CommandsTest, ListFiltersAndPrintsAlignedTable) {
  Tag("vm-1", "acme");
  Tag("a-much-longer-vm-name", "acme");
  Tag("vm-3", "other");
  ASSERT_EQ(RunList(*stub_, {.tenant_id = "acme"}, options_, out_, err_),
            kExitOk);
  std::istringstream lines(out_.str());
  std::string header, row1, row2, extra;
  std::getline(lines, header);
  std::getline(lines, row1);
  std::getline(lines, row2);
  EXPECT_FALSE(std::getline(lines, extra));
  EXPECT_THAT(header, StartsWith("VM "));
  const size_t tenant_column = header.find("TENANT");
  EXPECT_EQ(row1.find("acme"), tenant_column) << out_.str();
  EXPECT_EQ(row2.find("acme"), tenant_column) << out_.str();
  EXPECT_EQ(server_.service().list_requests()[0].tenant_id(), "acme");
}

// ls --name: the VMs hosts run under a domain name (tagged under their
// UUIDs), asked for alone.
TEST_F(CommandsTest, ListByDomainNameAsksForItAloneAndRefusesOtherFilters) {
  ASSERT_EQ(RunList(*stub_, {.domain_name = "instance-00000001"}, Json(), out_, err_), kExitOk)
      << err_.str();
  ASSERT_EQ(server_.service().list_requests().size(), 1u);
  EXPECT_EQ(server_.service().list_requests()[0].domain_name(), "instance-00000001");
  EXPECT_EQ(server_.service().list_requests()[0].tenant_id(), "");
  std::ostringstream out, err;
  EXPECT_EQ(RunList(*stub_, {.tenant_id = "acme", .domain_name = "instance-00000001"}, Json(),
                    out, err),
            kExitUsage);
  EXPECT_THAT(err.str(), HasSubstr("--name is a filter of its own"));
  EXPECT_EQ(server_.service().list_requests().size(), 1u) << "a refused ls made an RPC";
}

TEST_F(CommandsTest, ListOfNothing) {
  ASSERT_EQ(RunList(*stub_, {}, options_, out_, err_), kExitOk);
  EXPECT_EQ(out_.str(), "no VMs found\n");
  std::ostringstream out, err;
  ASSERT_EQ(RunList(*stub_, {}, Json(), out, err), kExitOk);
  EXPECT_EQ(json::parse(out.str()), json::array());
}

TEST_F(CommandsTest, PolicySetGetAndList) {
  ASSERT_EQ(RunPolicySet(*stub_,
                         {.tenant_id = "acme",
                          .default_isolation = "tenant",
                          .allowed_isolation = {"tenant", "dedicated"}},
                         options_, out_, err_),
            kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("allowed isolation: tenant,dedicated\n"));

  std::ostringstream got, err;
  ASSERT_EQ(RunPolicyGet(*stub_, "acme", Json(), got, err), kExitOk);
  json policy = json::parse(got.str());
  EXPECT_EQ(policy["tenant_id"], "acme");
  EXPECT_EQ(policy["default_isolation"], "tenant");
  EXPECT_EQ(policy["allowed_isolation"], json({"tenant", "dedicated"}));
  EXPECT_EQ(policy["explicitly_set"], true);
  EXPECT_TRUE(policy["revision"].is_number_integer());

  std::ostringstream builtin;
  ASSERT_EQ(RunPolicyGet(*stub_, "fresh", Json(), builtin, err), kExitOk);
  EXPECT_EQ(json::parse(builtin.str())["explicitly_set"], false);

  ASSERT_EQ(RunPolicySet(*stub_, {.tenant_id = "beta", .default_isolation = "vm"},
                         options_, got, err),
            kExitOk);
  std::ostringstream listed;
  ASSERT_EQ(RunPolicyList(*stub_, Json(), listed, err), kExitOk);
  json policies = json::parse(listed.str());
  ASSERT_EQ(policies.size(), 2u);  // two pages of one
  EXPECT_EQ(policies[1]["tenant_id"], "beta");
  EXPECT_EQ(policies[1]["allowed_isolation"], json::array());
}

TEST_F(CommandsTest, PolicySetSendsModeAndApply) {
  ASSERT_EQ(RunPolicySet(*stub_,
                         {.tenant_id = "acme",
                          .default_isolation = "vm",
                          .allowed_isolation = {"vm", "tenant", "dedicated"},
                          .forced_idle_budget_pct = 5,
                          .mode = "auto",
                          .no_apply = true},
                         options_, out_, err_),
            kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), ::testing::ContainsRegex("mode: +auto, dry run"));
  std::ostringstream got, err;
  ASSERT_EQ(RunPolicyGet(*stub_, "acme", Json(), got, err), kExitOk);
  json policy = json::parse(got.str());
  EXPECT_EQ(policy["mode"], "auto");
  EXPECT_EQ(policy["apply"], false);
  std::ostringstream fresh;
  ASSERT_EQ(RunPolicyGet(*stub_, "fresh", Json(), fresh, err), kExitOk);
  EXPECT_EQ(json::parse(fresh.str())["mode"], "fixed");
  EXPECT_EQ(json::parse(fresh.str())["apply"], true);
}

TEST_F(CommandsTest, PolicySetRefusesAnUnknownModeAndNoApplyWithoutAutoLocally) {
  EXPECT_EQ(RunPolicySet(*stub_, {.tenant_id = "acme", .default_isolation = "vm", .mode = "yolo"},
                         options_, out_, err_),
            kExitUsage);
  EXPECT_EQ(err_.str(), "csctl: --mode 'yolo' must be fixed or auto\n");
  std::ostringstream err;
  EXPECT_EQ(RunPolicySet(*stub_, {.tenant_id = "acme", .default_isolation = "vm", .no_apply = true},
                         options_, out_, err),
            kExitUsage);
  EXPECT_THAT(err.str(), HasSubstr("--no-apply needs --mode auto"));
  EXPECT_EQ(server_.service().calls(), 0);
}

TEST_F(CommandsTest, PlanNeedsDryRunOrReportAndAValidTenant) {
  EXPECT_EQ(RunPlan(*stub_, {}, options_, out_, err_), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("plan needs one of --dry-run"));
  std::ostringstream both;
  EXPECT_EQ(RunPlan(*stub_, {.dry_run = true, .report = true}, options_, out_, both), kExitUsage);
  EXPECT_THAT(both.str(), HasSubstr("--report"));
  std::ostringstream err;
  EXPECT_EQ(RunPlan(*stub_, {.dry_run = true, .tenant_id = "bad tenant!"}, options_, out_, err),
            kExitUsage);
  EXPECT_THAT(err.str(), HasSubstr("--tenant"));
  std::ostringstream report_err;
  EXPECT_EQ(RunPlan(*stub_, {.report = true, .tenant_id = "bad tenant!"}, options_, out_,
                    report_err),
            kExitUsage);
  EXPECT_THAT(report_err.str(), HasSubstr("--tenant"));
  EXPECT_EQ(server_.service().calls(), 0);
}

TEST_F(CommandsTest, PolicySetRejectsUnknownLevelsLocally) {
  EXPECT_EQ(RunPolicySet(*stub_,
                         {.tenant_id = "acme",
                          .default_isolation = "vm",
                          .allowed_isolation = {"vm", "paranoid"}},
                         options_, out_, err_),
            kExitUsage);
  EXPECT_EQ(err_.str(),
            "csctl: --allow 'paranoid' must be one of vm, tenant, none, "
            "dedicated\n");
  EXPECT_EQ(server_.service().calls(), 0);
}

TEST_F(CommandsTest, HostsListAndGet) {
  v1::Host host;
  host.set_host_id("kvm-01");
  host.set_connected(true);
  host.set_vm_count(3);
  host.mutable_capabilities()->set_core_sched(
      v1::CORE_SCHED_SUPPORT_SUPPORTED);
  v1::Core* core = host.mutable_topology()->add_cores();
  core->add_cpus(0);
  core->add_cpus(8);
  server_.service().PutHost(host);

  ASSERT_EQ(RunHostList(*stub_, Json(), out_, err_), kExitOk);
  json hosts = json::parse(out_.str());
  ASSERT_EQ(hosts.size(), 1u);
  EXPECT_EQ(hosts[0]["host_id"], "kvm-01");
  EXPECT_EQ(hosts[0]["capabilities"]["core_sched"], "supported");
  EXPECT_EQ(hosts[0]["topology"]["cores"][0]["cpus"], json({0, 8}));

  std::ostringstream out, err;
  ASSERT_EQ(RunHostGet(*stub_, "kvm-01", options_, out, err), kExitOk);
  EXPECT_THAT(out.str(), HasSubstr("core scheduling:  supported\n"));
  EXPECT_THAT(out.str(), HasSubstr("cpus:             2\n"));

  std::ostringstream missing;
  EXPECT_EQ(RunHostGet(*stub_, "kvm-99", options_, out, missing),
            kExitRpcError);
  EXPECT_EQ(missing.str(), "csctl: host 'kvm-99' not found\n");
}

TEST_F(CommandsTest, UnreachableServerNamesTheAddress) {
  const std::string address = testing::UnusedLoopbackAddress();
  auto stub = v1::ControlPlane::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  EXPECT_EQ(RunGet(*stub, "vm-1", {.server = address}, out_, err_),
            kExitRpcError);
  EXPECT_THAT(err_.str(),
              StartsWith("csctl: cannot reach csd at " + address + ": "));
  EXPECT_EQ(Lines(err_.str()), 1) << err_.str();
}

TEST_F(CommandsTest, SlowServerHitsTheDeadline) {
  CommandOptions options = options_;
  options.timeout = std::chrono::milliseconds(50);
  EXPECT_EQ(RunHostGet(*stub_, "slow", options, out_, err_), kExitRpcError);
  EXPECT_THAT(err_.str(), StartsWith("csctl: csd at " + server_.address() +
                                     " did not answer within 0.05s"));
  EXPECT_EQ(Lines(err_.str()), 1) << err_.str();
}

}  // namespace
}  // namespace cosched::cli
