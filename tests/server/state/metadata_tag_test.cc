// Tagging from libvirt domain metadata (csd.yaml tag_from_metadata):
// MetadataTagOf's rules, and Reports applying them.
#include "server/state/metadata_tag.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/state/vm_presence.h"
#include "tests/server/state_testing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

using ::testing::HasSubstr;
using testing::Wait;

constexpr char kProject[] = "8a3b7c6d5e4f4a3b9c2d1e0f9a8b7c6d";
constexpr char kOtherProject[] = "11112222333344445555666677778888";
const Actor kTester{"spiffe://test/tester", "admin"};

v1::DomainMetadata Nova(const std::string& project) {
  v1::DomainMetadata m;
  m.mutable_nova()->set_version("1.1");
  m.mutable_nova()->set_project_uuid(project);
  m.mutable_nova()->set_project_name("acme");
  m.mutable_nova()->set_flavor_name("m1.small");
  return m;
}

v1::DomainMetadata Cosched(const std::string& tenant, const std::string& isolation,
                           std::vector<std::string> classes = {}) {
  v1::DomainMetadata m;
  m.mutable_cosched()->set_tenant(tenant);
  m.mutable_cosched()->set_isolation(isolation);
  for (const std::string& c : classes) m.mutable_cosched()->add_interference_classes(c);
  return m;
}

TEST(MetadataTagOf, NovasProjectUuidIsTheTenant) {
  auto tag = MetadataTagOf(Nova(kProject));
  ASSERT_OK(tag);
  ASSERT_TRUE(tag->has_value());
  EXPECT_EQ((*tag)->tenant_id, kProject);
  EXPECT_EQ((*tag)->isolation, v1::ISOLATION_LEVEL_UNSPECIFIED);
  EXPECT_TRUE((*tag)->interference_classes.empty());
}

TEST(MetadataTagOf, CoschedsTenantWinsOverNovasAndGivesLevelAndClasses) {
  v1::DomainMetadata m = Nova(kProject);
  *m.mutable_cosched() = Cosched("acme", "tenant", {"b", "a", "b"}).cosched();
  auto tag = MetadataTagOf(m);
  ASSERT_OK(tag);
  ASSERT_TRUE(tag->has_value());
  EXPECT_EQ((*tag)->tenant_id, "acme");
  EXPECT_EQ((*tag)->isolation, v1::ISOLATION_LEVEL_TENANT);
  EXPECT_EQ((*tag)->interference_classes, (std::vector<std::string>{"a", "b"}));

  // Nova's project with cosched's level only.
  m.mutable_cosched()->clear_tenant();
  tag = MetadataTagOf(m);
  ASSERT_OK(tag);
  EXPECT_EQ((*tag)->tenant_id, kProject);
  EXPECT_EQ((*tag)->isolation, v1::ISOLATION_LEVEL_TENANT);
}

TEST(MetadataTagOf, NothingToSayIsNoTag) {
  auto tag = MetadataTagOf(v1::DomainMetadata());
  ASSERT_OK(tag);
  EXPECT_FALSE(tag->has_value());
}

TEST(MetadataTagOf, BadMetadataIsRefusedNamingTheField) {
  struct Case {
    v1::DomainMetadata metadata;
    std::string expected;
  };
  v1::DomainMetadata unread;
  unread.set_error("cosched:tenant is given more than once");
  v1::DomainMetadata no_uuid = Nova("");
  std::vector<Case> cases = {
      {Cosched("acme", "gold"), "metadata.cosched.isolation 'gold' must be one of"},
      {Cosched("acme corp", ""), "metadata.cosched.tenant 'acme corp'"},
      {Cosched("acme", "", {"ok", "not ok"}), "metadata.cosched.interference_classes[1]"},
      {Cosched("", "vm"), "metadata.cosched.tenant is required"},
      // Issue #32 item 4: before, metadata could turn a VM's isolation off.
      {Cosched("acme", "none"), "metadata.cosched.isolation 'none' is never taken from metadata"},
      {no_uuid, "metadata.nova.project_uuid is required"},
      {unread, "could not be read by the agent: cosched:tenant is given more than once"},
  };
  for (const Case& c : cases) {
    auto tag = MetadataTagOf(c.metadata);
    EXPECT_EQ(tag.status().code(), absl::StatusCode::kInvalidArgument)
        << c.metadata.ShortDebugString();
    EXPECT_THAT(std::string(tag.status().message()), HasSubstr(c.expected));
  }
}

class TagFromMetadataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(state_, nullptr);
    state_->settings.set_tag_from_metadata(true);
    ASSERT_OK(csd_.RegisterHost("host-a", kTester));
    ASSERT_OK(csd_.RegisterHost("host-b", kTester));
  }

  // A Report of `vms`: name -> metadata (unset: none).
  absl::Status Report(const std::string& host,
                      std::vector<std::pair<std::string, std::optional<v1::DomainMetadata>>> vms) {
    std::vector<Domain> domains;
    for (auto& [id, metadata] : vms) domains.push_back({id, "", std::move(metadata)});
    return ReportDomains(host, domains);
  }

  // A libvirt domain as an agent reports it: its name, UUID and metadata.
  struct Domain {
    std::string name;
    std::string uuid;
    std::optional<v1::DomainMetadata> metadata;
  };
  absl::Status ReportDomains(const std::string& host, const std::vector<Domain>& domains) {
    v1::ReportRequest request;
    request.set_host_id(host);
    for (const Domain& d : domains) {
      auto* o = request.add_vms();
      o->set_vm_id(d.name);
      o->set_uuid(d.uuid);
      if (d.metadata) *o->mutable_metadata() = *d.metadata;
    }
    return Wait<v1::ReportResponse>([&](auto done) {
             state_->reports.ApplyReport(request, std::move(done));
           }).status();
  }

  // The VM ids `host`'s agent is sent assignments for.
  std::vector<std::string> Enforced(const std::string& host) {
    return testing::AssignedVmIds(*state_, host);
  }

  absl::Status Untag(const std::string& vm) {
    v1::UntagVMRequest request;
    request.set_vm_id(vm);
    return Wait<v1::UntagVMResponse>([&](auto done) {
             state_->vms.UntagVm(request, kTester, std::move(done));
           }).status();
  }

  absl::StatusOr<v1::VM> Get(const std::string& vm) {
    v1::GetVMRequest get;
    get.set_vm_id(vm);
    return state_->vms.GetVm(get);
  }

  absl::StatusOr<v1::TagVMResponse> Tag(const std::string& vm, const std::string& tenant,
                                        v1::IsolationLevel level) {
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id(tenant);
    request.set_isolation(level);
    return Wait<v1::TagVMResponse>(
        [&](auto done) { state_->vms.TagVm(request, kTester, std::move(done)); });
  }

  absl::Status SetPolicy(const std::string& tenant, v1::IsolationLevel default_level,
                         std::vector<v1::IsolationLevel> allowed) {
    v1::SetTenantPolicyRequest set;
    set.mutable_policy()->set_tenant_id(tenant);
    set.mutable_policy()->set_default_isolation(default_level);
    for (auto level : allowed) set.mutable_policy()->add_allowed_isolation(level);
    return Wait<v1::TenantPolicy>([&](auto done) {
             state_->policies.SetTenantPolicy(set, kTester, std::move(done));
           }).status();
  }

  std::vector<v1::AuditRecord> AuditOf(const std::string& subject) {
    v1::ListAuditRecordsRequest request;
    request.set_subject(subject);
    request.set_page_size(1000);
    auto page = state_->audit.ListAuditRecords(request);
    EXPECT_OK(page);
    return {page->records().begin(), page->records().end()};
  }

  cosched::testing::TempDir dir_;
  testing::SqliteTestState csd_{dir_.Sub("data")};
  TestState* state_ = csd_.state();
};

