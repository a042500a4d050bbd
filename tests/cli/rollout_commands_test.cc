// csctl rollout start|status|pause|resume|abort|new-hosts, parsed as csctl parses its
// command line, against the fake control plane: what is sent, what is
// shown, and bad input refused before anything is sent (exit 2).
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cli/csctl_fixture.h"

namespace cosched::cli {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class RolloutCommandsTest : public CsctlFixture {
 protected:
  RolloutCommandsTest() {
    for (const char* id : {"hv-1", "hv-2"}) {
      v1::Host host;
      host.set_host_id(id);
      server_.service().PutHost(host);
    }
  }
};

TEST_F(RolloutCommandsTest, StartSendsStagesSoakAndSelectorAndShowsTheRollout) {
  ASSERT_EQ(Run({"rollout", "start", "--stages", "1%,10%,50%,100%", "--soak", "30m",
                 "--selector", "zone=a"}),
            kExitOk)
      << err_.str();
  ASSERT_EQ(server_.service().rollout_requests().size(), 1u);
  const v1::StartRolloutRequest sent = server_.service().rollout_requests()[0];
  EXPECT_THAT(std::vector<int>(sent.stage_percents().begin(), sent.stage_percents().end()),
              ElementsAre(1, 10, 50, 100));
  EXPECT_EQ(sent.soak_seconds(), 1800);
  EXPECT_EQ(sent.selector(), "zone=a");
  EXPECT_THAT(out_.str(), StartsWith("started rollout r-1: stage 1 enabled 1 host(s)\n"));
  EXPECT_THAT(out_.str(), HasSubstr("state:         running\n"));
  EXPECT_THAT(out_.str(), HasSubstr("stage:         1 of 4 (1%)\n"));
  EXPECT_THAT(out_.str(), HasSubstr("soak:          30m\n"));
  EXPECT_THAT(out_.str(), HasSubstr("next stage:    2027-01-15T08:30:00Z\n"));
  EXPECT_THAT(out_.str(), HasSubstr("enabled hosts: 1 (2 waiting host(s) match the selector; "
                                    "csctl hosts ls shows which)\n"));

  // Only one at a time: csd's refusal, as is.
  EXPECT_EQ(Run({"rollout", "start", "--stages", "50%", "--soak", "1h"}), kExitRpcError);
  EXPECT_THAT(err_.str(), HasSubstr("only one rollout runs at a time"));
}

TEST_F(RolloutCommandsTest, StatusAsJsonAndTheChanges) {
  EXPECT_EQ(Run({"rollout", "status"}), kExitRpcError);
  EXPECT_THAT(err_.str(), HasSubstr("no rollout was started"));
  ASSERT_EQ(Run({"rollout", "start", "--stages", "10%,100%", "--soak", "2h"}), kExitOk)
      << err_.str();
  ASSERT_EQ(Run({"rollout", "status", "-o", "json"}), kExitOk) << err_.str();
  json r = json::parse(out_.str());
  EXPECT_EQ(r["rollout_id"], "r-1");
  EXPECT_EQ(r["state"], "running");
  EXPECT_EQ(r["stages"], json::array({10, 100}));
  EXPECT_EQ(r["stage"], 1);
  EXPECT_EQ(r["stage_percent"], 10);
  EXPECT_EQ(r["soak_seconds"], 7200);
  EXPECT_EQ(r["enabled_count"], 1);
  EXPECT_EQ(r["carried_count"], 0);
  EXPECT_EQ(r["matching_hosts"], 2);
  EXPECT_EQ(r["next_stage_time"], "2027-01-15T10:00:00Z");
  EXPECT_EQ(r["halt_reason"], "");

  ASSERT_EQ(Run({"rollout", "pause", "--reason", "weekend"}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), StartsWith("rollout r-1 paused\n"));
  EXPECT_THAT(out_.str(), HasSubstr("next stage:    -\n"));
  ASSERT_EQ(Run({"rollout", "resume", "--id", "r-1"}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), StartsWith("rollout r-1 resumed\n"));
  ASSERT_EQ(Run({"rollout", "abort", "-o", "json"}), kExitOk) << err_.str();
  EXPECT_EQ(json::parse(out_.str())["state"], "aborted");
  const std::vector<v1::ChangeRolloutRequest> changes = server_.service().rollout_changes();
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0].reason(), "weekend");
  EXPECT_EQ(changes[1].rollout_id(), "r-1");
}

TEST_F(RolloutCommandsTest, BadInputIsAUsageErrorNamingTheFlagAndTheRule) {
  const struct {
    std::vector<std::string> args;
    const char* says;
  } cases[] = {
      {{"--stages", "10%,5%", "--soak", "30m"},
       "--stages[1] 5% must be more than the stage before it (10%): stages strictly increase"},
      {{"--stages", "10%,10%", "--soak", "30m"}, "stages strictly increase"},
      {{"--stages", "50%,120%", "--soak", "30m"}, "--stages[1] 120% must be 1% to 100%"},
      {{"--stages", "10,50", "--soak", "30m"},
       "--stages[0] '10' must be a whole percent of the form N%"},
      {{"--stages", "", "--soak", "30m"}, "--stages is empty"},
      {{"--stages", "10%", "--soak", "30"}, "--soak '30' must be a whole number and a unit"},
      {{"--stages", "10%", "--soak", "8d"}, "--soak 8d is out of range: 1s to 7d"},
      {{"--stages", "10%", "--soak", "1h", "--selector", "zone"}, "--selector"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"rollout", "start"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    EXPECT_EQ(Run(args), kExitUsage) << c.says;
    EXPECT_THAT(err_.str(), StartsWith("csctl: ")) << c.says;
    EXPECT_THAT(err_.str(), HasSubstr(c.says));
  }
  EXPECT_EQ(server_.service().calls(), 0);
  // What csctl cannot know (csd's least soak) csd refuses: exit 1.
  EXPECT_EQ(Run({"rollout", "start", "--stages", "10%", "--soak", "30s"}), kExitRpcError);
  EXPECT_THAT(err_.str(), HasSubstr("soak_seconds 30s is out of range"));
  // Both flags are required.
  EXPECT_EQ(Run({"rollout", "start", "--stages", "10%"}), kExitUsage);
}

TEST_F(RolloutCommandsTest, NewHostsSetsAndPrintsTheSettingAndRefusesOtherValues) {
  // Never set: the default, without asking anything of csd but the record.
  ASSERT_EQ(Run({"rollout", "new-hosts"}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("new hosts: enforce"));
  ASSERT_EQ(Run({"rollout", "new-hosts", "wait-for-rollout", "--reason", "staged"}), kExitOk)
      << err_.str();
  EXPECT_THAT(out_.str(), StartsWith("set: new hosts: wait-for-rollout"));
  ASSERT_EQ(Run({"rollout", "new-hosts"}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("new hosts: wait-for-rollout"));
  // No rollout was started: status says so, and what new hosts do.
  ASSERT_EQ(Run({"rollout", "status"}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("(none was started)"));
  ASSERT_EQ(Run({"rollout", "new-hosts", "-o", "json"}), kExitOk) << err_.str();
  EXPECT_EQ(json::parse(out_.str())["new_hosts"], "wait-for-rollout");
  const int calls = server_.service().calls();
  EXPECT_EQ(Run({"rollout", "new-hosts", "sometimes"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("new-hosts 'sometimes' must be enforce (the default) or "
                                    "wait-for-rollout"));
  EXPECT_EQ(server_.service().calls(), calls);
}

}  // namespace
}  // namespace cosched::cli
