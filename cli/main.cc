// csctl: the command-line client of csd. See cli/csctl.h.
#include <iostream>

#include "cli/csctl.h"

int main(int argc, char** argv) {
  return cosched::cli::RunCsctl(argc, argv,
                                cosched::cli::ProcessEnvironment(), std::cout,
                                std::cerr);
}
