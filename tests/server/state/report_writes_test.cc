// What a Report writes: a change of what the host runs at once; a change of
// enforcement alone (after a tag, the agent applied it) held in memory,
// shown at once, and written with the host's first Report once
// enforcement_write_interval has passed. Counted at the store.
#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/state/report_memory.h"
#include "store/instrumented_store.h"
#include "store/sqlite_store.h"
#include "tests/server/state_testing.h"
#include "tests/store/recording_store.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

const Actor kTester{"spiffe://test/tester", "admin"};

using testing::Wait;

class ReportWritesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Open();
    ASSERT_OK(testing::RegisterHost(*state_, "hv-1", kTester));
    for (const char* vm : {"vm-1", "vm-2"}) {
      v1::TagVMRequest request;
      request.set_vm_id(vm);
      ASSERT_OK(Wait<v1::TagVMResponse>(
          [&](auto done) { state_->vms.TagVm(request, kTester, std::move(done)); }));
    }
  }

  // csd's state over the store in dir_ (again, as a restarted csd).
  void Open() {
    state_.reset();
    store_.reset();
    store::SqliteStoreOptions options;
    options.data_dir = dir_.Sub("data");
    auto sqlite = store::SqliteStore::Open(options);
    ASSERT_OK(sqlite);
    auto recording = std::make_unique<cosched::testing::RecordingStore>(std::move(*sqlite));
    recording_ = recording.get();
    store_ = std::make_unique<store::InstrumentedStore>(
        std::move(recording), [this](absl::StatusCode code, double) {
          if (code == absl::StatusCode::kOk) ++writes_;
        });
    state_ = std::make_unique<TestState>(*store_);
    state_->reports.report_rate().set_options({.per_second = 0});
  }

  // A Report of vm-1 and vm-2 (and `extra` when set), vm-1 in `state`
  // with trust group `group`, at `applied` revision.
  absl::Status Report(v1::EnforcementState state, const std::string& group, int64_t applied,
                      const std::string& extra = "") {
    return Apply(Request(state, group, applied, extra));
  }
  absl::Status Apply(const v1::ReportRequest& request) {
    return Wait<v1::ReportResponse>([&](auto done) {
             state_->reports.ApplyReport(request, std::move(done));
           }).status();
  }
  v1::ReportRequest Request(v1::EnforcementState state, const std::string& group,
                            int64_t applied, const std::string& extra = "") {
    v1::ReportRequest request;
    request.set_host_id("hv-1");
    request.set_applied_revision(applied);
    for (const std::string& id : {std::string("vm-1"), std::string("vm-2"), extra}) {
      if (id.empty()) continue;
      v1::VMObservation* o = request.add_vms();
      o->set_vm_id(id);
      o->set_run_state(v1::VM_RUN_STATE_RUNNING);
      o->mutable_enforcement()->set_state(id == "vm-1" ? state : v1::ENFORCEMENT_STATE_ENFORCED);
      o->mutable_enforcement()->set_applied_trust_group(id == "vm-1" ? group : "default/vm/" + id);
      o->mutable_enforcement()->set_vcpus(2);
    }
    return request;
  }

  v1::VMEnforcement Shown(const std::string& vm) {
    v1::GetVMRequest request;
    request.set_vm_id(vm);
    absl::StatusOr<v1::VM> got = state_->vms.GetVm(request);
    EXPECT_OK(got);
    return got.ok() ? got->enforcement() : v1::VMEnforcement();
  }

  int64_t AppliedShown() {
    v1::GetHostRequest request;
    request.set_host_id("hv-1");
    absl::StatusOr<v1::Host> got = state_->hosts.GetHost(request);
    EXPECT_OK(got);
    return got.ok() ? got->applied_revision() : -1;
  }

  // What the store has of vm-1's enforcement on hv-1.
  v1::VMEnforcement Written(const std::string& vm) {
    v1::VMEnforcement written;
    EXPECT_OK(store_->Read([&](store::Transaction& txn) -> absl::Status {
      ASSIGN_OR_RETURN(auto seen, txn.ListObservations(vm));
      for (const store::Observation& o : seen) {
        if (o.host_id == "hv-1") written = o.vm.enforcement();
      }
      return absl::OkStatus();
    }));
    return written;
  }

  cosched::testing::TempDir dir_;
  std::atomic<int> writes_{0};
  cosched::testing::RecordingStore* recording_ = nullptr;  // inside store_
  std::unique_ptr<store::InstrumentedStore> store_;
  std::unique_ptr<TestState> state_;
};

