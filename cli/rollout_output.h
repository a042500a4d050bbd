// How csctl shows a staged rollout (csctl rollout ...): a JSON object for
// programs, a "key: value" block and a table of stages for people.
#ifndef COSCHED_CLI_ROLLOUT_OUTPUT_H_
#define COSCHED_CLI_ROLLOUT_OUTPUT_H_

#include <ostream>
#include <string>

#include "cosched/v1/types.pb.h"
#include "nlohmann/json.hpp"

namespace cosched::cli {

// Keys: rollout_id, state, selector, stages (percents), stage (from 1),
// stage_percent, soak_seconds, stage_started_time, next_stage_time (null
// unless running with a stage to come), enabled_count, carried_count,
// matching_hosts, halt_reason, halted_host, started_time, updated_time,
// started_by.
nlohmann::json RolloutToJson(const v1::Rollout& rollout);
void PrintRollout(const v1::Rollout& rollout, std::ostream& out);

}  // namespace cosched::cli

#endif  // COSCHED_CLI_ROLLOUT_OUTPUT_H_
