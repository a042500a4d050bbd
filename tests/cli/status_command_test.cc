// csctl status, parsed as csctl parses its command line, against the fake
// control plane: the table and JSON of csd's replicas, and exit 3 with each
// problem named when something is wrong.
#include <string>
#include <vector>

#include "cli/commands.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/cli/csctl_fixture.h"

namespace cosched::cli {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

class StatusCommandTest : public CsctlFixture {
 protected:
  static v1::ReplicaStatus Replica(const std::string& name, bool leader) {
    v1::ReplicaStatus r;
    r.set_name(name);
    r.set_address(name + ".example:7443");
    r.set_version("0.2.0~git20261207.1.abc");
    r.set_leader(leader);
    r.set_store("etcd");
    r.set_store_reachable(true);
    r.set_revision(4711);
    r.set_agents_connected(12);
    r.mutable_started_time()->set_seconds(1800000000);
    return r;
  }

};

TEST_F(StatusCommandTest, HealthyReplicasAreATableAndExitZero) {
  v1::GetStatusResponse status;
  *status.add_replicas() = Replica("csd-a", false);
  *status.add_replicas() = Replica("csd-b", true);
  server_.service().SetStatus(status);
  ASSERT_EQ(Run({"status"}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("REPLICA"));
  EXPECT_THAT(out_.str(), HasSubstr("csd-b"));
  EXPECT_THAT(out_.str(), HasSubstr("csd-a.example:7443"));
  EXPECT_THAT(out_.str(), HasSubstr("0.2.0~git20261207.1.abc"));
  EXPECT_THAT(out_.str(), HasSubstr("4711"));
  EXPECT_THAT(out_.str(), HasSubstr("\nhealthy\n"));

  ASSERT_EQ(Run({"status", "-o", "json"}), kExitOk) << err_.str();
  const json j = json::parse(out_.str());
  EXPECT_EQ(j["healthy"], true);
  EXPECT_EQ(j["problems"], json::array());
  ASSERT_EQ(j["replicas"].size(), 2u);
  EXPECT_EQ(j["replicas"][1]["name"], "csd-b");
  EXPECT_EQ(j["replicas"][1]["leader"], true);
  EXPECT_EQ(j["replicas"][1]["agents_connected"], 12);
  EXPECT_EQ(j["replicas"][0]["started_time"], "2027-01-15T08:00:00Z");
}

TEST_F(StatusCommandTest, EachProblemIsNamedAndExitsThree) {
  v1::GetStatusResponse status;
  *status.add_replicas() = Replica("csd-a", false);
  v1::ReplicaStatus cut_off = Replica("csd-b", false);
  cut_off.set_store_reachable(false);
  cut_off.set_store_problem("etcd at 10.0.0.9:2379: connection refused");
  *status.add_replicas() = cut_off;
  v1::ReplicaStatus silent;
  silent.set_name("csd-c");
  silent.set_address("csd-c.example:7443");
  silent.set_unreachable("at csd-c.example:7443: no answer within 2s");
  *status.add_replicas() = silent;
  server_.service().SetStatus(status);
  EXPECT_EQ(Run({"status"}), kExitUnhealthy);
  EXPECT_THAT(out_.str(), Not(HasSubstr("\nhealthy")));
  EXPECT_THAT(out_.str(),
              HasSubstr("problem: replica csd-b cannot reach its store (etcd: etcd at "
                        "10.0.0.9:2379: connection refused)"));
  EXPECT_THAT(out_.str(), HasSubstr("problem: replica csd-c could not be asked: at "
                                    "csd-c.example:7443: no answer within 2s"));
  // csd-c may be the leader: no replica answered that it leads, but that
  // is not "none leads".
  EXPECT_THAT(out_.str(), Not(HasSubstr("no replica leads")));

  // Every replica answered, none leads.
  status.mutable_replicas()->RemoveLast();
  status.mutable_replicas(1)->set_store_reachable(true);
  server_.service().SetStatus(status);
  EXPECT_EQ(Run({"status", "-o", "json"}), kExitUnhealthy);
  const json j = json::parse(out_.str());
  EXPECT_EQ(j["healthy"], false);
  EXPECT_EQ(j["problems"],
            json::array({"no replica leads: the engine, rollouts and maintenance do not run"}));
}

}  // namespace
}  // namespace cosched::cli
