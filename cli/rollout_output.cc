#include "cli/rollout_output.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/output.h"
#include "common/names.h"
#include "common/rollout_spec.h"
#include "google/protobuf/util/time_util.h"

namespace cosched::cli {
namespace {

using google::protobuf::util::TimeUtil;

nlohmann::json TimeJson(bool present, const google::protobuf::Timestamp& ts) {
  if (!present) return nullptr;
  return TimeUtil::ToString(ts);
}

std::string TimeText(bool present, const google::protobuf::Timestamp& ts) {
  return present ? TimeUtil::ToString(ts) : "-";
}

// When the next stage may begin: the current one's start and its soak.
// Only a running rollout with a stage (or the finish) to come has one.
std::optional<google::protobuf::Timestamp> NextStageTime(const v1::Rollout& r) {
  if (r.state() != v1::Rollout::STATE_RUNNING || !r.has_stage_started_time()) return std::nullopt;
  return TimeUtil::SecondsToTimestamp(TimeUtil::TimestampToSeconds(r.stage_started_time()) +
                                      r.soak_seconds());
}

int StagePercent(const v1::Rollout& r) {
  return r.stage() >= 0 && r.stage() < r.stage_percents_size() ? r.stage_percents(r.stage()) : 0;
}

}  // namespace

nlohmann::json RolloutToJson(const v1::Rollout& r) {
  const std::optional<google::protobuf::Timestamp> next = NextStageTime(r);
  return {
      {"new_hosts", NewHostsName(r.new_hosts())},
      {"rollout_id", r.rollout_id()},
      {"state", RolloutStateName(r.state())},
      {"selector", r.selector()},
      {"stages", std::vector<int>(r.stage_percents().begin(), r.stage_percents().end())},
      {"stage", r.stage() + 1},
      {"stage_percent", StagePercent(r)},
      {"soak_seconds", r.soak_seconds()},
      {"stage_started_time", TimeJson(r.has_stage_started_time(), r.stage_started_time())},
      {"next_stage_time", next ? TimeJson(true, *next) : nlohmann::json(nullptr)},
      {"enabled_count", r.enabled_count()},
      {"carried_count", r.carried_count()},
      {"matching_hosts", r.matching_hosts()},
      {"halt_reason", r.halt_reason()},
      {"halted_host", r.halted_host()},
      {"started_time", TimeJson(r.has_started_time(), r.started_time())},
      {"updated_time", TimeJson(r.has_updated_time(), r.updated_time())},
      {"started_by", r.started_by()},
  };
}

void PrintRollout(const v1::Rollout& r, std::ostream& out) {
  if (r.rollout_id().empty()) {
    PrintFields({{"rollout", "(none was started)"}, {"new hosts", NewHostsName(r.new_hosts())}},
                out);
    return;
  }
  const std::optional<google::protobuf::Timestamp> next = NextStageTime(r);
  std::vector<std::string> stages;
  for (int percent : r.stage_percents()) stages.push_back(absl::StrCat(percent, "%"));
  Fields fields = {
      {"rollout", r.rollout_id()},
      {"state", RolloutStateName(r.state())},
      {"selector", r.selector().empty() ? "(every host)" : r.selector()},
      {"stages", absl::StrJoin(stages, ",")},
      {"stage", absl::StrCat(r.stage() + 1, " of ", r.stage_percents_size(), " (",
                             StagePercent(r), "%)")},
      {"soak", SoakText(r.soak_seconds())},
      {"stage started", TimeText(r.has_stage_started_time(), r.stage_started_time())},
      {"next stage", next ? TimeUtil::ToString(*next) : "-"},
      {"enabled hosts", absl::StrCat(r.enabled_count(), " (", r.matching_hosts(),
                                     " waiting host(s) match the selector",
                                     r.carried_count() > 0
                                         ? absl::StrCat(", ", r.carried_count(),
                                                        " enabled by rollouts before")
                                         : "",
                                     "; csctl hosts ls shows which)")},
  };
  fields.emplace_back("new hosts", NewHostsName(r.new_hosts()));
  if (r.state() == v1::Rollout::STATE_HALTED) fields.emplace_back("halted", r.halt_reason());
  fields.emplace_back("started", absl::StrCat(TimeText(r.has_started_time(), r.started_time()),
                                              r.started_by().empty() ? "" : " by ",
                                              r.started_by()));
  PrintFields(fields, out);
}

}  // namespace cosched::cli
