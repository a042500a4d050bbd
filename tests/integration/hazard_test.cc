// The safety preflight end to end: a sched_ext scheduler (a stand-in of
// its sysfs state, in the fake host) stops all cookie writes within a
// second, leaves the cookies set as they are, shows the host unsafe in csd
// and keeps Place off it; tagging resumes once it is gone. An operator's
// allow_hazards tags anyway and is audited.
#include <chrono>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"

#include "cli/commands.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/mini_cluster.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::Eventually;

constexpr char kSchedExtState[] = "/sys/kernel/sched_ext/state";
constexpr char kSchedExtOps[] = "/sys/kernel/sched_ext/root/ops";

class HazardTest : public ::testing::Test {
 protected:
  void StartCluster(testing::MiniClusterOptions options = {}) {
    auto cluster = testing::MiniCluster::Start(std::move(options));
    ASSERT_OK(cluster);
    cluster_ = std::move(*cluster);
  }

  // Empty until the agent registered.
  v1::Host GetHost(const std::string& id) {
    v1::GetHostRequest request;
    request.set_host_id(id);
    v1::Host host;
    grpc::ClientContext context;
    if (!cluster_->control().GetHost(&context, request, &host).ok()) return v1::Host();
    return host;
  }

  v1::VM GetVm(const std::string& id) {
    v1::GetVMRequest request;
    request.set_vm_id(id);
    v1::VM vm;
    grpc::ClientContext context;
    grpc::Status status = cluster_->control().GetVM(&context, request, &vm);
    EXPECT_OK(status);
    return vm;
  }

  void Tag(const std::string& vm, v1::IsolationLevel level) {
    v1::TagVMRequest request;
    request.set_vm_id(vm);
    request.set_tenant_id("acme");
    request.set_isolation(level);
    v1::TagVMResponse response;
    grpc::ClientContext context;
    ASSERT_OK(cluster_->control().TagVM(&context, request, &response));
  }

  std::string HostsTable() {
    cli::CommandOptions options;
    options.server = cluster_->csd_address();
    std::ostringstream out, err;
    EXPECT_EQ(cli::RunHostList(cluster_->control(), options, out, err), cli::kExitOk)
        << err.str();
    return out.str();
  }

  std::unique_ptr<testing::MiniCluster> cluster_;
};

TEST_F(HazardTest, SchedExtStopsTaggingWithinASecondAndTaggingResumesAfter) {
  StartCluster();
  testing::MiniHostOptions options;
  options.extra_files = {{kSchedExtState, "disabled\n"}};
  auto added = cluster_->AddHost(options);
  ASSERT_OK(added);
  testing::MiniHost& host = **added;
  host.AddVm("vm-1", 100);
  Tag("vm-1", v1::ISOLATION_LEVEL_TENANT);
  ASSERT_TRUE(Eventually([&] {
    return GetVm("vm-1").enforcement().state() == v1::ENFORCEMENT_STATE_ENFORCED;
  }));
  const uint64_t acme = host.VmCookie(100);
  ASSERT_NE(acme, 0u);
  EXPECT_THAT(HostsTable(), HasSubstr(" safe "));

  // A scheduler is loaded. A second later the agent writes nothing more.
  host.fs().SetFile(kSchedExtOps, "rusty_1.0.4\n");
  host.fs().SetFile(kSchedExtState, "enabled\n");
  std::this_thread::sleep_for(1s);
  const int writes = host.kernel().write_calls();
  // What would need writes: a new VM (its fail-closed cookie) and a
  // regroup of vm-1 (a cookie of its own at level vm).
  host.AddVm("vm-2", 200);
  Tag("vm-1", v1::ISOLATION_LEVEL_VM);
  host.agent().TriggerReconcile();
  // csd hears of it and holds Place off the host.
  ASSERT_TRUE(Eventually([&] {
    v1::Host h = GetHost("hv-1");
    return h.capabilities().preflight().hazards_size() == 1 &&
           absl::StrContains(h.unplaceable_reason(), "unsafe (sched_ext)");
  }, 5s)) << GetHost("hv-1").DebugString();
  v1::Host unsafe = GetHost("hv-1");
  EXPECT_THAT(unsafe.capabilities().preflight().hazards(0).detail(),
              HasSubstr("scheduler 'rusty_1.0.4'"));
  EXPECT_THAT(HostsTable(), HasSubstr("unsafe: sched_ext"));
  ASSERT_TRUE(Eventually([&] {
    v1::VM vm = GetVm("vm-1");
    return vm.enforcement().state() == v1::ENFORCEMENT_STATE_HELD &&
           absl::StrContains(vm.enforcement().last_error(), "tagging held");
  }, 5s)) << GetVm("vm-1").DebugString();
  std::this_thread::sleep_for(1s);  // ten more rescans
  EXPECT_EQ(host.kernel().write_calls(), writes) << "cookies were written under sched_ext";
  EXPECT_EQ(host.VmCookie(100), acme) << "a cookie set before the hazard was changed";
  EXPECT_EQ(host.kernel().CookieOf(200), 0u);

  // The scheduler goes away: tagging resumes, the host is safe again.
  host.fs().SetFile(kSchedExtState, "disabled\n");
  ASSERT_TRUE(Eventually([&] {
    v1::VM vm = GetVm("vm-1");
    return host.VmCookie(200) != 0 && host.VmCookie(200) != host.VmCookie(100) &&
           host.VmCookie(100) != 0 &&
           vm.enforcement().state() == v1::ENFORCEMENT_STATE_ENFORCED &&
           vm.enforcement().applied_trust_group() == "acme/vm/vm-1";
  }, 5s)) << GetVm("vm-1").DebugString();
  ASSERT_TRUE(Eventually([&] { return GetHost("hv-1").unplaceable_reason().empty(); }, 5s))
      << GetHost("hv-1").unplaceable_reason();
}