TEST_F(TagFromMetadataTest, NovasProjectTagsTheVmAndTheAuditSaysFromMetadataOnTheHost) {
  ASSERT_OK(Report("host-a", {{"instance-1", Nova(kProject)}}));
  auto vm = Get("instance-1");
  ASSERT_OK(vm);
  EXPECT_EQ(vm->tenant_id(), kProject);
  EXPECT_EQ(vm->metadata_host(), "host-a");
  EXPECT_EQ(vm->host_id(), "host-a");
  EXPECT_EQ(vm->assignment().isolation(), v1::ISOLATION_LEVEL_VM);  // the default policy's
  EXPECT_EQ(vm->assignment().trust_group(), absl::StrCat(kProject, "/vm/instance-1"));
  EXPECT_EQ(vm->decision().decided_by(), v1::DECIDED_BY_OPERATOR);
  EXPECT_THAT(absl::StrJoin(vm->decision().reasons(), " "),
              HasSubstr("from metadata on host host-a"));

  auto records = AuditOf("instance-1");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].method(), "TagVM");
  EXPECT_EQ(records[0].who(), "host-a");
  EXPECT_EQ(records[0].role(), "host");
  EXPECT_EQ(records[0].reason(), "from metadata on host host-a");
  EXPECT_EQ(records[0].revision(), vm->assignment().revision());

  // The same metadata again writes nothing.
  ASSERT_OK(Report("host-a", {{"instance-1", Nova(kProject)}, {"instance-x", std::nullopt}}));
  EXPECT_EQ(AuditOf("instance-1").size(), 1u);
  EXPECT_EQ(Get("instance-1")->assignment().revision(), vm->assignment().revision());
  // A VM without metadata stays untagged.
  EXPECT_EQ(Get("instance-x").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TagFromMetadataTest, OneProjectAtLevelTenantSharesAGroupAndAnotherProjectDoesNot) {
  ASSERT_OK(SetPolicy(kProject, v1::ISOLATION_LEVEL_TENANT,
                      {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_TENANT}));
  ASSERT_OK(Report("host-a", {{"instance-1", Nova(kProject)},
                              {"instance-2", Nova(kProject)},
                              {"instance-3", Nova(kOtherProject)}}));
  auto one = Get("instance-1"), two = Get("instance-2"), three = Get("instance-3");
  ASSERT_OK(one);
  ASSERT_OK(two);
  ASSERT_OK(three);
  EXPECT_EQ(one->assignment().trust_group(), absl::StrCat(kProject, "/tenant"));
  EXPECT_EQ(two->assignment().trust_group(), one->assignment().trust_group());
  EXPECT_EQ(three->assignment().trust_group(), absl::StrCat(kOtherProject, "/vm/instance-3"));
}

TEST_F(TagFromMetadataTest, CoschedMetadataGivesTheLevelAndClasses) {
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "tenant", {"avx512"})}}));
  auto vm = Get("vm-1");
  ASSERT_OK(vm);
  EXPECT_EQ(vm->tenant_id(), "acme");
  EXPECT_EQ(vm->requested_isolation(), v1::ISOLATION_LEVEL_TENANT);
  ASSERT_EQ(vm->interference_classes_size(), 1);
  EXPECT_EQ(vm->interference_classes(0), "avx512");
  EXPECT_EQ(vm->assignment().isolation(), v1::ISOLATION_LEVEL_TENANT);
}

TEST_F(TagFromMetadataTest, AChangeOfMetadataIsApplied) {
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "vm")}}));
  auto before = Get("vm-1");
  ASSERT_OK(before);
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "tenant")}}));
  auto after = Get("vm-1");
  ASSERT_OK(after);
  EXPECT_EQ(after->assignment().isolation(), v1::ISOLATION_LEVEL_TENANT);
  EXPECT_GT(after->assignment().revision(), before->assignment().revision());
  // Another tenant too: the metadata's, not an operator's, tag changes.
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("globex", "tenant")}}));
  after = Get("vm-1");
  ASSERT_OK(after);
  EXPECT_EQ(after->tenant_id(), "globex");
  EXPECT_EQ(after->assignment().trust_group(), "globex/tenant");
  auto records = AuditOf("vm-1");
  ASSERT_EQ(records.size(), 3u);
  for (const auto& r : records) EXPECT_EQ(r.reason(), "from metadata on host host-a");
}

