// `cs-agent --probe`: what this host can do, for people and scripts.
#ifndef COSCHED_AGENT_HOST_PROBE_H_
#define COSCHED_AGENT_HOST_PROBE_H_

#include <ostream>

namespace cosched::agent {

// Prints the topology, whether SMT is active and whether the kernel does
// core scheduling. Returns 0 when the agent can tag here, 3 when it cannot,
// 1 when the host could not be read.
int PrintHostProbe(std::ostream& out);

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_HOST_PROBE_H_
