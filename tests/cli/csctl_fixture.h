// csctl as its main runs it (RunCsctl: the command line parsed, the command
// run), against the fake control plane, with no environment and no files:
// the base of the command tests.
#ifndef COSCHED_TESTS_CLI_CSCTL_FIXTURE_H_
#define COSCHED_TESTS_CLI_CSCTL_FIXTURE_H_

#include <sstream>
#include <string>
#include <vector>

#include "cli/csctl.h"
#include "gtest/gtest.h"
#include "tests/cli/fake_control_plane.h"

namespace cosched::cli {

class CsctlFixture : public ::testing::Test {
 protected:
  CsctlFixture() {
    env_.get_env = [](const std::string&) { return std::string(); };
    env_.file_exists = [](const std::string&) { return false; };
    env_.make_stub = [this](const ConnectionSettings&) -> absl::StatusOr<std::unique_ptr<Stub>> {
      return server_.NewStub();
    };
  }

  // csctl `args`: its exit code, what it printed in out_ and err_.
  int Run(const std::vector<std::string>& args) {
    std::vector<const char*> argv = {"csctl"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    out_.str("");
    err_.str("");
    return RunCsctl(static_cast<int>(argv.size()), argv.data(), env_, out_, err_);
  }

  testing::FakeServer server_;
  CsctlEnvironment env_;
  std::ostringstream out_, err_;
};

}  // namespace cosched::cli

#endif  // COSCHED_TESTS_CLI_CSCTL_FIXTURE_H_