TEST_F(TagFromMetadataTest, ATagVmWinsOverMetadata) {
  // Tagged first: the metadata never changes it.
  ASSERT_OK(Tag("vm-1", "ops", v1::ISOLATION_LEVEL_VM));
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "tenant")}}));
  auto vm = Get("vm-1");
  ASSERT_OK(vm);
  EXPECT_EQ(vm->tenant_id(), "ops");
  EXPECT_EQ(vm->metadata_host(), "");

  // Tagged from metadata, then by TagVM for another tenant: the operator's
  // tag holds from then on, through any change of metadata.
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "tenant")},
                              {"vm-2", Cosched("acme", "tenant")}}));
  ASSERT_EQ(Get("vm-2")->tenant_id(), "acme");
  auto retag = Tag("vm-2", "ops", v1::ISOLATION_LEVEL_VM);
  ASSERT_OK(retag);
  EXPECT_EQ(retag->vm().metadata_host(), "");
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "vm")},
                              {"vm-2", Cosched("globex", "vm")}}));
  EXPECT_EQ(Get("vm-2")->tenant_id(), "ops");
  EXPECT_EQ(Get("vm-2")->assignment().trust_group(), "ops/vm/vm-2");
  // And an operator-tagged VM cannot be moved to another tenant by TagVM
  // without an untag, as before.
  EXPECT_EQ(Tag("vm-2", "acme", v1::ISOLATION_LEVEL_VM).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(TagFromMetadataTest, BadMetadataLeavesTheVmUntaggedAndGetSaysWhy) {
  v1::DomainMetadata unread;
  unread.set_error("metadata is over 65536 bytes");
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "gold")},
                              {"vm-2", unread},
                              {"vm-3", Cosched("acme corp", "vm")}}));
  auto one = Get("vm-1");
  EXPECT_EQ(one.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(one.status().message()),
              HasSubstr("host host-a reports it with domain metadata that is refused: "
                        "metadata.cosched.isolation 'gold' must be one of"));
  EXPECT_THAT(std::string(Get("vm-2").status().message()),
              HasSubstr("could not be read by the agent: metadata is over 65536 bytes"));
  EXPECT_THAT(std::string(Get("vm-3").status().message()),
              HasSubstr("metadata.cosched.tenant 'acme corp'"));
  EXPECT_TRUE(AuditOf("vm-1").empty());
}

TEST_F(TagFromMetadataTest, ALevelTheTenantsPolicyForbidsIsRefused) {
  ASSERT_OK(SetPolicy("bank", v1::ISOLATION_LEVEL_VM, {v1::ISOLATION_LEVEL_VM}));
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("bank", "none")}}));
  auto vm = Get("vm-1");
  EXPECT_EQ(vm.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(vm.status().message()), HasSubstr("refused"));
  EXPECT_THAT(std::string(vm.status().message()), HasSubstr("none"));
}

TEST_F(TagFromMetadataTest, MetadataThatTurnsBadOrGoesUntagsTheVm) {
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "tenant")},
                              {"vm-2", Nova(kProject)}}));
  ASSERT_OK(Get("vm-1"));
  ASSERT_OK(Get("vm-2"));
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "gold")}, {"vm-2", std::nullopt}}));
  auto one = Get("vm-1");
  EXPECT_EQ(one.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(one.status().message()), HasSubstr("'gold'"));
  EXPECT_EQ(Get("vm-2").status().code(), absl::StatusCode::kNotFound);
  auto records = AuditOf("vm-1");
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].method(), "UntagVM");
  EXPECT_EQ(records[0].who(), "host-a");
  EXPECT_THAT(records[0].reason(), HasSubstr("metadata on host host-a refused: "
                                             "metadata.cosched.isolation 'gold'"));
  EXPECT_EQ(AuditOf("vm-2")[0].reason(), "metadata on host host-a names no tenant any more");

  // Good again: tagged again.
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "tenant")}, {"vm-2", std::nullopt}}));
  EXPECT_OK(Get("vm-1"));
}

