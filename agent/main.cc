// cs-agent: keeps this hypervisor's VMs in their core-scheduling groups as
// csd assigns them. See agent/agent_main.h.
#include <iostream>

#include "agent/agent_main.h"

int main(int argc, char** argv) {
  return cosched::agent::RunAgentMain(argc, argv, cosched::agent::ProcessAgentEnvironment(),
                                      std::cout, std::cerr);
}
