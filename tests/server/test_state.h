// The desired state's parts and the readers csd builds beside them, wired as
// csd wires them (server/daemon/csd_server.cc), for tests, benchmarks and
// fuzzers that drive csd's domain logic without gRPC.
#ifndef COSCHED_TESTS_SERVER_TEST_STATE_H_
#define COSCHED_TESTS_SERVER_TEST_STATE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "policy/placement.h"
#include "server/engine/engine_loop.h"
#include "server/engine/policy_queries.h"
#include "server/fanout/watch_reads.h"
#include "server/replicas/external_changes.h"
#include "server/state/state_parts.h"
#include "server/stats/stats_queries.h"
#include "store/store.h"

namespace cosched::server::testing {

// StateParts with the readers of the other rooms: the assignment stream's
// (watches), GetStats' (stats_queries), Place's and ExplainVM's (policy)
// and the other replicas' changes (external).
struct TestState : StateParts {
  explicit TestState(store::Store& store, StatsAggregator::Clock stats_clock = nullptr,
                     const policy::PlacementOptions& placement_options = {})
      : StateParts(store, std::move(stats_clock), placement_options),
        conflicts(placement_options.conflicts),
        policy(store, placement, host_status, stats.engine, conflicts) {}

  // The policy engine over these parts, as csd makes it.
  std::unique_ptr<EngineLoop> MakeEngine(EngineOptions options, EngineLoop::Hooks hooks = {},
                                         EngineLoop::Observers observers = {}) {
    return std::make_unique<EngineLoop>(store, layouts, stats.engine, settings, conflicts,
                                        std::move(options), std::move(hooks),
                                        std::move(observers));
  }

  const std::vector<std::pair<std::string, std::string>> conflicts;

  WatchReads watches{store};
  StatsQueries stats_queries{store, stats.own};
  PolicyQueries policy;
  ExternalChanges external{store, effects, rollout};
};

}  // namespace cosched::server::testing

namespace cosched::server {
// Tests of every room name it as csd's own code names its parts.
using testing::TestState;
}  // namespace cosched::server

#endif  // COSCHED_TESTS_SERVER_TEST_STATE_H_