// Issue #32 item 8: before, a Report without metadata while libvirtd
// restarted (procfs discovery) untagged every VM tagged from metadata, and
// the next Report tagged them again.
TEST_F(TagFromMetadataTest, MetadataTheAgentCouldNotReadChangesNothing) {
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "tenant")}}));
  ASSERT_OK(Get("vm-1"));
  v1::ReportRequest unknown;
  unknown.set_host_id("host-a");
  v1::VMObservation* o = unknown.add_vms();
  o->set_vm_id("vm-1");
  o->set_metadata_unknown(true);
  // Untagged ones stay untagged too: nothing is tagged from unknown.
  unknown.add_vms()->set_vm_id("vm-2");
  unknown.mutable_vms(1)->set_metadata_unknown(true);
  ASSERT_OK(Wait<v1::ReportResponse>([&](auto done) {
              state_->reports.ApplyReport(unknown, std::move(done));
            }).status());
  auto vm = Get("vm-1");
  ASSERT_OK(vm);
  EXPECT_EQ(vm->tenant_id(), "acme");
  EXPECT_EQ(vm->assignment().isolation(), v1::ISOLATION_LEVEL_TENANT);
  EXPECT_EQ(Get("vm-2").status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(AuditOf("vm-1").size(), 1u);
  // Metadata positively gone (read, and naming no tenant) still untags.
  ASSERT_OK(Report("host-a", {{"vm-1", std::nullopt}}));
  EXPECT_EQ(Get("vm-1").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TagFromMetadataTest, OnlyTheOwnerHostsMetadataCounts) {
  ASSERT_OK(Report("host-a", {{"vm-1", Cosched("acme", "tenant")}}));
  // A second host reports the VM (a migration target) with the same
  // metadata: host-a still owns it, and both are sent its assignment.
  ASSERT_OK(Report("host-b", {{"vm-1", Cosched("acme", "tenant")}}));
  auto vm = Get("vm-1");
  ASSERT_OK(vm);
  EXPECT_EQ(vm->host_id(), "host-a");
  EXPECT_EQ(vm->tenant_id(), "acme");
  EXPECT_EQ(vm->conflict(), "");
  EXPECT_TRUE(ReceivesAssignment(*vm, "host-a") && ReceivesAssignment(*vm, "host-b"));
  // A host's metadata tags only the VMs that host reports: host-b's report
  // of vm-1 does not tag vm-9, which nobody reports.
  EXPECT_EQ(Get("vm-9").status().code(), absl::StatusCode::kNotFound);
}

// Issue #32 item 4: before, the first host to report a VM decided its tenant
// (host-a's {mallory} here), and host-b's real VM of project acme was sent
// mallory's assignment. Now metadata two hosts disagree on is a conflict:
// no host gets the VM's assignment (each copy fails closed), nobody's
// metadata retags it, `csctl get` says who said what; it ends when one host
// stops reporting the VM, or when an operator tags it.
TEST_F(TagFromMetadataTest, MetadataTwoHostsDisagreeOnIsAConflictUntilOneSideGoes) {
  ASSERT_OK(Report("host-a", {{"inst-1", Cosched("mallory", "vm")}}));
  ASSERT_OK(Report("host-b", {{"inst-1", Nova(kProject)}}));
  auto vm = Get("inst-1");
  ASSERT_OK(vm);
  EXPECT_THAT(vm->conflict(), HasSubstr("hosts disagree on the domain metadata of 'inst-1'"));
  EXPECT_THAT(vm->conflict(), HasSubstr("host 'host-a' tenant 'mallory' at level vm"));
  EXPECT_THAT(vm->conflict(), HasSubstr(absl::StrCat("host 'host-b' tenant '", kProject, "'")));
  EXPECT_FALSE(ReceivesAssignment(*vm, "host-a"));
  EXPECT_FALSE(ReceivesAssignment(*vm, "host-b"));
  // The owner's metadata changing does not retag it while the conflict lasts.
  ASSERT_OK(Report("host-a", {{"inst-1", Cosched("mallory", "tenant")}}));
  vm = Get("inst-1");
  EXPECT_EQ(vm->requested_isolation(), v1::ISOLATION_LEVEL_VM);
  EXPECT_NE(vm->conflict(), "");

  // host-a stops reporting it: host-b's VM is the only one, and its
  // metadata is taken at its next Report.
  ASSERT_OK(Report("host-a", {}));
  ASSERT_OK(Report("host-b", {{"inst-1", Nova(kProject)}}));
  vm = Get("inst-1");
  ASSERT_OK(vm);
  EXPECT_EQ(vm->conflict(), "");
  EXPECT_EQ(vm->host_id(), "host-b");
  EXPECT_EQ(vm->tenant_id(), kProject);
  EXPECT_TRUE(ReceivesAssignment(*vm, "host-b"));
}

TEST_F(TagFromMetadataTest, AnOperatorsTagEndsAMetadataConflict) {
  ASSERT_OK(Report("host-a", {{"inst-2", Cosched("mallory", "vm")}}));
  ASSERT_OK(Report("host-b", {{"inst-2", Cosched("acme", "vm")}}));
  ASSERT_NE(Get("inst-2")->conflict(), "");
  ASSERT_OK(Tag("inst-2", "acme", v1::ISOLATION_LEVEL_VM));
  // The operator's tag wins over metadata; the conflict is gone once a
  // host that runs it reports again.
  ASSERT_OK(Report("host-b", {{"inst-2", Cosched("acme", "vm")}}));
  auto vm = Get("inst-2");
  ASSERT_OK(vm);
  EXPECT_EQ(vm->conflict(), "");
  EXPECT_EQ(vm->tenant_id(), "acme");
  EXPECT_TRUE(ReceivesAssignment(*vm, "host-a") && ReceivesAssignment(*vm, "host-b"));
}

// Issue #37 item 5. Nova names a domain instance-%08x of its cell's
// database id, so two cells run two instance-00000001. Before, both were one
// VM tagged under that name, reported under two UUIDs: a conflict, and
// neither was enforced. Now metadata tags each under its UUID.
TEST_F(TagFromMetadataTest, OneDomainNameInTwoNovaCellsIsTwoVmsTaggedByUuid) {
  const std::string name = "instance-00000001";
  const std::string u1 = "5a0c2e1e-1111-4c3b-9d2e-0a1b2c3d4e5f";
  const std::string u2 = "9f8e7d6c-2222-4b5a-8c9d-f0e1d2c3b4a5";
  ASSERT_OK(ReportDomains("host-a", {{name, u1, Nova(kProject)}}));
  ASSERT_OK(ReportDomains("host-b", {{name, u2, Nova(kOtherProject)}}));
  auto one = Get(u1), two = Get(u2);
  ASSERT_OK(one);
  ASSERT_OK(two);
  EXPECT_EQ(one->tenant_id(), kProject);
  EXPECT_EQ(two->tenant_id(), kOtherProject);
  for (const auto& [vm, host] : {std::pair{*one, "host-a"}, std::pair{*two, "host-b"}}) {
    SCOPED_TRACE(vm.vm_id());
    EXPECT_EQ(vm.conflict(), "");
    EXPECT_EQ(vm.host_id(), host);
    EXPECT_EQ(vm.domain_name(), name);
    EXPECT_EQ(vm.metadata_host(), host);
    EXPECT_EQ(vm.assignment().trust_group(),
              absl::StrCat(vm.tenant_id(), "/vm/", vm.vm_id()));
    ASSERT_EQ(vm.presence_size(), 1);
    EXPECT_EQ(vm.presence(0).host_id(), host);
  }
  // Each host's agent is sent its own VM only; it finds it by UUID.
  EXPECT_EQ(Enforced("host-a"), std::vector<std::string>{u1});
  EXPECT_EQ(Enforced("host-b"), std::vector<std::string>{u2});
  EXPECT_EQ(AuditOf(u1).size(), 1u);
  EXPECT_EQ(AuditOf(name).size(), 0u);

  // The name finds a VM while one host runs it; two, and csd asks for the
  // UUID. A write (untag) names its VM exactly, and says which to name.
  auto ambiguous = Get(name);
  EXPECT_EQ(ambiguous.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ambiguous.status().message()),
              HasSubstr(absl::StrCat("vm_id '", name, "' is the domain name of 2 tagged VMs: '",
                                     u1, "' (host 'host-a'), '", u2, "' (host 'host-b')")));
  // ls --name finds both, with their names.
  v1::ListVMsRequest list;
  list.set_domain_name(name);
  auto listed = state_->vms.ListVms(list);
  ASSERT_OK(listed);
  ASSERT_EQ(listed->vms_size(), 2);
  EXPECT_EQ(listed->vms(0).vm_id(), u1);
  EXPECT_EQ(listed->vms(1).vm_id(), u2);
  list.set_tenant_id(kProject);
  EXPECT_EQ(state_->vms.ListVms(list).status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status untag = Untag(name);
  EXPECT_EQ(untag.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(untag.message()), HasSubstr(u1));
  ASSERT_OK(ReportDomains("host-b", {}));
  auto by_name = Get(name);
  ASSERT_OK(by_name);
  EXPECT_EQ(by_name->vm_id(), u1);

  // The same Report again writes nothing.
  const int64_t revision = csd_.store()->CurrentRevision();
  ASSERT_OK(ReportDomains("host-a", {{name, u1, Nova(kProject)}}));
  EXPECT_EQ(csd_.store()->CurrentRevision(), revision);
}

// A control plane that tags Nova instances by UUID (the Python example)
// tags the very record metadata made: its tag wins, as a TagVM does.
TEST_F(TagFromMetadataTest, AControlPlanesTagByUuidIsTheSameVmAndWins) {
  const std::string name = "instance-0000002a";
  const std::string u = "0d9c8b7a-3333-4e5f-a6b7-c8d9e0f1a2b3";
  ASSERT_OK(ReportDomains("host-a", {{name, u, Nova(kProject)}}));
  ASSERT_EQ(Get(u)->metadata_host(), "host-a");
  auto tagged = Tag(u, kProject, v1::ISOLATION_LEVEL_TENANT);
  ASSERT_OK(tagged);
  EXPECT_EQ(tagged->vm().metadata_host(), "");
  EXPECT_EQ(tagged->vm().domain_name(), name);
  ASSERT_OK(ReportDomains("host-a", {{name, u, Cosched("globex", "vm")}}));
  auto vm = Get(name);
  ASSERT_OK(vm);
  EXPECT_EQ(vm->vm_id(), u);
  EXPECT_EQ(vm->tenant_id(), kProject);
  EXPECT_EQ(vm->assignment().trust_group(), absl::StrCat(kProject, "/tenant"));
  EXPECT_EQ(Enforced("host-a"), std::vector<std::string>{u});
  EXPECT_EQ(Get("instance-unknown").status().code(), absl::StatusCode::kNotFound);
}

// A VM metadata tagged under its name (an agent that reported no UUID, or
// csd before it tagged by UUID) keeps its record; another cell's domain of
// that name is another VM, tagged under its own UUID, and no conflict.
TEST_F(TagFromMetadataTest, AVmTaggedUnderItsNameKeepsItAndANamesakeElsewhereIsAnother) {
  const std::string name = "instance-00000003";
  const std::string u1 = "1a2b3c4d-4444-4f00-8000-000000000001";
  const std::string u2 = "1a2b3c4d-5555-4f00-8000-000000000002";
  ASSERT_OK(ReportDomains("host-a", {{name, "", Nova(kProject)}}));
  ASSERT_OK(Get(name));
  ASSERT_OK(ReportDomains("host-a", {{name, u1, Nova(kProject)}}));
  ASSERT_OK(ReportDomains("host-b", {{name, u2, Nova(kOtherProject)}}));
  auto old = Get(name);
  ASSERT_OK(old);
  EXPECT_EQ(old->vm_id(), name);
  EXPECT_EQ(old->tenant_id(), kProject);
  EXPECT_EQ(old->conflict(), "");
  ASSERT_EQ(old->presence_size(), 1);
  EXPECT_EQ(old->presence(0).host_id(), "host-a");
  auto other = Get(u2);
  ASSERT_OK(other);
  EXPECT_EQ(other->tenant_id(), kOtherProject);
  EXPECT_EQ(other->conflict(), "");
  EXPECT_EQ(Enforced("host-a"), std::vector<std::string>{name});
  EXPECT_EQ(Enforced("host-b"), std::vector<std::string>{u2});
}

// An operator who tags a name that two cells run has named two VMs: that
// stays a conflict, each copy on a cookie of its own, as before.
TEST_F(TagFromMetadataTest, AnOperatorsTagOfANameTwoCellsRunIsAConflict) {
  const std::string name = "instance-00000004";
  ASSERT_OK(Tag(name, "ops", v1::ISOLATION_LEVEL_VM));
  ASSERT_OK(ReportDomains("host-a", {{name, "2b3c4d5e-6666-4000-8000-000000000001",
                                      Nova(kProject)}}));
  ASSERT_OK(ReportDomains("host-b", {{name, "2b3c4d5e-7777-4000-8000-000000000002",
                                      Nova(kProject)}}));
  auto vm = Get(name);
  ASSERT_OK(vm);
  EXPECT_THAT(vm->conflict(), HasSubstr("two VMs under one name"));
  EXPECT_TRUE(Enforced("host-a").empty());
  EXPECT_TRUE(Enforced("host-b").empty());
}

// A tenant that never had a policy allows every level but none: turning
// isolation off is a grant an operator makes (issue #32 item 4).
TEST_F(TagFromMetadataTest, ATenantWithoutAPolicyDoesNotAllowNone) {
  absl::StatusOr<v1::TagVMResponse> refused = Tag("vm-5", "nopolicy", v1::ISOLATION_LEVEL_NONE);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the tenant has no policy, and none must be granted"));
  ASSERT_OK(SetPolicy("granted", v1::ISOLATION_LEVEL_VM,
                      {v1::ISOLATION_LEVEL_VM, v1::ISOLATION_LEVEL_NONE}));
  EXPECT_OK(Tag("vm-6", "granted", v1::ISOLATION_LEVEL_NONE));
}

TEST(TagFromMetadataOff, ReportedMetadataTagsNothingAndGetSaysItIsOff) {
  cosched::testing::TempDir dir;
  testing::SqliteTestState csd(dir.Sub("data"));
  ASSERT_NE(csd.state(), nullptr);
  TestState& state = *csd.state();
  ASSERT_OK(csd.RegisterHost("host-a", kTester));
  v1::ReportRequest report;
  report.set_host_id("host-a");
  auto* o = report.add_vms();
  o->set_vm_id("instance-1");
  *o->mutable_metadata() = Nova(kProject);
  ASSERT_OK(Wait<v1::ReportResponse>(
      [&](auto done) { state.reports.ApplyReport(report, std::move(done)); }));
  v1::GetVMRequest get;
  get.set_vm_id("instance-1");
  auto vm = state.vms.GetVm(get);
  EXPECT_EQ(vm.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(vm.status().message()),
              HasSubstr(absl::StrCat("domain metadata for tenant '", kProject,
                                     "', but csd's tag_from_metadata is off")));
}

}  // namespace
}  // namespace cosched::server
