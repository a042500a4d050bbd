// csd: decides which VMs may share SMT siblings, stores it durably and
// streams it to cs-agents. See server/daemon/csd_main.h.
#include <iostream>

#include "server/daemon/csd_main.h"

int main(int argc, char** argv) {
  return cosched::server::RunCsdMain(argc, argv, cosched::server::ProcessCsdEnvironment(),
                                     std::cout, std::cerr);
}
