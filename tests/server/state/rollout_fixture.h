// RolloutControl over the desired state on SQLite, with a clock of the
// test's own for the soak: the fixture of the rollout tests and the off
// switch's.
#ifndef COSCHED_TESTS_SERVER_STATE_ROLLOUT_FIXTURE_H_
#define COSCHED_TESTS_SERVER_STATE_ROLLOUT_FIXTURE_H_

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/state/rollout_control.h"
#include "tests/server/state_testing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {

// RolloutControl over the desired state with `hosts` registered (hv-0 ...,
// the even ones labelled zone=a, the odd ones zone=b).
class RolloutControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(sqlite_.state(), nullptr);
    RolloutOptions options;
    options.min_soak_s = 60;
    options.no_report_halt = std::chrono::seconds(3600);
    TestState& state = *sqlite_.state();
    control_ = std::make_unique<RolloutControl>(state.store, state.rollout, state.host_status,
                                                state.placement, options,
                                                [this] { return now_; });
    // A fleet whose enforcement is turned on in stages: its hosts wait.
    if (HostsWait()) {
      ASSERT_OK(SetNewHosts(v1::NEW_HOSTS_WAIT_FOR_ROLLOUT));
    }
    for (int i = 0; i < 20; ++i) ASSERT_OK(Register(absl::StrCat("hv-", i)));
  }

  virtual bool HostsWait() const { return true; }

  absl::StatusOr<v1::Rollout> SetNewHosts(v1::NewHosts value) {
    v1::SetNewHostsRequest request;
    request.set_new_hosts(value);
    return testing::Wait<v1::Rollout>([&](auto done) {
      control_->SetNewHosts(request, Actor{"alice", "admin"}, std::move(done));
    });
  }

  absl::StatusOr<v1::RegisterResponse> Register(const std::string& host) {
    v1::RegisterRequest request;
    request.set_host_id(host);
    auto* core = request.mutable_topology()->add_cores();
    core->add_cpus(0);
    core->add_cpus(1);
    const int n = std::stoi(host.substr(3));
    (*request.mutable_labels())["zone"] = n % 2 == 0 ? "a" : "b";
    return testing::Wait<v1::RegisterResponse>([&](auto done) {
      sqlite_.state()->hosts.RegisterHost(request, Actor{host, "host"}, std::move(done));
    });
  }

  absl::StatusOr<v1::Rollout> Start(std::vector<int> percents, int64_t soak,
                                    std::string selector = "") {
    v1::StartRolloutRequest request;
    for (int p : percents) request.add_stage_percents(p);
    request.set_soak_seconds(soak);
    request.set_selector(std::move(selector));
    return testing::Wait<v1::Rollout>([&](auto done) {
      control_->StartRollout(request, Actor{"alice", "admin"}, std::move(done));
    });
  }

  absl::StatusOr<v1::Rollout> Change(RolloutControl::Change change) {
    return testing::Wait<v1::Rollout>([&](auto done) {
      control_->ChangeRollout(change, v1::ChangeRolloutRequest(), Actor{"alice", "admin"},
                              std::move(done));
    });
  }

  v1::HostEnablement::State EnablementOfHost(const std::string& host) {
    v1::GetHostRequest get;
    get.set_host_id(host);
    absl::StatusOr<v1::Host> h = sqlite_.state()->hosts.GetHost(get);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? h->enablement().state() : v1::HostEnablement::STATE_UNSPECIFIED;
  }

  // The hosts whose record says `rollout_id` enabled them, sorted, as the
  // store has them.
  std::vector<std::string> EnabledBy(const std::string& rollout_id) {
    std::vector<std::string> hosts;
    absl::Status read = sqlite_.state()->store.Read([&](store::Transaction& txn) {
      store::Page page;
      page.limit = 1000;
      absl::StatusOr<std::vector<v1::Host>> all = txn.ListHosts(page);
      if (!all.ok()) return all.status();
      for (const v1::Host& h : *all) {
        if (h.enabled_by_rollout() == rollout_id) hosts.push_back(h.host_id());
      }
      return absl::OkStatus();
    });
    EXPECT_TRUE(read.ok()) << read;
    std::sort(hosts.begin(), hosts.end());
    return hosts;
  }

  // The methods of the audit records whose method names a rollout, oldest
  // first.
  std::vector<std::string> AuditMethods(absl::string_view about = "Rollout") {
    v1::ListAuditRecordsRequest request;
    request.set_page_size(100);
    absl::StatusOr<v1::ListAuditRecordsResponse> records =
        sqlite_.state()->audit.ListAuditRecords(request);
    EXPECT_TRUE(records.ok()) << records.status();
    std::vector<std::string> methods;
    if (!records.ok()) return methods;
    for (const v1::AuditRecord& r : records->records()) {
      if (absl::StrContains(r.method(), about)) methods.insert(methods.begin(), r.method());
    }
    return methods;
  }

  cosched::testing::TempDir dir_;
  testing::SqliteTestState sqlite_{dir_.Sub("data")};
  absl::Time now_ = absl::FromUnixSeconds(1800000000);
  std::unique_ptr<RolloutControl> control_;
};

}  // namespace cosched::server

#endif  // COSCHED_TESTS_SERVER_STATE_ROLLOUT_FIXTURE_H_
