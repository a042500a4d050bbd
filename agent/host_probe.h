// `cs-agent --probe`: what this host can do and whether tagging is safe
// here, for people (text) and programs (JSON).
#ifndef COSCHED_AGENT_HOST_PROBE_H_
#define COSCHED_AGENT_HOST_PROBE_H_

#include <ostream>

#include "agent/agent.h"
#include "host/preflight.h"

namespace cosched::agent {

// The hazard rules an agent with `options` applies.
host::HazardRules HazardRulesOf(const AgentOptions& options);

// Prints the topology, SMT, core-scheduling support and the safety
// preflight (host/preflight.h) with its hazards under `rules`. Returns 0
// when the agent can tag here, 3 when it cannot (no SMT, no core
// scheduling, a hazard), 1 when the host could not be read.
int PrintHostProbe(const host::HazardRules& rules, std::ostream& out, bool json);

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_HOST_PROBE_H_