TEST_F(ReportWritesTest, EnforcementAloneIsHeldShownAtOnceAndWrittenWhenDue) {
  state_->settings.set_enforcement_write_interval(absl::Hours(1));
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_PENDING, "", 2));
  const int first = writes_.load();
  EXPECT_EQ(Written("vm-1").state(), v1::ENFORCEMENT_STATE_PENDING);

  // The agent applied vm-1's assignment: nothing is written, and this csd
  // shows it.
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 3));
  EXPECT_EQ(writes_.load(), first);
  EXPECT_EQ(Shown("vm-1").state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_EQ(Shown("vm-1").applied_trust_group(), "default/vm/vm-1");
  EXPECT_EQ(Shown("vm-2").state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_EQ(Shown("vm-1").vcpus(), 2);
  EXPECT_GT(Shown("vm-1").report_time().seconds(), 0) << "csd's time of the held Report";
  EXPECT_EQ(AppliedShown(), 3);
  EXPECT_EQ(Written("vm-1").state(), v1::ENFORCEMENT_STATE_PENDING);
  EXPECT_EQ(state_->effects.reports().HeldHosts(), 1u);

  // The same again, and a later change of state alone: still held.
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 3));
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_FAIL_CLOSED, "default/vm/vm-1", 4));
  EXPECT_EQ(writes_.load(), first);
  EXPECT_EQ(Shown("vm-1").state(), v1::ENFORCEMENT_STATE_FAIL_CLOSED);
  EXPECT_EQ(AppliedShown(), 4);

  // Once the interval has passed (here: made zero), the host's next
  // Report writes what is held, once.
  state_->settings.set_enforcement_write_interval(absl::ZeroDuration());
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_FAIL_CLOSED, "default/vm/vm-1", 4));
  EXPECT_EQ(writes_.load(), first + 1);
  EXPECT_EQ(Written("vm-1").state(), v1::ENFORCEMENT_STATE_FAIL_CLOSED);
  EXPECT_EQ(state_->effects.reports().HeldHosts(), 0u);
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_FAIL_CLOSED, "default/vm/vm-1", 4));
  EXPECT_EQ(writes_.load(), first + 1);
}