TEST_F(HazardTest, AHostUnsafeAtStartNeverGetsACookie) {
  StartCluster();
  testing::MiniHostOptions options;
  options.extra_files = {{kSchedExtState, "enabling\n"}};
  auto added = cluster_->AddHost(options);
  ASSERT_OK(added);
  testing::MiniHost& host = **added;
  host.AddVm("vm-1", 100);
  ASSERT_TRUE(Eventually([&] {
    return GetHost("hv-1").capabilities().preflight().hazards_size() == 1;
  }));
  ASSERT_TRUE(Eventually([&] { return GetHost("hv-1").vm_count() == 1; }));
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(host.kernel().write_calls(), 0);
  EXPECT_EQ(host.kernel().CookieOf(100), 0u);
}

// A kernel on the known-bad list (Debian's version, read from
// /proc/sys/kernel/version as on a real Debian host) is a hazard from the
// start: no cookie, and csd shows the host unsafe naming the entry.
TEST_F(HazardTest, AKnownBadKernelNeverGetsACookie) {
  StartCluster();
  testing::MiniHostOptions options;
  options.extra_files = {
      {"/proc/sys/kernel/osrelease", "5.15.0-56-amd64\n"},
      {"/proc/sys/kernel/version", "#1 SMP Debian 5.15.20-1 (2022-02-10)\n"}};
  v1::KnownBadEntry entry;
  entry.set_id("forceidle-5.15");
  entry.set_kernel_from("5.14");
  entry.set_kernel_before("5.15.34");
  entry.set_reason("the forced-newidle balancer misbehaves");
  options.known_bad = {entry};
  auto added = cluster_->AddHost(options);
  ASSERT_OK(added);
  testing::MiniHost& host = **added;
  host.AddVm("vm-1", 100);
  ASSERT_TRUE(Eventually([&] {
    return GetHost("hv-1").capabilities().preflight().hazards_size() == 1;
  }));
  const v1::HostPreflight preflight = GetHost("hv-1").capabilities().preflight();
  EXPECT_EQ(preflight.kernel_version(), "5.15.20");
  EXPECT_EQ(preflight.hazards(0).name(), "known_bad:forceidle-5.15");
  EXPECT_THAT(preflight.hazards(0).detail(), HasSubstr("kernel 5.15.20 is in [5.14, 5.15.34)"));
  ASSERT_TRUE(Eventually([&] { return GetHost("hv-1").vm_count() == 1; }));
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(host.kernel().write_calls(), 0);
  EXPECT_EQ(host.kernel().CookieOf(100), 0u);
  EXPECT_THAT(HostsTable(), HasSubstr("unsafe"));
}

TEST_F(HazardTest, AllowedHazardTagsAnywayAndIsAudited) {
  StartCluster();
  testing::MiniHostOptions options;
  options.extra_files = {{kSchedExtState, "enabled\n"}};
  options.allow_hazards = {"sched_ext"};
  auto added = cluster_->AddHost(options);
  ASSERT_OK(added);
  testing::MiniHost& host = **added;
  host.AddVm("vm-1", 100);
  // The agent tags from its own view before its Register reaches csd, so
  // the cookie alone does not say that csd has the host's preflight yet.
  ASSERT_TRUE(Eventually([&] { return host.VmCookie(100) != 0; }));
  ASSERT_TRUE(Eventually([&] {
    return GetHost("hv-1").capabilities().preflight().allowed_hazards_size() == 1;
  })) << GetHost("hv-1").DebugString();
  v1::Host h = GetHost("hv-1");
  EXPECT_EQ(h.capabilities().preflight().hazards_size(), 0);
  EXPECT_TRUE(h.unplaceable_reason().empty()) << h.unplaceable_reason();
  EXPECT_THAT(HostsTable(), HasSubstr("safe (allowed: sched_ext)"));

  v1::ListAuditRecordsRequest request;
  request.set_subject("hv-1");
  v1::ListAuditRecordsResponse response;
  grpc::ClientContext context;
  ASSERT_OK(cluster_->control().ListAuditRecords(&context, request, &response));
  bool audited = false;
  for (const v1::AuditRecord& r : response.records()) {
    audited = audited || (r.method() == "AllowHazards" && absl::StrContains(r.after(), "sched_ext"));
  }
  EXPECT_TRUE(audited) << response.DebugString();
}

