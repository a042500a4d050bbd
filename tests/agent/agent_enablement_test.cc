// What csd says of cookies on the host and what the agent does with it, and
// the agent's own settings changing under it: a waived host, a first start
// that waits for csd's first answer, a reload of cs-agent.yaml.
#include <chrono>
#include <string>
#include <thread>

#include "agent/agent.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent/agent_fixture.h"
#include "tests/agent/fake_csd.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::agent {
namespace {

using ::testing::HasSubstr;
using agent_testing::AgentTest;
using agent_testing::TaggedVm;
using testing::FakeCsd;
using testing::MakeAssignment;
using testing::MakeSnapshot;
using cosched::testing::TempDir;
using namespace std::chrono_literals;

// csd waives cookies on the host: the agent writes none, reports its VMs
// waived, and remembers it across a restart while csd is away.
TEST_F(AgentTest, WaivedFromCsdStopsCookiesAndOutlivesARestart) {
  discovery_->SetVms({TaggedVm(*kernel_, 0)});
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  v1::HostEnablement waived;
  waived.set_state(v1::HostEnablement::STATE_WAIVED);
  waived.set_reason("enforce: when-vulnerable waives cookies on this host: its CPUs report not affected by l1tf, mds");
  csd.service().SetEnablement(waived);
  auto reported_waived = [&] {
    return csd.service().WaitFor([&] {
      const auto& reports = csd.service().reports_locked();
      return !reports.empty() && reports.back().vms_size() == 1 &&
             reports.back().vms(0).enforcement().state() == v1::ENFORCEMENT_STATE_WAIVED;
    });
  };
  {
    Agent agent(Options(csd.address()));
    ASSERT_OK(agent.Start());
    ASSERT_TRUE(reported_waived());
    // Whatever the first pass did before csd answered, no write after.
    const int writes = kernel_->write_calls();
    agent.TriggerReconcile();
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(kernel_->write_calls(), writes);
    agent.Stop();
  }
  // Restarted with csd away: the kept answer holds from the first pass.
  discovery_->SetVms({TaggedVm(*kernel_, 0)});  // its threads hold no cookie again
  kernel_->ResetCallCounts();
  {
    Agent agent(Options("127.0.0.1:1"));
    ASSERT_OK(agent.Start());
    agent.TriggerReconcile();
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(kernel_->write_calls(), 0);
    EXPECT_EQ(kernel_->CookieOf(100), 0u);
    agent.Stop();
  }
  // csd says enforce again: the VM gets its cookie.
  csd.service().SetEnablement(v1::HostEnablement());
  Agent agent(Options(csd.address()));
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(csd.service().WaitFor([&] {
    const auto& reports = csd.service().reports_locked();
    return !reports.empty() && reports.back().vms_size() == 1 &&
           reports.back().vms(0).enforcement().state() == v1::ENFORCEMENT_STATE_FAIL_CLOSED;
  }));
  EXPECT_NE(kernel_->CookieOf(100), 0u);
}

// Issue #33 item 3: a first start (nothing kept) makes no cookie until csd
// has answered. A host csd holds for a staged rollout is never tagged, not
// even before its first Register is answered; with csd away the agent
// enforces once the wait is over.
TEST_F(AgentTest, AFirstStartMakesNoCookieUntilCsdAnswers) {
  discovery_->SetVms({TaggedVm(*kernel_, 0)});
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  v1::HostEnablement held;
  held.set_state(v1::HostEnablement::STATE_NOT_ENABLED);
  held.set_reason("rollout r-1 has not enabled this host yet");
  csd.service().SetEnablement(held);
  {
    AgentOptions options = Options(csd.address());
    options.first_answer_wait = 10s;
    options.loop.rescan_interval = 50ms;
    Agent agent(options);
    ASSERT_OK(agent.Start());
    ASSERT_TRUE(csd.service().WaitFor([&] {
      const auto& reports = csd.service().reports_locked();
      return !reports.empty() && reports.back().vms_size() == 1 &&
             reports.back().vms(0).enforcement().state() == v1::ENFORCEMENT_STATE_NOT_ENABLED;
    }));
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(kernel_->write_calls(), 0) << "a held host's first start wrote a cookie";
    EXPECT_EQ(kernel_->CookieOf(100), 0u);
    agent.Stop();
  }

  // csd away at a first start: nothing for the wait, then fail closed.
  TempDir fresh;
  AgentOptions options = Options("127.0.0.1:1");
  options.state_dir = fresh.path() + "/state";
  options.first_answer_wait = 500ms;
  options.loop.rescan_interval = 50ms;
  Agent agent(options);
  const auto started = std::chrono::steady_clock::now();
  ASSERT_OK(agent.Start());
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(kernel_->CookieOf(100), 0u) << "the first start did not wait for csd";
  while (kernel_->CookieOf(100) == 0 && std::chrono::steady_clock::now() - started < 10s) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(kernel_->CookieOf(100), 0u) << "no fail-closed cookie once the wait was over";
  EXPECT_GE(std::chrono::steady_clock::now() - started, 500ms);
  agent.Stop();
}

// Issue #33 item 5: a reload applies the hazard rules, the fail-open policy
// and the labels at once, without a restart; a setting that needs a restart
// is refused and nothing of the reload applies.
TEST_F(AgentTest, AReloadAppliesHazardRulesAndLabelsAndRefusesRestartOnlySettings) {
  host_fs_->SetFile("/sys/kernel/sched_ext/state", "enabled\n");
  discovery_->SetVms({TaggedVm(*kernel_, 0)});
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  csd.service().Push(MakeSnapshot(1, {MakeAssignment("vm-1", "g1", 1)}));
  AgentOptions options = Options(csd.address());
  options.labels = {{"zone", "a"}};
  options.hazard_poll = 50ms;
  Agent agent(options);
  ASSERT_OK(agent.Start());
  auto reported = [&](v1::EnforcementState state) {
    return csd.service().WaitFor([&] {
      const auto& reports = csd.service().reports_locked();
      return !reports.empty() && reports.back().vms_size() == 1 &&
             reports.back().vms(0).enforcement().state() == state;
    });
  };
  ASSERT_TRUE(reported(v1::ENFORCEMENT_STATE_HELD));
  EXPECT_EQ(kernel_->CookieOf(100), 0u);

  // The state dir needs a restart: refused whole, the allowed hazard too.
  AgentOptions moved = options;
  moved.state_dir = dir_.path() + "/elsewhere";
  moved.allow_hazards = {"sched_ext"};
  absl::StatusOr<std::string> refused = agent.Reload(moved);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("the file changes state_dir, which take effect only at a restart"));
  agent.TriggerReconcile();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(kernel_->CookieOf(100), 0u) << "a refused reload allowed sched_ext";
  const int registers = static_cast<int>(csd.service().registers().size());

