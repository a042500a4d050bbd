// The desired state's parts, built once and wired together. csd's assembly
// (server/daemon/csd_server.h) and tests build one; each caller is handed the
// parts it uses (constructor injection), never this whole: it holds the
// parts and no behaviour of its own.
#ifndef COSCHED_SERVER_STATE_STATE_PARTS_H_
#define COSCHED_SERVER_STATE_STATE_PARTS_H_

#include <utility>

#include "absl/status/status.h"
#include "policy/placement.h"
#include "server/state/audit_trail.h"
#include "server/state/commit_effects.h"
#include "server/state/host_status.h"
#include "server/state/hosts.h"
#include "server/state/layouts.h"
#include "server/state/placement_view.h"
#include "server/state/report_memory.h"
#include "server/state/reports.h"
#include "server/state/rollout_view.h"
#include "server/state/state_settings.h"
#include "server/state/tenant_policies.h"
#include "server/state/vms.h"
#include "server/stats/stats_queries.h"
#include "store/store.h"

namespace cosched::server {

struct StateParts {
  // `stats_clock` is the clock of the stats kept in memory (tests set it;
  // nullptr: the system clock). `placement` configures Place (class
  // conflicts); the view stays empty until Load.
  explicit StateParts(store::Store& store, StatsAggregator::Clock stats_clock = nullptr,
                      policy::PlacementOptions placement_options = {})
      : store(store), stats(store, stats_clock), placement(std::move(placement_options)) {}
  StateParts(const StateParts&) = delete;
  StateParts& operator=(const StateParts&) = delete;

  // Builds the placement view and reads the staged rollout from the store
  // (csd calls it once at start, before serving); from then on every
  // committed write keeps them current.
  absl::Status Load() {
    absl::Status loaded = placement.Load(store);
    if (loaded.ok()) loaded = rollout.Load(store);
    return loaded;
  }

  store::Store& store;
  AgentStats stats;
  StateSettings settings;
  PlacementView placement;
  RolloutView rollout;
  ReportMemory report_memory;
  CommitEffects effects{placement, report_memory};
  HostStatus host_status{settings, rollout, placement};
  Vms vms{store, effects, host_status, settings};
  TenantPolicies policies{store, effects};
  Hosts hosts{store, effects, host_status, settings, rollout};
  Reports reports{store, effects, host_status, settings, rollout, stats.own};
  Layouts layouts{store, effects};
  AuditTrail audit{store};
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_STATE_PARTS_H_
