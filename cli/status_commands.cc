// csctl status: csd's own health, replica by replica (GetStatus).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "google/protobuf/util/time_util.h"
#include "nlohmann/json.hpp"

namespace cosched::cli {
namespace {

using google::protobuf::util::TimeUtil;
using nlohmann::json;

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

// What is wrong in `status`, one sentence each; empty when nothing is.
std::vector<std::string> Problems(const v1::GetStatusResponse& status) {
  std::vector<std::string> problems;
  int leaders = 0;
  for (const v1::ReplicaStatus& r : status.replicas()) {
    const std::string name = r.name().empty() ? "csd" : absl::StrCat("replica ", r.name());
    if (!r.unreachable().empty()) {
      problems.push_back(absl::StrCat(name, " could not be asked: ", r.unreachable()));
      continue;
    }
    if (r.leader()) ++leaders;
    if (!r.store_reachable()) {
      problems.push_back(absl::StrCat(name, " cannot reach its store (", r.store(),
                                      r.store_problem().empty() ? "" : ": ", r.store_problem(),
                                      ")"));
    }
  }
  // A replica that could not be asked may be the leader: only a count
  // over every replica says there is none, or more than one.
  const bool all_answered =
      std::all_of(status.replicas().begin(), status.replicas().end(),
                  [](const v1::ReplicaStatus& r) { return r.unreachable().empty(); });
  if (leaders > 1) {
    problems.push_back(absl::StrCat(leaders, " replicas say they lead"));
  } else if (leaders == 0 && all_answered) {
    problems.push_back("no replica leads: the engine, rollouts and maintenance do not run");
  }
  return problems;
}

json ReplicaToJson(const v1::ReplicaStatus& r) {
  return {
      {"name", r.name()},
      {"address", r.address()},
      {"version", r.version()},
      {"leader", r.leader()},
      {"store", r.store()},
      {"store_reachable", r.store_reachable()},
      {"store_problem", r.store_problem()},
      {"revision", r.revision()},
      {"agents_connected", r.agents_connected()},
      {"started_time", r.has_started_time() ? json(TimeUtil::ToString(r.started_time()))
                                            : json(nullptr)},
      {"unreachable", r.unreachable()},
  };
}

}  // namespace

int RunStatus(Stub& stub, const CommandOptions& options, std::ostream& out, std::ostream& err) {
  v1::GetStatusResponse status;
  grpc::Status answer = stub.GetStatus(MakeContext(options).get(), v1::GetStatusRequest(), &status);
  if (!answer.ok()) return RpcError(answer, options, "csd's status", err);
  const std::vector<std::string> problems = Problems(status);
  if (options.format == OutputFormat::kJson) {
    json replicas = json::array();
    for (const v1::ReplicaStatus& r : status.replicas()) replicas.push_back(ReplicaToJson(r));
    PrintJson({{"healthy", problems.empty()}, {"problems", problems}, {"replicas", replicas}},
              out);
  } else {
    TextTable table({"REPLICA", "ADDRESS", "VERSION", "LEADER", "STORE", "REVISION", "AGENTS",
                     "STARTED"});
    for (const v1::ReplicaStatus& r : status.replicas()) {
      if (!r.unreachable().empty()) {
        table.AddRow({r.name(), OrDash(r.address()), "?", "?", "unreachable", "?", "?", "?"});
        continue;
      }
      table.AddRow({OrDash(r.name()), OrDash(r.address()), OrDash(r.version()),
                    r.leader() ? "yes" : "no",
                    absl::StrCat(r.store(), r.store_reachable() ? "" : " (unreachable)"),
                    absl::StrCat(r.revision()), absl::StrCat(r.agents_connected()),
                    r.has_started_time() ? TimeUtil::ToString(r.started_time()) : "-"});
    }
    table.Print(out);
    out << (problems.empty() ? "healthy\n" : "");
    for (const std::string& p : problems) out << "problem: " << p << "\n";
  }
  return problems.empty() ? kExitOk : kExitUnhealthy;
}

}  // namespace cosched::cli
