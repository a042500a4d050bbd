// make_compat_fixtures OUTDIR: writes the on-disk formats of this build
// into OUTDIR (tests/compat/README.md): a csd data dir on SQLite, a `csd
// store backup` of the same state on etcd, and a cs-agent state dir, each
// holding fixture_contents.h. scripts/compat-fixtures.sh runs it at a
// release and adds the proto descriptors beside them.
#include <filesystem>
#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "agent/assignment_cache.h"
#include "agent/host_enablement.h"
#include "common/status_macros.h"
#include "cosched/v1/agent.grpc.pb.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "host/state_fs.h"
#include "store/store_tools.h"
#include "tests/compat/compat_support.h"
#include "tests/compat/fixture_contents.h"
#include "tests/testing/etcd_member.h"

namespace cosched::compat {
namespace {

absl::Status Check(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", status.error_message()));
}

// The fixture's state, through csd's own API.
absl::Status FillCsd(server::CsdServer& csd) {
  auto channel = grpc::CreateChannel(csd.address(), grpc::InsecureChannelCredentials());
  auto control = v1::ControlPlane::NewStub(channel);
  auto agent = v1::AgentService::NewStub(channel);
  {
    grpc::ClientContext context;
    v1::SetTenantPolicyRequest request;
    v1::TenantPolicy* policy = request.mutable_policy();
    policy->set_tenant_id(kFixtureTenant);
    policy->set_default_isolation(v1::ISOLATION_LEVEL_TENANT);
    policy->add_allowed_isolation(v1::ISOLATION_LEVEL_TENANT);
    policy->add_allowed_isolation(v1::ISOLATION_LEVEL_VM);
    v1::TenantPolicy response;
    RETURN_IF_ERROR(Check(control->SetTenantPolicy(&context, request, &response), "SetTenantPolicy"));
  }
  {
    grpc::ClientContext context;
    v1::RegisterRequest request;
    request.set_host_id(kFixtureHost);
    for (int core = 0; core < 2; ++core) {
      v1::Core* c = request.mutable_topology()->add_cores();
      c->set_core_id(core);
      c->add_cpus(2 * core);
      c->add_cpus(2 * core + 1);
    }
    request.mutable_capabilities()->set_smt_active(true);
    request.mutable_capabilities()->set_core_sched(v1::CORE_SCHED_SUPPORT_SUPPORTED);
    (*request.mutable_labels())["zone"] = kFixtureHostZone;
    v1::RegisterResponse response;
    RETURN_IF_ERROR(Check(agent->Register(&context, request, &response), "Register"));
  }
  for (const FixtureVm& vm : kFixtureVms) {
    grpc::ClientContext context;
    v1::TagVMRequest request;
    request.set_vm_id(vm.vm_id);
    request.set_tenant_id(vm.tenant_id);
    request.set_isolation(vm.isolation);
    v1::TagVMResponse response;
    RETURN_IF_ERROR(Check(control->TagVM(&context, request, &response), "TagVM"));
  }
  return absl::OkStatus();
}

absl::Status WriteAgentState(const std::string& dir) {
  std::filesystem::create_directories(dir);
  auto fs = std::make_shared<host::LocalStateFs>();
  agent::AssignmentCache cache(absl::StrCat(dir, "/", agent::AssignmentCache::kStateFileName), fs);
  v1::WatchAssignmentsResponse snapshot;
  snapshot.set_kind(v1::WatchAssignmentsResponse::KIND_SNAPSHOT);
  snapshot.set_revision(kAgentStateRevision);
  for (const FixtureVm& vm : kFixtureVms) {
    if (std::string(vm.tenant_id) != kFixtureTenant) continue;
    v1::Assignment* a = snapshot.add_assignments();
    a->set_vm_id(vm.vm_id);
    a->set_tenant_id(vm.tenant_id);
    a->set_isolation(vm.isolation);
    a->set_trust_group(FixtureTrustGroup(vm));
    a->set_thread_scope(v1::THREAD_SCOPE_EMULATOR);
    a->set_revision(kAgentStateRevision);
  }
  RETURN_IF_ERROR(cache.Apply(snapshot));
  RETURN_IF_ERROR(cache.save_error());
  agent::HostEnablementState enablement(
      absl::StrCat(dir, "/", agent::HostEnablementState::kStateFileName), fs);
  v1::HostEnablement waived;
  waived.set_state(v1::HostEnablement::STATE_WAIVED);
  waived.set_reason("the compatibility fixture's waiver");
  enablement.Set(waived);
  return absl::OkStatus();
}

absl::Status Run(const std::string& out) {
  if (std::filesystem::exists(out) && !std::filesystem::is_empty(out)) {
    return absl::FailedPreconditionError(absl::StrCat(out, " is not empty"));
  }
  const std::string sqlite_dir = absl::StrCat(out, "/", kSqliteDir);
  {
    ASSIGN_OR_RETURN(auto csd, StartCsd(sqlite_dir, std::nullopt));
    RETURN_IF_ERROR(FillCsd(*csd));
  }
  // The same state on etcd, through the migration operators use, then
  // backed up from there.
  testing::EtcdMember etcd;
  RETURN_IF_ERROR(etcd.Start());
  store::StoreLocation from;
  from.kind = store::StoreLocation::Kind::kSqlite;
  from.sqlite_dir = sqlite_dir;
  store::StoreLocation to;
  to.kind = store::StoreLocation::Kind::kEtcd;
  to.etcd.client = etcd.ClientOptions();
  to.etcd.prefix = "/cosched";
  RETURN_IF_ERROR(store::MigrateStore(from, to, {}).status());
  RETURN_IF_ERROR(store::BackupStore(to, absl::StrCat(out, "/", kEtcdBackup)).status());
  return WriteAgentState(absl::StrCat(out, "/", kAgentStateDir));
}

}  // namespace
}  // namespace cosched::compat

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_compat_fixtures OUTDIR\n";
    return 2;
  }
  absl::Status done = cosched::compat::Run(argv[1]);
  if (!done.ok()) {
    std::cerr << "make_compat_fixtures: " << done << "\n";
    return 1;
  }
  return 0;
}
