// csd's options from its config file, and their checks at start: the
// listen address, the change log's and audit trail's retention (which a
// running csd applies to its store).
#include "absl/strings/str_cat.h"
#include "common/config_loader.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/daemon/csd_server.h"
#include "store/sqlite_store.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/trusted_plaintext.h"

namespace cosched::server {
namespace {

TEST(CsdOptions, AuditIsKeptAYearUnlessTheConfigSaysOtherwise) {
  v1::CsdConfig config;
  absl::Status loaded = LoadYamlConfigFile(
      std::string(COSCHED_DEPLOY_CONFIG_DIR) + "/csd.yaml", &config);
  ASSERT_OK(loaded);
  EXPECT_EQ(CsdOptionsFromConfig(config).audit_retention_days, 365);
  EXPECT_EQ(CsdOptionsFromConfig(v1::CsdConfig()).audit_retention_days, 365);
  config.set_audit_retention_days(-1);
  EXPECT_EQ(CsdOptionsFromConfig(config).audit_retention_days, -1);
  config.set_audit_retention_days(30);
  EXPECT_EQ(CsdOptionsFromConfig(config).audit_retention_days, 30);
}

TEST(CsdOptions, AnAuditRetentionOutOfRangeIsRefusedAtStartNamingTheKey) {
  for (int64_t days : {int64_t{0}, int64_t{-2}, kMaxAuditRetentionDays + 1}) {
    SCOPED_TRACE(days);
    cosched::testing::TempDir dir;
    CsdOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = dir.Sub("data");
    options.audit_retention_days = days;
    auto csd = CsdServer::Start(options);
    ASSERT_EQ(csd.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(csd.status().message().find("audit_retention_days must be -1"),
              std::string::npos)
        << csd.status();
  }
}

TEST(CsdOptions, TagFromMetadataIsOffUnlessTheConfigTurnsItOn) {
  v1::CsdConfig config;
  ASSERT_TRUE(LoadYamlConfigFile(std::string(COSCHED_DEPLOY_CONFIG_DIR) + "/csd.yaml",
                                 &config)
                  .ok());
  EXPECT_FALSE(CsdOptionsFromConfig(config).tag_from_metadata);
  ASSERT_TRUE(ParseYamlConfig("tag_from_metadata: true\n", "test", &config).ok());
  EXPECT_TRUE(CsdOptionsFromConfig(config).tag_from_metadata);
}

// Issue #32 item 10: with `insecure`, plaintext callers may be any machine
// on the network. Before, they were viewers by default and could be made
// admins.
TEST(CsdOptions, WithInsecurePlaintextCallersHaveNoRoleAndNoneAboveViewer) {
  v1::CsdConfig config;
  ASSERT_OK(ParseYamlConfig("insecure: true\n", "test", &config));
  EXPECT_EQ(CsdOptionsFromConfig(config).authz.plaintext_role, "none");
  EXPECT_OK(ValidateCsdOptions(CsdOptionsFromConfig(config)));
  ASSERT_OK(ParseYamlConfig("insecure: true\nplaintext_role: viewer\n", "test", &config));
  EXPECT_EQ(CsdOptionsFromConfig(config).authz.plaintext_role, "viewer");
  EXPECT_OK(ValidateCsdOptions(CsdOptionsFromConfig(config)));
  for (const char* role : {"operator", "admin"}) {
    ASSERT_OK(ParseYamlConfig(absl::StrCat("insecure: true\nplaintext_role: ", role, "\n"),
                              "test", &config));
    absl::Status refused = ValidateCsdOptions(CsdOptionsFromConfig(config));
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << role;
    EXPECT_NE(refused.message().find(absl::StrCat("plaintext_role '", role,
                                                  "' is refused with insecure")),
              std::string::npos)
        << refused;
  }
  // On loopback (no insecure) the default stays viewer.
  EXPECT_EQ(CsdOptionsFromConfig(v1::CsdConfig()).authz.plaintext_role, "viewer");
}

TEST(CsdOptions, EnforceIsAlwaysUnlessTheConfigSaysAndIsCheckedAtStart) {
  v1::CsdConfig config;
  ASSERT_TRUE(LoadYamlConfigFile(std::string(COSCHED_DEPLOY_CONFIG_DIR) + "/csd.yaml",
                                 &config)
                  .ok());
  EXPECT_EQ(CsdOptionsFromConfig(config).enforce, "always");
  ASSERT_TRUE(ParseYamlConfig("enforce: when-vulnerable\nwhen_vulnerable: [l1tf, mds]\n", "test",
                              &config)
                  .ok());
  EXPECT_EQ(CsdOptionsFromConfig(config).enforce, "when-vulnerable");
  EXPECT_EQ(CsdOptionsFromConfig(config).when_vulnerable,
            (std::vector<std::string>{"l1tf", "mds"}));
  EXPECT_OK(ValidateCsdOptions(CsdOptionsFromConfig(config)));
  // when-vulnerable without the operator's list is refused before anything
  // starts, naming the field.
  ASSERT_TRUE(ParseYamlConfig("enforce: when-vulnerable\n", "test", &config).ok());
  absl::Status unlisted = ValidateCsdOptions(CsdOptionsFromConfig(config));
  EXPECT_EQ(unlisted.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unlisted.message()), ::testing::HasSubstr("needs when_vulnerable"));

  cosched::testing::TempDir dir;
  CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = dir.Sub("data");
  options.enforce = "rarely";
  auto csd = CsdServer::Start(options);
  ASSERT_EQ(csd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(csd.status().message().find("enforce 'rarely' must be always"), std::string::npos)
      << csd.status();
}

TEST(CsdOptions, HostStaleAfterComesFromTheConfigAndIsChecked) {
  v1::CsdConfig config;
  ASSERT_TRUE(LoadYamlConfigFile(std::string(COSCHED_DEPLOY_CONFIG_DIR) + "/csd.yaml",
                                 &config)
                  .ok());
  EXPECT_EQ(CsdOptionsFromConfig(config).host_stale_after_s, 60);
  EXPECT_EQ(CsdOptionsFromConfig(v1::CsdConfig()).host_stale_after_s, 60);
  config.set_host_stale_after_s(300);
  EXPECT_EQ(CsdOptionsFromConfig(config).host_stale_after_s, 300);
  for (int64_t seconds : {int64_t{-1}, int64_t{86401}}) {
    SCOPED_TRACE(seconds);
    CsdOptions options;
    options.host_stale_after_s = seconds;
    absl::Status valid = ValidateCsdOptions(options);
    ASSERT_EQ(valid.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(valid.message().find("host_stale_after_s must be 1 to 86400"), std::string::npos)
        << valid;
  }
}

TEST(CsdOptions, EnforcementWriteIntervalIsAMinuteOnEtcdNeverOnSqliteAndBounded) {
  v1::CsdConfig config;
  ASSERT_TRUE(LoadYamlConfigFile(std::string(COSCHED_DEPLOY_CONFIG_DIR) + "/csd.yaml",
                                 &config)
                  .ok());
  CsdOptions options = CsdOptionsFromConfig(config);
  EXPECT_EQ(options.enforcement_write_interval_s, -1);
  EXPECT_EQ(EnforcementWriteInterval(options), absl::InfiniteDuration());
  options.etcd_store.emplace();
  EXPECT_EQ(EnforcementWriteInterval(options), absl::Seconds(60));
  // 0 is a value (write every change), not "unset".
  config.set_enforcement_write_interval_s(0);
  options = CsdOptionsFromConfig(config);
  EXPECT_EQ(EnforcementWriteInterval(options), absl::ZeroDuration());
  for (int64_t seconds : {int64_t{-2}, int64_t{3601}}) {
    SCOPED_TRACE(seconds);
    CsdOptions bad;
    bad.enforcement_write_interval_s = seconds;
    absl::Status valid = ValidateCsdOptions(bad);
    ASSERT_EQ(valid.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(valid.message().find("enforcement_write_interval_s must be 0 to 3600"),
              std::string::npos)
        << valid;
  }
}

TEST(CsdOptions, ABadListenAddressOrChangelogRetentionIsRefusedAtStart) {
  cosched::testing::TempDir dir;
  CsdOptions options;
  options.data_dir = dir.Sub("data");
  options.listen = "127.0.0.1:99999";
  auto csd = CsdServer::Start(options);
  ASSERT_EQ(csd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(csd.status().message().find("listen '127.0.0.1:99999'"), std::string::npos)
      << csd.status();
  v1::CsdConfig config;
  config.set_changelog_retention(-5);
  options = CsdOptionsFromConfig(config);
  options.listen = "127.0.0.1:0";
  options.data_dir = dir.Sub("data");
  csd = CsdServer::Start(options);
  ASSERT_EQ(csd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(csd.status().message().find("changelog_retention must be at least 1"),
            std::string::npos)
      << csd.status();
}

// A store with a record from 400 days ago; csd keeps 365 days by default,
// so its first change deletes that record and keeps its own.
TEST(CsdOptions, CsdDeletesAuditRecordsPastTheRetention) {
  cosched::testing::TempDir dir;
  {
    store::SqliteStoreOptions seed;
    seed.data_dir = dir.Sub("data");
    auto store = store::SqliteStore::Open(seed);
    ASSERT_OK(store);
    absl::Status appended = (*store)->WriteSync([](store::Transaction& txn) {
      v1::AuditRecord old;
      old.set_who("spiffe://cosched/user/gone");
      old.set_role("admin");
      old.set_method("TagVM");
      old.set_subject("vm-old");
      old.set_time_unix_ns(absl::ToUnixNanos(absl::Now() - absl::Hours(24 * 400)));
      return txn.AppendAudit(old);
    });
    ASSERT_OK(appended);
  }
  CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = dir.Sub("data");
  testing::TrustPlaintextCallers(options.authz);
  auto csd = CsdServer::Start(options);
  ASSERT_OK(csd);
  auto control = v1::ControlPlane::NewStub(
      grpc::CreateChannel((*csd)->address(), grpc::InsecureChannelCredentials()));

  auto list = [&] {
    grpc::ClientContext context;
    v1::ListAuditRecordsResponse response;
    grpc::Status status =
        control->ListAuditRecords(&context, v1::ListAuditRecordsRequest(), &response);
    EXPECT_OK(status) << status.error_message();
    std::vector<std::string> subjects;
    for (const v1::AuditRecord& r : response.records()) subjects.push_back(r.subject());
    return subjects;
  };
  EXPECT_EQ(list(), std::vector<std::string>{"vm-old"}) << "nothing is deleted before a write";

  grpc::ClientContext context;
  v1::TagVMRequest tag;
  tag.set_vm_id("vm-new");
  tag.set_tenant_id("acme");
  v1::TagVMResponse tagged;
  grpc::Status status = control->TagVM(&context, tag, &tagged);
  ASSERT_OK(status) << status.error_message();
  EXPECT_EQ(list(), std::vector<std::string>{"vm-new"});
}

// Issue #33 item 5: the engine and rollout blocks (and
// enforcement_write_interval_s) reload without a restart (audited with the
// rest), a restart-only setting is refused.
TEST(CsdOptions, AReloadAppliesTheEngineAndRolloutBlocks) {
  cosched::testing::TempDir dir;
  CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = dir.Sub("data");
  options.rollout.min_soak_s = 600;
  testing::TrustPlaintextCallers(options.authz);
  auto csd = CsdServer::Start(options);
  ASSERT_OK(csd);
  auto control = v1::ControlPlane::NewStub(
      grpc::CreateChannel((*csd)->address(), grpc::InsecureChannelCredentials()));
  auto start_rollout = [&] {
    grpc::ClientContext context;
    v1::StartRolloutRequest request;
    request.add_stage_percents(100);
    request.set_soak_seconds(120);
    v1::Rollout rollout;
    return control->StartRollout(&context, request, &rollout);
  };
  grpc::Status refused = start_rollout();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("soak_seconds"));

  CsdOptions next = options;
  next.rollout.min_soak_s = 60;
  next.engine.hysteresis.min_gain = 0.2;
  next.enforcement_write_interval_s = 5;
  absl::StatusOr<std::string> changed = (*csd)->Reload(next);
  ASSERT_OK(changed);
  EXPECT_EQ(*changed, "enforcement_write_interval_s, engine, rollout");
  // The soak now passes its check (no host waits, so the start fails on
  // that instead).
  grpc::Status after = start_rollout();
  EXPECT_THAT(after.error_message(), ::testing::Not(::testing::HasSubstr("soak_seconds")));
  {
    grpc::ClientContext context;
    v1::ListAuditRecordsRequest request;
    request.set_who("csd:reload");
    v1::ListAuditRecordsResponse response;
    ASSERT_OK(control->ListAuditRecords(&context, request, &response));
    ASSERT_EQ(response.records_size(), 1);
    EXPECT_EQ(response.records(0).method(), "ReloadConfig");
    EXPECT_THAT(response.records(0).reason(), ::testing::HasSubstr("engine, rollout"));
  }
  EXPECT_EQ((*csd)->Reload(next).value_or("?"), "") << "the same settings again change nothing";

  CsdOptions restart_only = next;
  restart_only.audit_retention_days = 30;
  restart_only.engine.hysteresis.min_gain = 0.5;
  absl::StatusOr<std::string> refused_reload = (*csd)->Reload(restart_only);
  EXPECT_EQ(refused_reload.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused_reload.status().message(), ::testing::HasSubstr("audit_retention_days"));
}

TEST(CsdOptions, TheEngineBlockComesFromTheConfigWithDefaults) {
  EngineOptions defaults = CsdOptionsFromConfig(v1::CsdConfig()).engine;
  EXPECT_EQ(defaults.replan_interval, std::chrono::seconds(60));
  EXPECT_EQ(defaults.hysteresis.min_gain, 0.03);
  EXPECT_EQ(defaults.hysteresis.min_dwell, std::chrono::seconds(600));
  EXPECT_EQ(defaults.hysteresis.max_changes_per_hour, 4);
  EXPECT_EQ(defaults.budget.windows, 3);
  EXPECT_EQ(defaults.predict_s, 1);
  EXPECT_EQ(defaults.screen_s, 0.35);
  EXPECT_EQ(defaults.planner_threads, DefaultPlannerThreads());
  EXPECT_GE(defaults.planner_threads, 1);
  EXPECT_OK(ValidateEngineOptions(defaults));

  v1::CsdConfig config;
  ASSERT_OK(ParseYamlConfig("engine:\n  replan_interval_s: 30\n  min_gain: 0\n"
                            "  min_dwell_s: 0\n  max_changes_per_hour: 10\n"
                            "  budget_windows: 5\n  planner_threads: 3\n  predict_s: 0.5\n"
                            "  screen_s: 0\n",
                            "csd.yaml", &config));
  EngineOptions set = CsdOptionsFromConfig(config).engine;
  EXPECT_EQ(set.replan_interval, std::chrono::seconds(30));
  EXPECT_EQ(set.hysteresis.min_gain, 0);
  EXPECT_EQ(set.hysteresis.min_dwell, std::chrono::seconds(0));
  EXPECT_EQ(set.hysteresis.max_changes_per_hour, 10);
  EXPECT_EQ(set.budget.windows, 5);
  EXPECT_EQ(set.planner_threads, 3);
  EXPECT_EQ(set.predict_s, 0.5);
  EXPECT_EQ(set.screen_s, 0);
  EXPECT_OK(ValidateCsdOptions(CsdOptionsFromConfig(config)));
}

TEST(CsdOptions, AnEngineSettingOutOfRangeIsRefusedNamingTheFieldAndTheRule) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"replan_interval_s: 5", "engine.replan_interval_s must be 10 to 86400 seconds"},
      {"replan_interval_s: 86401", "engine.replan_interval_s must be 10 to 86400 seconds"},
      {"min_gain: 1.5", "engine.min_gain must be between 0 and 1"},
      {"min_gain: -0.1", "engine.min_gain must be between 0 and 1"},
      {"min_dwell_s: -1", "engine.min_dwell_s must be 0 to 86400 seconds"},
      {"max_changes_per_hour: 0", "engine.max_changes_per_hour must be between 1 and 60"},
      {"max_changes_per_hour: 61", "engine.max_changes_per_hour must be between 1 and 60"},
      {"budget_windows: 0", "engine.budget_windows must be between 1 and 100"},
      {"planner_threads: 0", "engine.planner_threads must be 1 to 64"},
      {"planner_threads: 65", "engine.planner_threads must be 1 to 64"},
      {"predict_s: 0.1", "engine.predict_s must be 0.25 to 10 simulated seconds"},
      {"predict_s: 11", "engine.predict_s must be 0.25 to 10 simulated seconds"},
      {"screen_s: 0.1", "engine.screen_s must be 0 (off) or 0.25 to 10 simulated seconds"},
      {"screen_s: -1", "engine.screen_s must be 0 (off) or 0.25 to 10 simulated seconds"},
      {"screen_s: 10.5", "engine.screen_s must be 0 (off) or 0.25 to 10 simulated seconds"},
  };
  for (const auto& [yaml, message] : cases) {
    SCOPED_TRACE(yaml);
    v1::CsdConfig config;
    ASSERT_OK(ParseYamlConfig("engine:\n  " + yaml + "\n", "csd.yaml", &config));
    absl::Status valid = ValidateCsdOptions(CsdOptionsFromConfig(config));
    EXPECT_EQ(valid.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(valid.message().find(message), std::string::npos) << valid;
  }
}

// Set by the engine's benchmark only (not in csd.yaml), still checked.
TEST(CsdOptions, PredictionReuseBoundsOutsideZeroToOneAreRefused) {
  EngineOptions options;
  EXPECT_OK(ValidateEngineOptions(options));
  options.reuse_vm_load_move = 0;
  options.reuse_host_load_share = 0;
  EXPECT_OK(ValidateEngineOptions(options));
  options.reuse_vm_load_move = 1.5;
  absl::Status valid = ValidateEngineOptions(options);
  EXPECT_EQ(valid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(valid.message().find("engine.reuse_vm_load_move must be 0 to 1, got 1.5"),
            std::string::npos)
      << valid;
  options.reuse_vm_load_move = 0.1;
  options.reuse_host_load_share = -0.01;
  valid = ValidateEngineOptions(options);
  EXPECT_NE(valid.message().find("engine.reuse_host_load_share must be 0 to 1"),
            std::string::npos)
      << valid;
}

}  // namespace
}  // namespace cosched::server
