// Every RPC of csd refuses bad input with the right code and a message that
// names the field, and writes nothing.
#include <string>

#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "tests/server/csd_fixture.h"
#include "tests/testing/status_matchers.h"

namespace cosched::server {
namespace {

struct Refusal {
  grpc::StatusCode code;
  std::string message_part;
};

void ExpectRefused(const grpc::Status& status, const Refusal& want) {
  EXPECT_EQ(status.error_code(), want.code) << status.error_message();
  EXPECT_NE(status.error_message().find(want.message_part), std::string::npos)
      << "message: " << status.error_message() << "\nwanted: " << want.message_part;
}

class BadInputTest : public CsdFixture {
 protected:
  template <typename Req, typename Resp, typename Call>
  void Expect(Call call, const Req& request, const Refusal& want) {
    grpc::ClientContext context;
    Resp response;
    ExpectRefused(call(&context, request, &response), want);
  }

  void RegisterHost(const std::string& host) {
    grpc::ClientContext context;
    v1::RegisterRequest request;
    request.set_host_id(host);
    v1::RegisterResponse response;
    ASSERT_OK(agent_->Register(&context, request, &response));
  }

};

constexpr auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;

TEST_F(BadInputTest, TagVM) {
  auto tag = [&](grpc::ClientContext* c, const v1::TagVMRequest& r,
                 v1::TagVMResponse* out) { return control_->TagVM(c, r, out); };
  v1::TagVMRequest r;
  Expect<v1::TagVMRequest, v1::TagVMResponse>(tag, r, {kInvalid, "vm_id is required"});
  r.set_vm_id("bad id!");
  Expect<v1::TagVMRequest, v1::TagVMResponse>(
      tag, r, {kInvalid, "vm_id 'bad id!' must be 1-128 characters"});
  r.set_vm_id(std::string(129, 'a'));
  Expect<v1::TagVMRequest, v1::TagVMResponse>(tag, r, {kInvalid, "vm_id"});
  r.set_vm_id("vm-1");
  r.set_tenant_id("ten ant");
  Expect<v1::TagVMRequest, v1::TagVMResponse>(tag, r, {kInvalid, "tenant_id"});
  r.set_tenant_id("acme");
  r.set_isolation(static_cast<v1::IsolationLevel>(99));
  Expect<v1::TagVMRequest, v1::TagVMResponse>(tag, r, {kInvalid, "isolation must be one of"});
  r.set_isolation(v1::ISOLATION_LEVEL_VM);
  r.set_thread_scope(static_cast<v1::ThreadScope>(-3));
  Expect<v1::TagVMRequest, v1::TagVMResponse>(tag, r, {kInvalid, "thread_scope"});
  r.set_thread_scope(v1::THREAD_SCOPE_VCPUS);
  r.add_interference_classes("ok");
  r.add_interference_classes("");
  Expect<v1::TagVMRequest, v1::TagVMResponse>(tag, r, {kInvalid, "interference_classes[1]"});
  r.clear_interference_classes();
  for (int i = 0; i < 17; ++i) r.add_interference_classes("c" + std::to_string(i));
  Expect<v1::TagVMRequest, v1::TagVMResponse>(tag, r, {kInvalid, "at most 16"});

  // Nothing was written by any of them.
  grpc::ClientContext context;
  v1::ListVMsResponse list;
  ASSERT_OK(control_->ListVMs(&context, v1::ListVMsRequest(), &list));
  EXPECT_EQ(list.vms_size(), 0);
}

TEST_F(BadInputTest, UntagAndGetVM) {
  v1::UntagVMRequest untag;
  untag.set_vm_id("-x");
  Expect<v1::UntagVMRequest, v1::UntagVMResponse>(
      [&](auto* c, auto& r, auto* o) { return control_->UntagVM(c, r, o); }, untag,
      {kInvalid, "vm_id '-x'"});
  untag.set_vm_id("vm-nope");
  Expect<v1::UntagVMRequest, v1::UntagVMResponse>(
      [&](auto* c, auto& r, auto* o) { return control_->UntagVM(c, r, o); }, untag,
      {grpc::StatusCode::NOT_FOUND, "vm 'vm-nope' is not tagged"});
  v1::GetVMRequest get;
  Expect<v1::GetVMRequest, v1::VM>(
      [&](auto* c, auto& r, auto* o) { return control_->GetVM(c, r, o); }, get,
      {kInvalid, "vm_id is required"});
  get.set_vm_id("vm-nope");
  Expect<v1::GetVMRequest, v1::VM>(
      [&](auto* c, auto& r, auto* o) { return control_->GetVM(c, r, o); }, get,
      {grpc::StatusCode::NOT_FOUND, "vm 'vm-nope' not found"});
}

TEST_F(BadInputTest, ListCalls) {
  auto list_vms = [&](auto* c, auto& r, auto* o) { return control_->ListVMs(c, r, o); };
  v1::ListVMsRequest vms;
  vms.set_page_size(-1);
  Expect<v1::ListVMsRequest, v1::ListVMsResponse>(list_vms, vms, {kInvalid, "page_size"});
  vms.set_page_size(1001);
  Expect<v1::ListVMsRequest, v1::ListVMsResponse>(list_vms, vms, {kInvalid, "page_size"});
  vms.set_page_size(10);
  vms.set_page_token("garbage!");
  Expect<v1::ListVMsRequest, v1::ListVMsResponse>(list_vms, vms, {kInvalid, "page_token"});
  vms.clear_page_token();
  vms.set_host_id("bad host");
  Expect<v1::ListVMsRequest, v1::ListVMsResponse>(list_vms, vms, {kInvalid, "host_id"});

  v1::ListTenantPoliciesRequest policies;
  policies.set_page_size(5000);
  Expect<v1::ListTenantPoliciesRequest, v1::ListTenantPoliciesResponse>(
      [&](auto* c, auto& r, auto* o) { return control_->ListTenantPolicies(c, r, o); },
      policies, {kInvalid, "page_size"});
  v1::ListHostsRequest hosts;
  hosts.set_page_token("@@@");
  Expect<v1::ListHostsRequest, v1::ListHostsResponse>(
      [&](auto* c, auto& r, auto* o) { return control_->ListHosts(c, r, o); }, hosts,
      {kInvalid, "page_token"});
}

TEST_F(BadInputTest, TenantPolicies) {
  auto set = [&](auto* c, auto& r, auto* o) { return control_->SetTenantPolicy(c, r, o); };
  v1::SetTenantPolicyRequest r;
  Expect<v1::SetTenantPolicyRequest, v1::TenantPolicy>(set, r, {kInvalid, "policy.tenant_id"});
  r.mutable_policy()->set_tenant_id("acme");
  Expect<v1::SetTenantPolicyRequest, v1::TenantPolicy>(
      set, r, {kInvalid, "policy.default_isolation"});
  r.mutable_policy()->set_default_isolation(v1::ISOLATION_LEVEL_NONE);
  r.mutable_policy()->add_allowed_isolation(v1::ISOLATION_LEVEL_VM);
  Expect<v1::SetTenantPolicyRequest, v1::TenantPolicy>(
      set, r, {kInvalid, "must be one of policy.allowed_isolation"});
  v1::GetTenantPolicyRequest get;
  get.set_tenant_id("a b");
  Expect<v1::GetTenantPolicyRequest, v1::TenantPolicy>(
      [&](auto* c, auto& r, auto* o) { return control_->GetTenantPolicy(c, r, o); }, get,
      {kInvalid, "tenant_id"});
}

TEST_F(BadInputTest, GetHost) {
  auto get = [&](auto* c, auto& r, auto* o) { return control_->GetHost(c, r, o); };
  v1::GetHostRequest r;
  Expect<v1::GetHostRequest, v1::Host>(get, r, {kInvalid, "host_id is required"});
  r.set_host_id("nowhere");
  Expect<v1::GetHostRequest, v1::Host>(get, r,
                                       {grpc::StatusCode::NOT_FOUND, "host 'nowhere'"});
}

TEST_F(BadInputTest, HostLifecycle) {
  auto drain = [&](auto* c, auto& r, auto* o) { return control_->DrainHost(c, r, o); };
  auto undrain = [&](auto* c, auto& r, auto* o) { return control_->UndrainHost(c, r, o); };
  auto remove = [&](auto* c, auto& r, auto* o) { return control_->RemoveHost(c, r, o); };
  v1::DrainHostRequest d;
  v1::RemoveHostRequest rm;
  Expect<v1::DrainHostRequest, v1::Host>(drain, d, {kInvalid, "host_id is required"});
  Expect<v1::DrainHostRequest, v1::Host>(undrain, d, {kInvalid, "host_id is required"});
  Expect<v1::RemoveHostRequest, v1::RemoveHostResponse>(remove, rm,
                                                        {kInvalid, "host_id is required"});
  d.set_host_id("bad id!");
  Expect<v1::DrainHostRequest, v1::Host>(drain, d, {kInvalid, "host_id 'bad id!'"});
  d.set_host_id("nowhere");
  rm.set_host_id("nowhere");
  Expect<v1::DrainHostRequest, v1::Host>(drain, d,
                                         {grpc::StatusCode::NOT_FOUND, "host 'nowhere'"});
  Expect<v1::DrainHostRequest, v1::Host>(undrain, d,
                                         {grpc::StatusCode::NOT_FOUND, "host 'nowhere'"});
  Expect<v1::RemoveHostRequest, v1::RemoveHostResponse>(
      remove, rm, {grpc::StatusCode::NOT_FOUND, "host 'nowhere'"});
}

TEST_F(BadInputTest, Register) {
  auto reg = [&](auto* c, auto& r, auto* o) { return agent_->Register(c, r, o); };
  v1::RegisterRequest r;
  Expect<v1::RegisterRequest, v1::RegisterResponse>(reg, r, {kInvalid, "host_id"});
  r.set_host_id("host-a");
  auto* core = r.mutable_topology()->add_cores();
  core->add_cpus(0);
  auto* dup = r.mutable_topology()->add_cores();
  dup->add_cpus(0);
  Expect<v1::RegisterRequest, v1::RegisterResponse>(
      reg, r, {kInvalid, "topology.cores[1].cpus has CPU 0"});
  r.clear_topology();
  r.mutable_topology()->add_cores();
  Expect<v1::RegisterRequest, v1::RegisterResponse>(reg, r,
                                                    {kInvalid, "topology.cores[0].cpus"});
  r.clear_topology();
  r.mutable_capabilities()->set_core_sched(static_cast<v1::CoreSchedSupport>(77));
  Expect<v1::RegisterRequest, v1::RegisterResponse>(reg, r,
                                                    {kInvalid, "capabilities.core_sched"});
  r.mutable_capabilities()->set_core_sched(v1::CORE_SCHED_SUPPORT_SUPPORTED);
  r.set_agent_version(std::string(65, 'v'));
  Expect<v1::RegisterRequest, v1::RegisterResponse>(reg, r, {kInvalid, "agent_version"});
  r.clear_agent_version();
  r.mutable_capabilities()->mutable_preflight()->set_kernel_version(std::string(1025, '6'));
  Expect<v1::RegisterRequest, v1::RegisterResponse>(
      reg, r, {kInvalid, "preflight.kernel_version must be at most 1024 bytes"});
  r.mutable_capabilities()->mutable_preflight()->clear_kernel_version();
  (*r.mutable_labels())["zone"] = "a;b";
  Expect<v1::RegisterRequest, v1::RegisterResponse>(
      reg, r, {kInvalid, "labels.zone 'a;b' may hold only letters"});
}

TEST_F(BadInputTest, WatchAssignments) {
  auto watch = [&](const v1::WatchAssignmentsRequest& r) {
    grpc::ClientContext context;
    auto reader = agent_->WatchAssignments(&context, r);
    v1::WatchAssignmentsResponse message;
    EXPECT_FALSE(reader->Read(&message));
    return reader->Finish();
  };
  v1::WatchAssignmentsRequest r;
  r.set_host_id("bad host");
  ExpectRefused(watch(r), {kInvalid, "host_id"});
  r.set_host_id("host-a");
  r.set_resume_revision(-1);
  ExpectRefused(watch(r), {kInvalid, "resume_revision"});
  r.set_resume_revision(0);
  ExpectRefused(watch(r), {grpc::StatusCode::FAILED_PRECONDITION, "not registered"});
}

TEST_F(BadInputTest, Report) {
  auto report = [&](auto* c, auto& r, auto* o) { return agent_->Report(c, r, o); };
  v1::ReportRequest r;
  Expect<v1::ReportRequest, v1::ReportResponse>(report, r, {kInvalid, "host_id"});
  r.set_host_id("host-a");
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {grpc::StatusCode::FAILED_PRECONDITION, "not registered"});
  RegisterHost("host-a");
  r.set_applied_revision(-5);
  Expect<v1::ReportRequest, v1::ReportResponse>(report, r, {kInvalid, "applied_revision"});
  r.set_applied_revision(0);
  r.add_vms()->set_vm_id("vm-1");
  r.add_vms()->set_vm_id("vm-1");
  Expect<v1::ReportRequest, v1::ReportResponse>(report, r,
                                                {kInvalid, "vms[1].vm_id 'vm-1' is reported twice"});
  r.clear_vms();
  auto* o = r.add_vms();
  o->set_vm_id("vm-1");
  o->set_uuid("not a uuid!");
  Expect<v1::ReportRequest, v1::ReportResponse>(report, r, {kInvalid, "vms[0].uuid"});
  o->clear_uuid();
  o->mutable_enforcement()->set_threads_found(-1);
  Expect<v1::ReportRequest, v1::ReportResponse>(report, r, {kInvalid, "vms[0].enforcement"});
  o->mutable_enforcement()->set_threads_found(0);
  o->mutable_enforcement()->set_vcpus(4097);
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {kInvalid, "vms[0].enforcement.vcpus must be at most 4096"});
  o->mutable_enforcement()->set_vcpus(2);
  // Domain metadata: within the agent's own limits, or refused.
  o->mutable_metadata()->mutable_nova()->set_project_uuid(std::string(257, 'a'));
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {kInvalid, "vms[0].metadata.nova.project_uuid must be at most 256 bytes"});
  o->mutable_metadata()->mutable_nova()->set_project_uuid("p");
  for (int i = 0; i < 17; ++i) o->mutable_metadata()->mutable_cosched()->add_interference_classes("c");
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {kInvalid, "vms[0].metadata.cosched.interference_classes must have at most 16"});
  o->mutable_metadata()->mutable_cosched()->clear_interference_classes();
  o->mutable_metadata()->set_error(std::string(1025, 'e'));
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {kInvalid, "vms[0].metadata.error must be at most 1024 bytes"});
  r.clear_vms();
  for (int i = 0; i < 10001; ++i) r.add_vms()->set_vm_id("vm-" + std::to_string(i));
  Expect<v1::ReportRequest, v1::ReportResponse>(report, r, {kInvalid, "at most 10000"});
  r.clear_vms();
  // Impostors: what the host says of processes posing as VMs, bounded.
  for (int i = 0; i < 33; ++i) r.add_impostors()->set_pid(100 + i);
  r.set_impostor_count(33);
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {kInvalid, "impostors must have at most 32 entries"});
  r.clear_impostors();
  r.add_impostors()->set_pid(100);
  r.set_impostor_count(0);
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {kInvalid, "impostor_count must be between the number of impostors listed (1)"});
  r.set_impostor_count(1);
  r.mutable_impostors(0)->set_pid(0);
  Expect<v1::ReportRequest, v1::ReportResponse>(report, r,
                                                {kInvalid, "impostors[0].pid must be positive"});
  r.mutable_impostors(0)->set_pid(100);
  r.mutable_impostors(0)->set_reason(std::string(513, 'r'));
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {kInvalid, "impostors[0].reason must be at most 512 bytes"});
}

