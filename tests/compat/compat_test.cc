// The compatibility promise (docs/compatibility.md), tested against every
// release kept in tests/compat/fixtures/: the current proto keeps each
// release's rules, and the current code opens each release's csd store (on
// SQLite, and an etcd backup restored), and its agent's state dir.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "agent/assignment_cache.h"
#include "agent/host_enablement.h"
#include "cosched/store/etcd_records.pb.h"
#include "cosched/store/store_backup.pb.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/config.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "cosched/v1/replica.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "host/state_fs.h"
#include "store/store_tools.h"
#include "tests/compat/compat_support.h"
#include "tests/compat/fixture_contents.h"
#include "tests/compat/proto_compat.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::compat {
namespace {

namespace fs = std::filesystem;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptorSet;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Every release kept, oldest first.
std::vector<fs::path> Releases() {
  std::vector<fs::path> releases;
  for (const auto& entry : fs::directory_iterator(COSCHED_COMPAT_FIXTURES)) {
    if (entry.is_directory()) releases.push_back(entry.path());
  }
  std::sort(releases.begin(), releases.end());
  return releases;
}

FileDescriptorSet ReadDescriptors(const fs::path& release) {
  FileDescriptorSet set;
  std::ifstream in(release / kProtoDescriptors, std::ios::binary);
  EXPECT_TRUE(set.ParseFromIstream(&in)) << release / kProtoDescriptors;
  return set;
}

// The generated pool holds a file once its code is linked in: name one
// message of each.
void LinkEveryProto() {
  for (const auto* d : {v1::VM::descriptor(), v1::TagVMRequest::descriptor(),
                        v1::RegisterRequest::descriptor(), v1::CsdConfig::descriptor(),
                        v1::ForwardStatsRequest::descriptor(), store::StoreBackupHeader::descriptor(),
                        store::EtcdMeta::descriptor()}) {
    ASSERT_NE(d, nullptr);
  }
}

TEST(ProtoCompat, TheCurrentProtoKeepsEveryReleasesRules) {
  LinkEveryProto();
  ASSERT_THAT(Releases(), ::testing::Not(IsEmpty()));
  for (const fs::path& release : Releases()) {
    SCOPED_TRACE(release.filename().string());
    const FileDescriptorSet set = ReadDescriptors(release);
    DescriptorPool pool;
    ASSERT_OK(BuildPool(set, pool));
    EXPECT_THAT(ProtoIncompatibilities(pool, *DescriptorPool::generated_pool(), set, "cosched."),
                IsEmpty());
  }
}

// The check itself finds each broken rule: a release's descriptors against
// edited copies of themselves.
TEST(ProtoCompat, EachBrokenRuleIsNamed) {
  const FileDescriptorSet release = ReadDescriptors(Releases().back());
  DescriptorPool release_pool;
  ASSERT_OK(BuildPool(release, release_pool));
  auto check = [&](auto edit) {
    FileDescriptorSet edited = release;
    for (auto& file : *edited.mutable_file()) {
      if (file.name() == "cosched/v1/types.proto" || file.name() == "cosched/v1/control_plane.proto") {
        edit(file);
      }
    }
    DescriptorPool pool;
    EXPECT_OK(BuildPool(edited, pool));
    return ProtoIncompatibilities(release_pool, pool, release, "cosched.");
  };
  auto message = [](google::protobuf::FileDescriptorProto& file, const std::string& name)
      -> google::protobuf::DescriptorProto* {
    for (auto& m : *file.mutable_message_type()) {
      if (m.name() == name) return &m;
    }
    return nullptr;
  };
  auto field = [](google::protobuf::DescriptorProto* m, const std::string& name)
      -> google::protobuf::FieldDescriptorProto* {
    for (auto& f : *m->mutable_field()) {
      if (f.name() == name) return &f;
    }
    return nullptr;
  };

  EXPECT_THAT(check([](auto&) {}), IsEmpty());
  // Renumbered: the old number is gone, unreserved.
  EXPECT_THAT(check([&](auto& file) {
                if (auto* m = message(file, "TagVMRequest")) field(m, "tenant_id")->set_number(99);
              }),
              ElementsAre("cosched.v1.TagVMRequest.tenant_id = 2: removed without reserving its number"));
  // Removed, its number reserved: allowed; a later field taking it: not.
  EXPECT_THAT(check([&](auto& file) {
                if (auto* m = message(file, "TagVMRequest")) {
                  m->mutable_field()->erase(m->mutable_field()->begin() + 1);
                  auto* reserved = m->add_reserved_range();
                  reserved->set_start(2);
                  reserved->set_end(3);
                }
              }),
              IsEmpty());
  EXPECT_THAT(check([&](auto& file) {
                if (auto* m = message(file, "TagVMRequest")) field(m, "vm_id")->set_name("id");
              }),
              ElementsAre("cosched.v1.TagVMRequest.vm_id = 1: renamed to id"));
  EXPECT_THAT(check([&](auto& file) {
                if (auto* m = message(file, "TagVMRequest")) {
                  field(m, "vm_id")->set_type(google::protobuf::FieldDescriptorProto::TYPE_BYTES);
                }
              }),
              ElementsAre("cosched.v1.TagVMRequest.vm_id = 1: type changed from string to bytes"));
  // An enum value renamed without keeping the old name.
  EXPECT_THAT(check([&](auto& file) {
                if (auto* m = message(file, "HostEnablement")) {
                  for (auto& e : *m->mutable_enum_type()) {
                    for (auto& v : *e.mutable_value()) {
                      if (v.name() == "STATE_OFF") v.set_name("STATE_SWITCHED_OFF");
                    }
                  }
                }
              }),
              ElementsAre("cosched.v1.HostEnablement.State.STATE_OFF = 4: value removed or renamed "
                          "(keep the old name as an alias)"));
  EXPECT_THAT(check([&](auto& file) {
                for (auto& service : *file.mutable_service()) {
                  if (service.name() != "ControlPlane") continue;
                  for (int i = 0; i < service.method_size(); ++i) {
                    if (service.method(i).name() == "UntagVM") {
                      service.mutable_method()->erase(service.mutable_method()->begin() + i);
                      break;
                    }
                  }
                }
              }),
              ElementsAre("cosched.v1.ControlPlane.UntagVM: method removed"));
}

void ExpectFixtureState(server::CsdServer& csd) {
  auto channel = grpc::CreateChannel(csd.address(), grpc::InsecureChannelCredentials());
  auto control = v1::ControlPlane::NewStub(channel);
  for (const FixtureVm& fixture : kFixtureVms) {
    grpc::ClientContext context;
    v1::GetVMRequest request;
    request.set_vm_id(fixture.vm_id);
    v1::VM vm;
    ASSERT_TRUE(control->GetVM(&context, request, &vm).ok()) << fixture.vm_id;
    EXPECT_EQ(vm.tenant_id(), fixture.tenant_id);
    EXPECT_EQ(vm.assignment().isolation(), fixture.isolation) << fixture.vm_id;
  }
  {
    grpc::ClientContext context;
    v1::GetHostRequest request;
    request.set_host_id(kFixtureHost);
    v1::Host host;
    ASSERT_TRUE(control->GetHost(&context, request, &host).ok());
    EXPECT_EQ(host.labels().at("zone"), kFixtureHostZone);
    EXPECT_EQ(host.topology().cores_size(), 2);
  }
  {
    grpc::ClientContext context;
    v1::GetTenantPolicyRequest request;
    request.set_tenant_id(kFixtureTenant);
    v1::TenantPolicy policy;
    ASSERT_TRUE(control->GetTenantPolicy(&context, request, &policy).ok());
    EXPECT_TRUE(policy.explicitly_set());
    EXPECT_EQ(policy.default_isolation(), v1::ISOLATION_LEVEL_TENANT);
  }
}

TEST(CompatFixtures, CsdOpensEveryReleasesSqliteStore) {
  for (const fs::path& release : Releases()) {
    SCOPED_TRACE(release.filename().string());
    cosched::testing::TempDir dir;
    // A copy: csd writes to its store as it opens it.
    const std::string data = dir.Sub("data");
    fs::copy(release / kSqliteDir, data, fs::copy_options::recursive);
    auto csd = StartCsd(data, std::nullopt);
    ASSERT_OK(csd);
    ExpectFixtureState(**csd);
  }
}

TEST(CompatFixtures, EveryReleasesEtcdBackupRestoresAndServes) {
  for (const fs::path& release : Releases()) {
    SCOPED_TRACE(release.filename().string());
    cosched::testing::EtcdMember etcd;
    ASSERT_OK(etcd.Start());
    store::StoreLocation to;
    to.kind = store::StoreLocation::Kind::kEtcd;
    to.etcd.client = etcd.ClientOptions();
    to.etcd.prefix = "/cosched";
    ASSERT_OK(store::RestoreStore((release / kEtcdBackup).string(), to, {}));
    cosched::testing::TempDir dir;
    auto csd = StartCsd(dir.Sub("unused"), to.etcd);
    ASSERT_OK(csd);
    ExpectFixtureState(**csd);
  }
}

TEST(CompatFixtures, TheAgentLoadsEveryReleasesStateDir) {
  auto state_fs = std::make_shared<host::LocalStateFs>();
  for (const fs::path& release : Releases()) {
    SCOPED_TRACE(release.filename().string());
    const fs::path dir = release / kAgentStateDir;
    agent::AssignmentCache cache((dir / agent::AssignmentCache::kStateFileName).string(), state_fs);
    ASSERT_OK(cache.Load());
    EXPECT_EQ(cache.revision(), kAgentStateRevision);
    int held = 0;
    for (const FixtureVm& vm : kFixtureVms) {
      if (std::string(vm.tenant_id) != kFixtureTenant) continue;
      ++held;
      std::optional<v1::Assignment> assignment = cache.Find(vm.vm_id);
      ASSERT_TRUE(assignment.has_value()) << vm.vm_id;
      EXPECT_EQ(assignment->trust_group(), FixtureTrustGroup(vm));
      EXPECT_EQ(assignment->isolation(), vm.isolation);
    }
    EXPECT_EQ(cache.assignments().size(), static_cast<size_t>(held));
    agent::HostEnablementState enablement(
        (dir / agent::HostEnablementState::kStateFileName).string(), state_fs);
    enablement.Load();
    EXPECT_EQ(enablement.Get().state(), v1::HostEnablement::STATE_WAIVED);
  }
}

}  // namespace
}  // namespace cosched::compat