constexpr char kVulnerabilities[] = "/sys/devices/system/cpu/vulnerabilities/";

// enforce: when-vulnerable with the operator's list [l1tf, mds]. A host
// whose CPUs report not affected by both is waived: it gets no cookies and
// says why, naming the residual risk; one whose CPUs are affected is tagged
// as always; Place counts both as isolating.
TEST_F(HazardTest, WhenVulnerableTagsOnlyHostsNotClearOfTheOperatorsList) {
  testing::MiniClusterOptions cluster;
  cluster.csd.enforce = "when-vulnerable";
  cluster.csd.when_vulnerable = {"l1tf", "mds"};
  StartCluster(std::move(cluster));
  testing::MiniHostOptions clear;
  clear.host_id = "hv-clear";
  clear.extra_files = {{std::string(kVulnerabilities) + "l1tf", "Not affected\n"},
                       {std::string(kVulnerabilities) + "mds", "Not affected\n"},
                       {std::string(kVulnerabilities) + "spectre_v2", "Mitigation: IBRS\n"}};
  auto added = cluster_->AddHost(clear);
  ASSERT_OK(added);
  testing::MiniHost& host = **added;
  testing::MiniHostOptions leaky;
  leaky.host_id = "hv-leaky";
  leaky.extra_files = {{std::string(kVulnerabilities) + "l1tf", "Not affected\n"},
                       {std::string(kVulnerabilities) + "mds",
                        "Mitigation: Clear CPU buffers; SMT vulnerable\n"}};
  auto added_leaky = cluster_->AddHost(leaky);
  ASSERT_OK(added_leaky);
  testing::MiniHost& leaky_host = **added_leaky;

  host.AddVm("vm-1", 100);
  leaky_host.AddVm("vm-2", 200);
  Tag("vm-1", v1::ISOLATION_LEVEL_VM);
  Tag("vm-2", v1::ISOLATION_LEVEL_VM);
  ASSERT_TRUE(Eventually([&] {
    v1::VM vm = GetVm("vm-1");
    return vm.enforcement().state() == v1::ENFORCEMENT_STATE_WAIVED;
  }, 5s)) << GetVm("vm-1").DebugString();
  EXPECT_THAT(GetVm("vm-1").enforcement().last_error(),
              HasSubstr("cookies waived: enforce: when-vulnerable waives cookies on this "
                        "host: its CPUs report not affected by l1tf, mds"));
  ASSERT_TRUE(Eventually([&] {
    return GetVm("vm-2").enforcement().state() == v1::ENFORCEMENT_STATE_ENFORCED &&
           leaky_host.VmCookie(200) != 0;
  }, 5s)) << GetVm("vm-2").DebugString();

  // Once the agent knows, a new VM gets no cookie and nothing is written.
  const int writes = host.kernel().write_calls();
  host.AddVm("vm-3", 300);
  Tag("vm-3", v1::ISOLATION_LEVEL_VM);
  ASSERT_TRUE(Eventually([&] {
    return GetVm("vm-3").enforcement().state() == v1::ENFORCEMENT_STATE_WAIVED;
  }, 5s)) << GetVm("vm-3").DebugString();
  EXPECT_EQ(host.kernel().write_calls(), writes);
  EXPECT_EQ(host.kernel().CookieOf(300), 0u);

  v1::Host h = GetHost("hv-clear");
  EXPECT_EQ(h.enablement().state(), v1::HostEnablement::STATE_WAIVED);
  EXPECT_EQ(GetHost("hv-leaky").enablement().state(), v1::HostEnablement::STATE_ENFORCE);
  EXPECT_TRUE(h.unplaceable_reason().empty()) << h.unplaceable_reason();
  const std::string table = HostsTable();
  EXPECT_THAT(table, HasSubstr("COOKIES"));
  EXPECT_THAT(table, HasSubstr("waived"));
  EXPECT_THAT(table, HasSubstr("enforce"));
}

// The same host under the default (always) is tagged.
TEST_F(HazardTest, AlwaysTagsHostsWhoseCpusLeakNothing) {
  StartCluster();
  testing::MiniHostOptions clear;
  clear.extra_files = {{std::string(kVulnerabilities) + "l1tf", "Not affected\n"},
                       {std::string(kVulnerabilities) + "mds", "Not affected\n"}};
  auto added = cluster_->AddHost(clear);
  ASSERT_OK(added);
  testing::MiniHost& host = **added;
  host.AddVm("vm-1", 100);
  Tag("vm-1", v1::ISOLATION_LEVEL_VM);
  ASSERT_TRUE(Eventually([&] {
    return GetVm("vm-1").enforcement().state() == v1::ENFORCEMENT_STATE_ENFORCED &&
           host.VmCookie(100) != 0;
  }, 5s)) << GetVm("vm-1").DebugString();
  EXPECT_EQ(GetHost("hv-1").enablement().state(), v1::HostEnablement::STATE_ENFORCE);
}

}  // namespace
}  // namespace cosched