// A stats window ending a few seconds ago, with one VM.
v1::StatsWindow RecentWindow(int64_t end_ago_s, const std::string& vm_id) {
  const int64_t now = absl::ToUnixNanos(absl::Now());
  v1::StatsWindow w;
  w.set_end_unix_ns(now - end_ago_s * 1000000000LL);
  w.set_start_unix_ns(w.end_unix_ns() - 1000000000LL);
  auto* vm = w.add_vms();
  vm->set_vm_id(vm_id);
  vm->mutable_share()->set_run_ns(100);
  vm->mutable_share()->set_same_ns(100);
  return w;
}

TEST_F(BadInputTest, ReportStatsRefusedWholeChangeNothing) {
  auto report = [&](auto* c, auto& r, auto* o) { return agent_->Report(c, r, o); };
  v1::ReportRequest r;
  r.set_host_id("host-a");
  r.add_vms()->set_vm_id("vm-1");
  *r.add_stats() = RecentWindow(20, "vm-1");
  // Not registered: refused, and its windows are not kept either.
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {grpc::StatusCode::FAILED_PRECONDITION, "not registered"});
  RegisterHost("host-a");
  *r.add_stats() = RecentWindow(10, "vm-1");
  r.mutable_stats(1)->mutable_vms(0)->mutable_share()->set_idle_ns(-3);
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {kInvalid, "stats[1].vms[0].share.idle_ns must not be negative"});
  r.mutable_stats(1)->mutable_vms(0)->mutable_share()->set_idle_ns(1);
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {kInvalid, "stats[1].vms[0].share same_ns + idle_ns"});
  r.mutable_stats(1)->mutable_vms(0)->mutable_share()->set_idle_ns(0);
  r.mutable_stats(1)->set_start_unix_ns(r.stats(0).start_unix_ns());
  Expect<v1::ReportRequest, v1::ReportResponse>(
      report, r, {kInvalid, "stats[1].start_unix_ns must not be before the end of stats[0]"});
  r.clear_stats();
  for (int i = 121; i > 0; --i) *r.add_stats() = RecentWindow(i * 2, "vm-1");
  Expect<v1::ReportRequest, v1::ReportResponse>(report, r, {kInvalid, "at most 120"});
  r.clear_stats();
  r.set_dropped_windows(-1);
  Expect<v1::ReportRequest, v1::ReportResponse>(report, r, {kInvalid, "dropped_windows"});

  // None of it was applied: no VM placed, no window kept.
  grpc::ClientContext context;
  v1::GetHostRequest get_host;
  get_host.set_host_id("host-a");
  v1::Host host;
  ASSERT_OK(control_->GetHost(&context, get_host, &host));
  EXPECT_EQ(host.vm_count(), 0);
  v1::GetStatsRequest stats;
  stats.set_vm_id("vm-1");
  Expect<v1::GetStatsRequest, v1::GetStatsResponse>(
      [&](auto* c, auto& r, auto* o) { return control_->GetStats(c, r, o); }, stats,
      {grpc::StatusCode::NOT_FOUND, "no stats were reported for vm 'vm-1' in the last 300 s"});
}

