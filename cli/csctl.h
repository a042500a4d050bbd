// csctl's command line: parses arguments with CLI11, resolves where csd is
// (flags, environment, config file), builds the stub and runs one command
// from commands.h. Everything it takes from the process is passed in, so
// tests run the whole parse path without a process.
#ifndef COSCHED_CLI_CSCTL_H_
#define COSCHED_CLI_CSCTL_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "cli/commands.h"
#include "cli/server_address.h"

namespace cosched::cli {

using StubFactory = std::function<absl::StatusOr<std::unique_ptr<Stub>>(
    const ConnectionSettings&)>;

// What csctl reads from its surroundings.
struct CsctlEnvironment {
  // The value of an environment variable; empty when unset.
  std::function<std::string(const std::string&)> get_env;
  // Whether a (config) file exists.
  std::function<bool(const std::string&)> file_exists;
  // Whether this process may connect to a Unix socket (csd's, at
  // kDefaultLocalSocket); unset: never, so csctl does not use it by default.
  std::function<bool(const std::string&)> can_connect;
  StubFactory make_stub;
};

// A channel to settings.server with credentials from
// MakeChannelCredentials (TLS when a CA is set; plaintext only on loopback
// unless insecure). FAILED_PRECONDITION for plaintext elsewhere, or when
// TLS files cannot be read.
absl::StatusOr<std::unique_ptr<Stub>> MakeControlPlaneStub(
    const ConnectionSettings& settings);

// The process's environment, the real file system and MakeControlPlaneStub.
CsctlEnvironment ProcessEnvironment();

// Runs `csctl ARGS...` and returns the exit code: 0, kExitRpcError, or
// kExitUsage for bad arguments or a bad config file (one "csctl: " line on
// `err`). --help prints to `out` and returns 0.
int RunCsctl(int argc, const char* const* argv, const CsctlEnvironment& env,
             std::ostream& out, std::ostream& err);

}  // namespace cosched::cli

#endif  // COSCHED_CLI_CSCTL_H_