// What is held is found by a VM's id or its UUID, whole, stamped with the
// time of the Report held; a VM the Report did not list is not held.
TEST(ReportMemoryTest, HeldEnforcementIsFoundByIdOrUuidWithTheReportsTime) {
  ReportMemory memory;
  v1::ReportRequest report;
  report.set_host_id("hv-1");
  for (int i = 0; i < 3; ++i) {
    v1::VMObservation* o = report.add_vms();
    o->set_vm_id("vm-" + std::to_string(i));
    if (i == 1) o->set_uuid("5e1f0000-0000-4000-8000-000000000001");
    o->mutable_enforcement()->set_state(v1::ENFORCEMENT_STATE_ENFORCED);
    o->mutable_enforcement()->set_applied_trust_group("t/vm/vm-" + std::to_string(i));
    o->mutable_enforcement()->add_vcpu_affinity(i);
    o->mutable_enforcement()->add_vcpu_affinity(i + 4);
  }
  const ReportDigest content{1}, written_state{2}, new_state{3};
  const absl::Time t0 = absl::FromUnixSeconds(1800000000);
  memory.Remember("hv-1", ReportMemory::Seen{content, written_state, 4, {}});
  ASSERT_EQ(memory.Judge(report, content, new_state, t0, absl::Hours(1)).verdict,
            ReportMemory::Verdict::kHold);

  std::optional<v1::VMEnforcement> by_uuid =
      memory.HeldEnforcement("hv-1", "5e1f0000-0000-4000-8000-000000000001");
  ASSERT_TRUE(by_uuid.has_value());
  EXPECT_EQ(by_uuid->applied_trust_group(), "t/vm/vm-1");
  EXPECT_EQ(by_uuid->vcpu_affinity_size(), 2);
  EXPECT_EQ(by_uuid->vcpu_affinity(1), 5);
  EXPECT_EQ(by_uuid->report_time().seconds(), 1800000000);
  std::optional<v1::VMEnforcement> by_id = memory.HeldEnforcement("hv-1", "vm-2");
  ASSERT_TRUE(by_id.has_value());
  EXPECT_EQ(by_id->applied_trust_group(), "t/vm/vm-2");
  EXPECT_FALSE(memory.HeldEnforcement("hv-1", "vm-9").has_value());
  EXPECT_FALSE(memory.HeldEnforcement("hv-2", "vm-1").has_value());
  // A VM without a UUID is not found by an empty one.
  EXPECT_FALSE(memory.HeldEnforcement("hv-1", "").has_value());
}

// A write that looked only at the VMs whose observations changed
// remembers its result only if the entry it started from is unchanged: a
// tag or an untag committed meanwhile makes the host's next Report a
// whole write instead.
TEST(ReportMemoryTest, AWriteOfTheChangesIsRememberedOnlyOverTheEntryItStartedFrom) {
  ReportMemory memory;
  v1::ReportRequest report;
  report.set_host_id("hv-1");
  const ReportDigest a{1}, b{2}, c{3}, state{9};
  const absl::Time now = absl::FromUnixSeconds(1800000000);
  EXPECT_EQ(memory.Judge(report, a, state, now, absl::ZeroDuration()).version, 0u);
  memory.Remember("hv-1", ReportMemory::Seen{a, state, 4, {{"vm-x", "uuid-x"}}});
  ReportMemory::Judged judged = memory.Judge(report, b, state, now, absl::ZeroDuration());
  ASSERT_EQ(judged.verdict, ReportMemory::Verdict::kWrite);
  ASSERT_NE(judged.version, 0u);
  EXPECT_EQ(judged.tagged_id.at("vm-x"), "uuid-x");
  memory.Remember("hv-1", ReportMemory::Seen{b, state, 4, judged.tagged_id}, judged.version);
  EXPECT_EQ(memory.Judge(report, b, state, now, absl::ZeroDuration()).verdict,
            ReportMemory::Verdict::kUnchanged);

  // A tag lands between the judgement and the write's end.
  judged = memory.Judge(report, c, state, now, absl::ZeroDuration());
  memory.Tagged("hv-1", "vm-y", "uuid-y");
  memory.Remember("hv-1", ReportMemory::Seen{c, state, 4, judged.tagged_id}, judged.version);
  judged = memory.Judge(report, c, state, now, absl::ZeroDuration());
  EXPECT_EQ(judged.verdict, ReportMemory::Verdict::kWrite);
  EXPECT_EQ(judged.version, 0u) << "nothing remembered: the next write is whole";
}

TEST_F(ReportWritesTest, AChangeOfWhatTheHostRunsIsWrittenAtOnceWithWhatWasHeld) {
  state_->settings.set_enforcement_write_interval(absl::Hours(1));
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_PENDING, "", 2));
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 3));
  const int held = writes_.load();
  // A new VM on the host: written at once, with vm-1's enforcement.
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 3, "vm-3"));
  EXPECT_EQ(writes_.load(), held + 1);
  EXPECT_EQ(Written("vm-1").state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_EQ(state_->effects.reports().HeldHosts(), 0u);
}

