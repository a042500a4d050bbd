// The checks of what agents send csd (Register, Report): every figure and
// string an agent reports is bounded and named in the error, and stats
// count only for the VMs the same Report lists, so a broken or hostile
// agent cannot make csd store garbage or keep series for other hosts' VMs.
// What bounds csd's memory and work per host beyond that: the series limit
// of StatsAggregator (scaled by the VMs the host reports) and the Report
// rate of ReportRateLimit.
#ifndef COSCHED_SERVER_STATE_AGENT_INPUT_H_
#define COSCHED_SERVER_STATE_AGENT_INPUT_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/agent.pb.h"
#include "cosched/v1/types.pb.h"

namespace cosched::server::internal {

// At most 4096 cores of 1-8 CPUs, ids 0-65535, none listed twice.
absl::Status ValidateTopology(const v1::Topology& topology);

// A window's core figures index the topology the host registered; one
// past it would be summed into a core csd cannot name. A host that
// registered no cores cannot be checked (and has no core figures to show).
absl::Status ValidateStatsCores(
    const google::protobuf::RepeatedPtrField<v1::StatsWindow>& stats,
    const v1::Topology& topology);

// A known state, counts not negative, vcpus and strings bounded.
absl::Status ValidateEnforcement(absl::string_view field, const v1::VMEnforcement& e);
// A VM's domain metadata as an agent read it (docs/integrations.md): csd
// keeps it only within the agent's own limits (256 bytes a value, 16
// classes; the read error 1024 bytes). Its values are not judged here:
// they are input, checked as TagVM's when csd tags from them.
absl::Status ValidateDomainMetadata(absl::string_view field, const v1::DomainMetadata& m);

// INVALID_ARGUMENT naming `field`.<what> when a preflight (Register's
// capabilities, each Report) holds more than csd keeps.
absl::Status ValidatePreflight(const std::string& field, const v1::HostPreflight& p);

// A Report's impostors: at most 32 listed, impostor_count at least that
// many and at most a million, each with a pid and bounded strings.
absl::Status ValidateImpostors(const v1::ReportRequest& report);

// csd trusts a host for its own VMs' stats only: a stats window's entry
// counts when the same Report lists its VM (ReportRequest.vms), and is
// dropped otherwise, so that a host cannot make csd keep series for VMs
// it does not run (issue #32). The VM ids a Report lists, for IsListed.
absl::flat_hash_set<absl::string_view> ListedVms(const v1::ReportRequest& report);
// Removes from `report`'s windows every entry of a VM it does not list;
// returns how many it removed, and puts up to `max_sample` distinct ids of
// them in `sample` (may be null).
int64_t DropUnlistedStats(v1::ReportRequest& report, std::vector<std::string>* sample,
                          size_t max_sample = 10);

}  // namespace cosched::server::internal

#endif  // COSCHED_SERVER_STATE_AGENT_INPUT_H_
