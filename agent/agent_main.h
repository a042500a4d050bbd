// cs-agent's command line: flags over the config file, checks, discovery,
// start, and the wait for a stop, as one function that cs-agent's main
// calls and tests call in process. Start-up is an ordered list of named
// steps over one state (as in Falco's app); the first failure ends the run
// with its exit code.
#ifndef COSCHED_AGENT_AGENT_MAIN_H_
#define COSCHED_AGENT_AGENT_MAIN_H_

#include <functional>
#include <ostream>

#include "absl/status/status.h"

namespace cosched::agent {

class Agent;

// Exit codes of RunAgentMain (--probe has its own: see PrintHostProbe).
inline constexpr int kAgentExitOk = 0;
// The agent could not start.
inline constexpr int kAgentExitStartFailed = 1;
// Bad flags, a bad config file or a bad value in it: nothing was started.
inline constexpr int kAgentExitUsage = 2;

// What the process gives RunAgentMain; tests give their own.
struct AgentMainEnvironment {
  // Called before the agent starts any thread (the process blocks its
  // signals there). May be empty.
  std::function<void()> before_start;
  // Runs once the agent enforces, and returns when it is to stop. `reload`
  // reads the config file again (with the same flags over it) and applies
  // it (Agent::Reload), logging what changed or why nothing did, and
  // counting it (cosched_agent_config_reloads_total); its status is for
  // tests.
  std::function<void(Agent& agent, const std::function<absl::Status()>& reload)>
      run_until_stopped;
};

// Blocks SIGINT, SIGTERM and SIGHUP before the agent starts; reloads on
// SIGHUP (systemctl reload) and returns on either of the others.
AgentMainEnvironment ProcessAgentEnvironment();

// `cs-agent [--config F] [--server A] [--host-id H] [--state-dir D]
// [--insecure] [--discovery M] [--metrics-listen A|off] [--probe]`. Prints
// errors as one line on `err` ("cs-agent: <file>:<line>: <rule>" when the
// file set the value) and returns the exit code.
int RunAgentMain(int argc, const char* const* argv, const AgentMainEnvironment& env,
                 std::ostream& out, std::ostream& err);

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_AGENT_MAIN_H_