TEST_F(BadInputTest, GetStats) {
  auto get = [&](auto* c, auto& r, auto* o) { return control_->GetStats(c, r, o); };
  v1::GetStatsRequest r;
  Expect<v1::GetStatsRequest, v1::GetStatsResponse>(
      get, r, {kInvalid, "one of vm_id, host_id, tenant, trust_group is required"});
  r.set_vm_id("bad vm");
  Expect<v1::GetStatsRequest, v1::GetStatsResponse>(get, r, {kInvalid, "vm_id 'bad vm'"});
  r.set_host_id("");
  Expect<v1::GetStatsRequest, v1::GetStatsResponse>(get, r, {kInvalid, "host_id is required"});
  r.set_tenant("-acme");
  Expect<v1::GetStatsRequest, v1::GetStatsResponse>(get, r, {kInvalid, "tenant '-acme'"});
  r.set_trust_group("");
  Expect<v1::GetStatsRequest, v1::GetStatsResponse>(get, r, {kInvalid, "trust_group must be 1-512"});
  r.set_trust_group(std::string(513, 'g'));
  Expect<v1::GetStatsRequest, v1::GetStatsResponse>(get, r, {kInvalid, "trust_group must be 1-512"});
  r.set_host_id("host-a");
  r.set_window_seconds(-1);
  Expect<v1::GetStatsRequest, v1::GetStatsResponse>(
      get, r, {kInvalid, "window_seconds must be between 1 and 86400"});
  r.set_window_seconds(86401);
  Expect<v1::GetStatsRequest, v1::GetStatsResponse>(get, r, {kInvalid, "window_seconds"});
  r.set_window_seconds(86400);
  Expect<v1::GetStatsRequest, v1::GetStatsResponse>(
      get, r, {grpc::StatusCode::NOT_FOUND, "host 'host-a' in the last 86400 s"});
  r.set_tenant("acme");
  Expect<v1::GetStatsRequest, v1::GetStatsResponse>(
      get, r, {grpc::StatusCode::NOT_FOUND, "tenant 'acme'"});
}

}  // namespace
}  // namespace cosched::server