  AgentOptions next = options;
  next.allow_hazards = {"sched_ext"};
  next.labels = {{"zone", "b"}};
  absl::StatusOr<std::string> changed = agent.Reload(next);
  ASSERT_OK(changed);
  EXPECT_EQ(*changed, "allow_hazards, labels");
  // Tagging resumes under the new rules, and csd hears the new labels from
  // a Register of their own.
  ASSERT_TRUE(reported(v1::ENFORCEMENT_STATE_ENFORCED));
  EXPECT_NE(kernel_->CookieOf(100), 0u);
  ASSERT_TRUE(csd.service().WaitFor([&] {
    const auto& sent = csd.service().registers_locked();
    return static_cast<int>(sent.size()) > registers && sent.back().labels().at("zone") == "b";
  }));
  // The same file again changes nothing.
  changed = agent.Reload(next);
  ASSERT_OK(changed);
  EXPECT_EQ(*changed, "");
  agent.Stop();
}

// Issue #33 item 3: an agent that observes (enforce: observe) writes no
// cookie, tells csd at Register that it observes, and reports what
// enforcing would reach; a reload to on enforces without a restart, and
// csd hears of it from a Register of its own.
TEST_F(AgentTest, AnObservingAgentWritesNothingUntilAReloadTurnsItOn) {
  discovery_->SetVms({TaggedVm(*kernel_, 0)});
  FakeCsd csd;
  ASSERT_TRUE(csd.ok());
  csd.service().Push(MakeSnapshot(1, {MakeAssignment("vm-1", "g1", 1)}));
  AgentOptions options = Options(csd.address());
  options.reconciler.observe = true;
  Agent agent(options);
  kernel_->ResetCallCounts();
  ASSERT_OK(agent.Start());
  auto last_report = [&](auto fits) {
    return csd.service().WaitFor([&] {
      const auto& reports = csd.service().reports_locked();
      return !reports.empty() && reports.back().vms_size() == 1 && fits(reports.back().vms(0));
    });
  };
  ASSERT_TRUE(last_report([](const v1::VMObservation& vm) {
    return vm.enforcement().state() == v1::ENFORCEMENT_STATE_OBSERVED &&
           vm.enforcement().observed_state() == v1::ENFORCEMENT_STATE_ENFORCED &&
           vm.enforcement().applied_trust_group() == "g1";
  }));
  agent.TriggerReconcile();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(kernel_->write_calls(), 0);
  EXPECT_EQ(kernel_->CookieOf(100), 0u);
  ASSERT_FALSE(csd.service().registers().empty());
  EXPECT_TRUE(csd.service().registers().back().observe());
  const int registers = static_cast<int>(csd.service().registers().size());

  AgentOptions on = options;
  on.reconciler.observe = false;
  absl::StatusOr<std::string> changed = agent.Reload(on);
  ASSERT_OK(changed);
  EXPECT_EQ(*changed, "enforce (now on)");
  ASSERT_TRUE(last_report([](const v1::VMObservation& vm) {
    return vm.enforcement().state() == v1::ENFORCEMENT_STATE_ENFORCED;
  }));
  EXPECT_NE(kernel_->CookieOf(100), 0u);
  ASSERT_TRUE(csd.service().WaitFor([&] {
    const auto& sent = csd.service().registers_locked();
    return static_cast<int>(sent.size()) > registers && !sent.back().observe();
  }));
  agent.Stop();
}

}  // namespace
}  // namespace cosched::agent
