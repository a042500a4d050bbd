// Where and how csctl connects to csd. Every input (flags, environment,
// config file) is passed in, so the precedence rules are pure functions.
#ifndef COSCHED_CLI_SERVER_ADDRESS_H_
#define COSCHED_CLI_SERVER_ADDRESS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

#include "cosched/v1/config.pb.h"

namespace cosched::cli {

inline constexpr char kDefaultServer[] = "127.0.0.1:7443";
inline constexpr char kDefaultConfigPath[] = "/etc/cosched/csctl.yaml";
inline constexpr char kServerEnv[] = "CSCTL_SERVER";
inline constexpr char kConfigEnv[] = "CSCTL_CONFIG";
inline constexpr char kTokenEnv[] = "CSCTL_TOKEN";

// The config file to load: `flag` (--config), else `env` ($CSCTL_CONFIG),
// else kDefaultConfigPath when `default_exists`, else none. Empty strings
// count as unset.
std::optional<std::string> ResolveConfigPath(const std::string& flag,
                                             const std::string& env,
                                             bool default_exists);

// csd's Unix socket as a gRPC target: "unix:/run/cosched/csd.sock".
std::string DefaultLocalSocketTarget();

// The csd address: `flag` (--server), else `env` ($CSCTL_SERVER), else
// `config` (server: in the config file), else csd's Unix socket
// (DefaultLocalSocketTarget) when `local_socket_usable` (it exists on this
// host and this user may connect to it), else kDefaultServer. Empty strings
// count as unset. An address is host:port or unix:PATH.
std::string ResolveServerAddress(const std::string& flag,
                                 const std::string& env,
                                 const std::string& config,
                                 bool local_socket_usable = false);

// Connection flags as given on the command line; empty/false means unset.
struct ConnectionFlags {
  std::string server{};
  bool insecure = false;
  std::string ca_file{};
  std::string cert_file{};
  std::string key_file{};
  std::string token{};
  std::string token_file{};
};

// What the channel is built from.
struct ConnectionSettings {
  std::string server{};
  v1::TlsConfig tls{};
  bool insecure = false;
  // Sent as "authorization: Bearer <token>" on every call; empty for none.
  std::string bearer_token{};
};

// Replaces a leading "~/" of the config file's paths (tls.*_file,
// token_file) with `home` ($HOME), as a shell would; paths given as flags
// the shell has expanded already. Unchanged when `home` is empty.
void ExpandHomeInPaths(const std::string& home, v1::CsctlConfig* config);

// Merges flags over the environment's server over the config file: the
// address as ResolveServerAddress, each TLS file from its flag else the
// config, insecure when either the flag or the config sets it.
ConnectionSettings ResolveConnectionSettings(const ConnectionFlags& flags,
                                             const std::string& env_server,
                                             const v1::CsctlConfig& config,
                                             bool local_socket_usable = false);

// The bearer token: `flag` (--token), else the first line of `flag_file`
// (--token-file), else `env` ($CSCTL_TOKEN), else the first line of the
// config's token_file; empty for none. FAILED_PRECONDITION when a token file
// cannot be read or is empty, or when the token would go in plaintext to a
// non-loopback address (no CA in `settings`; a Unix socket is local).
absl::StatusOr<std::string> ResolveBearerToken(
    const std::string& flag, const std::string& flag_file,
    const std::string& env, const v1::CsctlConfig& config,
    const ConnectionSettings& settings);

}  // namespace cosched::cli

#endif  // COSCHED_CLI_SERVER_ADDRESS_H_