TEST_F(ReportWritesTest, WithNoIntervalEveryChangeIsWrittenAsItComes) {
  state_->settings.set_enforcement_write_interval(absl::ZeroDuration());
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_PENDING, "", 2));
  const int first = writes_.load();
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 3));
  EXPECT_EQ(writes_.load(), first + 1);
  EXPECT_EQ(Written("vm-1").state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_EQ(state_->effects.reports().HeldHosts(), 0u);
}

// Issue #36: one durable write per tag. The tag writes the VM's presence
// from what the host reported; the host's next Report, which says the
// agent enforces it, writes nothing. The same for an untag.
TEST_F(ReportWritesTest, ATagOfAReportedVmIsOneWriteAndSoIsAnUntag) {
  state_->settings.set_enforcement_write_interval(absl::Hours(1));
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 2, "vm-3"));
  const int before = writes_.load();
  v1::TagVMRequest tag;
  tag.set_vm_id("vm-3");
  absl::StatusOr<v1::TagVMResponse> tagged = Wait<v1::TagVMResponse>(
      [&](auto done) { state_->vms.TagVm(tag, kTester, std::move(done)); });
  ASSERT_OK(tagged);
  EXPECT_EQ(tagged->vm().host_id(), "hv-1");
  EXPECT_EQ(writes_.load(), before + 1);
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1",
                   tagged->vm().assignment().revision(), "vm-3"));
  EXPECT_EQ(writes_.load(), before + 1);

  v1::UntagVMRequest untag;
  untag.set_vm_id("vm-3");
  ASSERT_OK(Wait<v1::UntagVMResponse>(
      [&](auto done) { state_->vms.UntagVm(untag, kTester, std::move(done)); }));
  EXPECT_EQ(writes_.load(), before + 2);
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1",
                   tagged->vm().assignment().revision() + 1, "vm-3"));
  EXPECT_EQ(writes_.load(), before + 2);
}

// Issue #36: a Report that changes one VM writes that VM's records (its
// observation, and its presence when it is tagged) and nothing else: not
// the host's other observations, not the host record, whose liveness
// every replica has from memory.
TEST_F(ReportWritesTest, AReportThatChangesOneVmWritesThatVmsRecordsAndNothingElse) {
  recording_->TakeWrites();  // the registration and tags
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 2, "vm-3"));
  std::vector<std::vector<std::string>> first = recording_->TakeWrites();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_THAT(first[0], ::testing::IsSupersetOf({"PutObservation hv-1/vm-1",
                                                 "PutObservation hv-1/vm-2",
                                                 "PutObservation hv-1/vm-3", "PutHost hv-1"}));

  // vm-3, untagged, pauses.
  v1::ReportRequest paused = Request(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 3, "vm-3");
  paused.mutable_vms(2)->set_run_state(v1::VM_RUN_STATE_PAUSED);
  ASSERT_OK(Apply(paused));
  EXPECT_EQ(recording_->TakeWrites(),
            (std::vector<std::vector<std::string>>{{"PutObservation hv-1/vm-3"}}));

  // vm-2, tagged, pauses: its presence changes too.
  paused.mutable_vms(1)->set_run_state(v1::VM_RUN_STATE_PAUSED);
  ASSERT_OK(Apply(paused));
  EXPECT_EQ(recording_->TakeWrites(),
            (std::vector<std::vector<std::string>>{{"PutObservation hv-1/vm-2", "PutVm vm-2"}}));

  // vm-3 goes.
  paused.mutable_vms()->RemoveLast();
  ASSERT_OK(Apply(paused));
  EXPECT_EQ(recording_->TakeWrites(),
            (std::vector<std::vector<std::string>>{
                {"DeleteObservation hv-1/vm-3", "PutHost hv-1"}}))
      << "the host record counts its VMs";

  // The same Report again writes nothing.
  ASSERT_OK(Apply(paused));
  EXPECT_TRUE(recording_->TakeWrites().empty());

  // A restarted csd shows the host's liveness and applied revision as of
  // its last written record until the agent reports again.
  Open();
  EXPECT_EQ(AppliedShown(), 3);
  v1::GetHostRequest get;
  get.set_host_id("hv-1");
  absl::StatusOr<v1::Host> host = state_->hosts.GetHost(get);
  ASSERT_OK(host);
  EXPECT_LT(absl::Now() - absl::FromUnixSeconds(host->last_seen_time().seconds()),
            absl::Minutes(1));
}

// The write of a Report that changes one VM looks at that VM only, and at
// the VM it was tagged under before: a VM tagged by its UUID whose host
// now reports another UUID under the same name leaves the host.
TEST_F(ReportWritesTest, AVmWhoseReportedUuidChangesLeavesTheVmTaggedUnderTheOld) {
  v1::TagVMRequest tag;
  tag.set_vm_id("5e1f0000-0000-4000-8000-000000000005");
  ASSERT_OK(Wait<v1::TagVMResponse>(
      [&](auto done) { state_->vms.TagVm(tag, kTester, std::move(done)); }));
  v1::ReportRequest request = Request(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 2, "vm-5");
  request.mutable_vms(2)->set_uuid("5e1f0000-0000-4000-8000-000000000005");
  ASSERT_OK(Apply(request));
  v1::GetVMRequest get;
  get.set_vm_id("5e1f0000-0000-4000-8000-000000000005");
  absl::StatusOr<v1::VM> tagged = state_->vms.GetVm(get);
  ASSERT_OK(tagged);
  EXPECT_EQ(tagged->host_id(), "hv-1");
  recording_->TakeWrites();

  request.mutable_vms(2)->set_uuid("5e1f0000-0000-4000-8000-000000000006");
  ASSERT_OK(Apply(request));
  EXPECT_EQ(recording_->TakeWrites(),
            (std::vector<std::vector<std::string>>{
                {"PutObservation hv-1/vm-5",
                 // The host no longer receives its assignment.
                 "RecordChange hv-1/5e1f0000-0000-4000-8000-000000000005",
                 "PutVm 5e1f0000-0000-4000-8000-000000000005"}}));
  tagged = state_->vms.GetVm(get);
  ASSERT_OK(tagged);
  EXPECT_EQ(tagged->host_id(), "");
  EXPECT_EQ(tagged->presence_size(), 0);
}

// What was held dies with csd; the host's first Report to the restarted
// csd is written whole, so the store has it again within a report interval.
TEST_F(ReportWritesTest, ARestartedCsdWritesTheHostsFirstReportWhole) {
  state_->settings.set_enforcement_write_interval(absl::InfiniteDuration());
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_PENDING, "", 2));
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 3));
  EXPECT_EQ(Written("vm-1").state(), v1::ENFORCEMENT_STATE_PENDING);

  Open();
  state_->settings.set_enforcement_write_interval(absl::InfiniteDuration());
  EXPECT_EQ(Shown("vm-1").state(), v1::ENFORCEMENT_STATE_PENDING) << "the store's, until a Report";
  const int before = writes_.load();
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 3));
  EXPECT_EQ(writes_.load(), before + 1);
  EXPECT_EQ(Written("vm-1").state(), v1::ENFORCEMENT_STATE_ENFORCED);
  EXPECT_EQ(AppliedShown(), 3);
}

TEST_F(ReportWritesTest, ARemovedHostsHeldStateGoes) {
  state_->settings.set_enforcement_write_interval(absl::Hours(1));
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_PENDING, "", 2));
  ASSERT_OK(Report(v1::ENFORCEMENT_STATE_ENFORCED, "default/vm/vm-1", 3));
  ASSERT_EQ(state_->effects.reports().HeldHosts(), 1u);
  state_->effects.reports().Remove("hv-1");
  EXPECT_EQ(state_->effects.reports().HeldHosts(), 0u);
  EXPECT_EQ(Shown("vm-1").state(), v1::ENFORCEMENT_STATE_PENDING);
}

}  // namespace
}  // namespace cosched::server
